"""A model's card.json (optional in a model directory: lineage, accuracy per exit depth,
max_committed, ...): the one reader of the keys both sides use. Robot-safe (the standard
library only): the robot reads a token model's max_committed from it (its tokenizer.json
has no place for it), the node reads the same key through ModelDir.card."""

from __future__ import annotations

import json
from pathlib import Path


def read_card(model_dir: str | Path) -> dict:
    """The card of a model directory ({} where it has none), its shared keys checked, so a
    reader takes them as they are; ValueError for a card that is not a JSON object, naming
    the fix, or whose max_committed (the most committed waypoints the policy conditions on)
    is not an integer >= 0."""
    card = Path(model_dir) / "card.json"
    if not card.is_file():
        return {}
    try:
        doc = json.loads(card.read_text())
    except ValueError as e:
        raise ValueError(f"{card}: not JSON ({e}); re-package the model") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{card}: not a JSON object; re-package the model")
    m = doc.get("max_committed")
    if m is not None and (not isinstance(m, int) or isinstance(m, bool) or m < 0):
        raise ValueError(f"{card}: max_committed {m!r} must be an integer >= 0")
    return doc
