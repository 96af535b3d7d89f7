"""Command-line options generated from a config dataclass, so a flag is never declared twice.

    @dataclass
    class NodeConfig:
        name: str = "infer"
        deadline_ms: float = DEADLINE_MS
        prefix_cache: bool = True                       # --prefix-cache / --no-prefix-cache
        trace_path: str | None = option(None, flag="--trace", help="write the trace here")

    add_config_arguments(parser, NodeConfig)          # one option per field
    cfg = config_from_args(NodeConfig, parser.parse_args(argv))

A field's flag is `--` + its name with dashes (metadata `flag` renames it); bool fields get
`--x/--no-x`; `T | None` takes a T; tuple and list fields take several values. Metadata
`help` and `choices` go to argparse as they are; `cli=False` leaves a field off the command
line. The dataclass's own checks (`__post_init__`) run in config_from_args: a ValueError there
is the caller's to turn into one line (parser.error).
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from types import NoneType, UnionType
from typing import Any


def option(
    default: Any = dataclasses.MISSING,
    *,
    flag: str | None = None,
    help: str | None = None,
    choices=None,
    cli: bool = True,
    **kw,
) -> Any:
    """A dataclasses.field with the command-line metadata this module reads."""
    meta = {"flag": flag, "help": help, "choices": choices, "cli": cli}
    return dataclasses.field(default=default, metadata=meta, **kw)


def _dest(cls) -> str:
    return f"_config_{cls.__name__}"


def _kind(hint) -> tuple[type, bool]:
    """(the element type argparse converts to, whether the option takes several values)."""
    args = typing.get_args(hint)
    if isinstance(hint, UnionType) or typing.get_origin(hint) is typing.Union:
        inner = [a for a in args if a is not NoneType]
        return _kind(inner[0]) if len(inner) == 1 else (str, False)
    if typing.get_origin(hint) in (tuple, list):
        return (args[0] if args else str), True
    return hint, False


def add_config_arguments(
    parser: argparse.ArgumentParser, cls, *, skip: tuple[str, ...] = ()
) -> None:
    """One option per field of dataclass `cls` (defaults from the dataclass itself)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.name in skip or not meta.get("cli", True):
            continue
        flag = meta.get("flag") or "--" + f.name.replace("_", "-")
        kw: dict[str, Any] = {
            "dest": f"{_dest(cls)}.{f.name}",
            "help": meta.get("help"),
            "default": argparse.SUPPRESS,
        }
        elem, several = _kind(hints[f.name])
        if elem is bool:
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["type"] = elem
            if several:
                kw["nargs"] = "*"
            if meta.get("choices") is not None:
                kw["choices"] = meta["choices"]
            if meta.get("choices") is None:
                kw["metavar"] = flag.lstrip("-").replace("-", "_").upper()
        parser.add_argument(flag, **kw)


def config_values(cls, args: argparse.Namespace) -> dict[str, Any]:
    """The fields given on the command line (those left out keep the dataclass defaults)."""
    prefix = f"{_dest(cls)}."
    out = {}
    for key, value in vars(args).items():
        if key.startswith(prefix):
            name = key[len(prefix) :]
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def config_from_args(cls, args: argparse.Namespace, **overrides):
    """An instance of `cls` from parsed arguments, `overrides` winning over both."""
    return cls(**{**config_values(cls, args), **overrides})
