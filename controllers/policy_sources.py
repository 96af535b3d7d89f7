"""PolicySources: which policies sent chunks for this robot, and which only others'."""

from __future__ import annotations

DEST_GRACE_NS = 1_000_000_000  # another robot's chunks only, this long: a misconfiguration


class PolicySources:
    """The policies (by src) that sent chunks for this robot, and since when the others
    have sent only other robots' chunks (a misconfiguration after DEST_GRACE_NS)."""

    def __init__(self):
        self._served_by: set[str] = set()  # policies whose chunks this robot followed
        self._others_since: dict[str, int] = {}  # policy -> its first chunk for another robot

    def followed(self, src: str) -> None:
        self._served_by.add(src)

    def only_others(self, src: str, now: int) -> bool:
        """Policy `src` has sent only other robots' chunks, for DEST_GRACE_NS or longer."""
        if src in self._served_by:
            return False
        return now - self._others_since.setdefault(src, now) >= DEST_GRACE_NS
