"""What a continuous-chunk or flow model directory carries beside its graphs: its manifest's
header, its specs and card, and the card's per-level accuracy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.directory import ModelError, _card, _json
from rtinfer.model.obs_spec import ObsSpec


def read_specs(path: Path) -> tuple[ActionSpec, ObsSpec, dict]:
    """A chunk or flow directory's action spec, obs spec and card ({} without card.json)."""
    try:
        action = ActionSpec.from_dict(
            _json(path / "action_spec.json", "write the policy's ActionSpec there")
        )
    except (ValueError, TypeError) as e:
        raise ModelError(f"{path / 'action_spec.json'}: {e}") from None
    try:
        obs = ObsSpec(_json(path / "obs_spec.json", "write the policy's ObsSpec there"))
    except (ValueError, TypeError) as e:
        raise ModelError(f"{path / 'obs_spec.json'}: {e}") from None
    card = _card(path)
    return action, obs, card


def read_kind_manifest(path: Path, kind: str, hint: str) -> dict:
    """`path`/graphs.json, checked to be an rtinfer-graphs v2 manifest of `kind`; ModelError
    otherwise (hint: how to write one, for a missing file)."""
    manifest = _json(path / "graphs.json", hint)
    if (
        manifest.get("format") != "rtinfer-graphs"
        or manifest.get("version") != 2
        or manifest.get("kind") != kind
    ):
        raise ModelError(
            f"{path / 'graphs.json'}: not an rtinfer-graphs v2 manifest of kind {kind!r}"
        )
    return manifest


def card_accuracy(card: dict, level: int) -> float | None:
    """The accuracy card.json gives `level`, or None."""
    for entry in card.get("levels", []):
        if entry.get("level") == level and entry.get("accuracy") is not None:
            return float(entry["accuracy"])
    return None


@dataclass
class SpecDir:
    """The fields a continuous-chunk and a flow model directory share: where it is, its
    graphs.json, its action and obs specs and its card ({} without card.json)."""

    path: Path
    manifest: dict
    action: ActionSpec
    obs: ObsSpec
    card: dict = field(default_factory=dict)

    def accuracy(self, level: int) -> float | None:
        return card_accuracy(self.card, level)
