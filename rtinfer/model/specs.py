"""The specs a continuous-chunk or flow model directory carries beside its graphs."""
from __future__ import annotations

from pathlib import Path

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.directory import ModelError, _json
from rtinfer.model.obs_spec import ObsSpec


def read_specs(path: Path) -> tuple[ActionSpec, ObsSpec, dict]:
    """A chunk or flow directory's action spec, obs spec and card ({} without card.json)."""
    try:
        action = ActionSpec.from_dict(_json(path / "action_spec.json",
                                            "write the policy's ActionSpec there"))
    except (ValueError, TypeError) as e:
        raise ModelError(f"{path / 'action_spec.json'}: {e}") from None
    try:
        obs = ObsSpec(_json(path / "obs_spec.json", "write the policy's ObsSpec there"))
    except (ValueError, TypeError) as e:
        raise ModelError(f"{path / 'obs_spec.json'}: {e}") from None
    card = _json(path / "card.json", "") if (path / "card.json").exists() else {}
    return action, obs, card
