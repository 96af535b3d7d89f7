"""The vocabulary layout shared by training and runtime: contiguous id ranges.

    [specials][instruction ids][observation bins][action bins]

Action bins are one contiguous range, so a decoder masks logits to
`logits[..., action_start:action_stop]`. models.config.Vocab extends this with checked
mappings; the runtime needs only the ranges (rtinfer never imports models).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VocabLayout:
    n_instr: int
    n_obs_bins: int
    n_action_bins: int
    specials: tuple[str, ...]

    @property
    def instr_start(self) -> int:
        return len(self.specials)

    @property
    def obs_start(self) -> int:
        return self.instr_start + self.n_instr

    @property
    def action_start(self) -> int:
        return self.obs_start + self.n_obs_bins

    @property
    def action_stop(self) -> int:
        return self.action_start + self.n_action_bins

    @property
    def size(self) -> int:
        """vocab_size of the model."""
        return self.action_stop

    def special(self, name: str) -> int:
        """Vocab id of a special token, e.g. special("BOS")."""
        return self.specials.index(name)
