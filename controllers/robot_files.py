"""The files a robot process reads: its robot file, its policy's spec and observation spec,
and the hardware class it names. Each loader raises ValueError naming the problem and the fix.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import yaml

from rtinfer.launch.entry import EntryError, package_file, resolve
from rtinfer.model.action_spec import FORMAT as ACTION_SPEC_FORMAT
from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.model.card import read_card

from .config import ControlConfig
from .controller_config import obs_spec_from

ROBOT_KEYS = ("name", "control", "hardware")


def load_policy_spec(path: str | Path) -> tuple[TokenizerConfig | None, ActionSpec | None]:
    """The spec a policy's chunks carry: from a model directory (its tokenizer.json and/or
    action_spec.json) or one of those files. ValueError says what is wrong and the fix."""
    p = package_file(str(path))
    files = [p / "tokenizer.json", p / "action_spec.json"] if p.is_dir() else [p]
    found = [f for f in files if f.is_file()]
    if not found:
        raise ValueError(
            f"{path}: no policy spec there (a model directory with tokenizer.json "
            "or action_spec.json, or one of those files); check --model"
        )
    tok = act = None
    for f in found:
        try:
            doc = json.loads(f.read_text())
            if not isinstance(doc, dict):
                raise ValueError("not a JSON object")
            if doc.get("format") == ACTION_SPEC_FORMAT:
                act = ActionSpec.from_dict(doc)
            else:
                tok = TokenizerConfig.from_dict(doc)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{f}: not a valid action spec or tokenizer config: {e}") from None
    return tok, act


def card_max_committed(path: str | Path) -> int | None:
    """An action-token model's max_committed, which its card.json holds (its tokenizer.json
    has no place for it): None for a file, a directory without one, or a card without it.
    ValueError for a value that is not an integer >= 0."""
    p = package_file(str(path))
    if not (p.is_dir() and (p / "tokenizer.json").is_file()):
        return None
    return read_card(p).get("max_committed")


def load_robot(path: str | Path) -> tuple[str, ControlConfig, dict]:
    """(name, control, hardware kwargs) from a robot YAML file; ValueError names the problem."""
    try:
        doc = yaml.safe_load(package_file(str(path)).read_text())
    except OSError as e:
        raise ValueError(f"robot config {path}: {e.strerror}; check --config") from None
    except yaml.YAMLError as e:
        raise ValueError(f"robot config {path}: not valid YAML: {e}".replace("\n", " ")) from None
    if not isinstance(doc, dict) or set(doc) - set(ROBOT_KEYS) or "control" not in doc:
        keys = sorted(doc) if isinstance(doc, dict) else doc
        raise ValueError(
            f"robot config {path}: needs `control` and may have {list(ROBOT_KEYS)}, got {keys}"
        )
    hardware = doc.get("hardware") or {}
    if not isinstance(hardware, dict):
        raise ValueError(
            f"robot config {path}: `hardware` must be a mapping of keyword "
            "arguments for the hardware class"
        )
    try:
        control = ControlConfig.from_dict(doc["control"])
    except (ValueError, TypeError) as e:
        raise ValueError(f"robot config {path}: {e}") from None
    return str(doc.get("name") or "robot"), control, hardware


def hardware_class(ref: str):
    """The class named by MODULE:CLASS; ValueError says why not."""
    try:
        return resolve(ref)
    except EntryError as e:
        raise ValueError(
            f"--hardware {ref!r}: {e} (give it as MODULE:CLASS, e.g. "
            "examples.arm_reach.sim:ArmSim, importable from this directory or "
            "installed)"
        ) from None


def build_hardware(cls, control: ControlConfig, hardware: dict):
    """cls(control, **hardware), its keyword arguments checked against its signature first."""
    params = list(inspect.signature(cls).parameters.values())[1:]
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        known = [p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
        unknown = sorted(set(hardware) - set(known))
        if unknown:
            raise ValueError(
                f"hardware options {unknown} are not {cls.__name__}'s; it takes {known}"
            )
    return cls(control, **hardware)


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: give it as KEY=VALUE, e.g. --set seed=3")
        out[key] = yaml.safe_load(value)
    return out


def load_obs_spec(path: str | Path):
    """The observation spec of the policy at `path` (a model directory: its obs_spec.json or
    obs_tokens.json), or None (none there, or `path` names a spec file)."""
    p = package_file(str(path))
    for name in ("obs_spec.json", "obs_tokens.json"):
        f = p / name
        if p.is_dir() and f.is_file():
            try:
                return obs_spec_from(json.loads(f.read_text()))
            except (ValueError, TypeError, KeyError) as e:
                raise ValueError(f"{f}: not a valid observation spec: {e}") from None
    return None
