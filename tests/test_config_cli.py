"""Options generated from a config dataclass: names, types, bools, several values, renames."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from rtinfer.realtime.config_cli import add_config_arguments, config_from_args, option


@dataclass
class Cfg:
    name: str = "infer"
    deadline_ms: float = 100.0
    threads: int = 1
    prefix_cache: bool = True
    batch: int | None = None
    required: tuple[str, ...] = ()
    trace_path: str | None = option(None, flag="--trace", help="trace file")
    drafter: str = option("chunk", choices=("chunk", "none"))
    hidden: int = option(7, cli=False)

    def __post_init__(self):
        if self.deadline_ms <= 0:
            raise ValueError(f"deadline_ms is {self.deadline_ms}: use a deadline > 0 ms")


def parse(*argv):
    p = argparse.ArgumentParser()
    add_config_arguments(p, Cfg)
    return p, p.parse_args(list(argv))


def test_defaults_come_from_the_dataclass():
    _, a = parse()
    assert config_from_args(Cfg, a) == Cfg()


def test_each_kind_of_field_parses_to_its_type():
    _, a = parse(
        "--name",
        "n2",
        "--deadline-ms",
        "50",
        "--threads",
        "2",
        "--no-prefix-cache",
        "--batch",
        "4",
        "--required",
        "sim",
        "infer",
        "--trace",
        "t.trace",
        "--drafter",
        "none",
    )
    cfg = config_from_args(Cfg, a)
    assert cfg == Cfg(
        name="n2",
        deadline_ms=50.0,
        threads=2,
        prefix_cache=False,
        batch=4,
        required=("sim", "infer"),
        trace_path="t.trace",
        drafter="none",
    )


def test_overrides_win_and_hidden_fields_have_no_flag():
    p, a = parse("--threads", "3")
    assert config_from_args(Cfg, a, threads=5).threads == 5
    with pytest.raises(SystemExit):
        p.parse_args(["--hidden", "1"])
    with pytest.raises(SystemExit):
        p.parse_args(["--drafter", "nope"])


def test_the_dataclass_checks_still_run():
    _, a = parse("--deadline-ms", "-1")
    with pytest.raises(ValueError, match="deadline_ms is -1"):
        config_from_args(Cfg, a)
