"""Sorting outcome counters for one run of the cell."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Metrics:
    """Counts since the last reset. Every spawned object ends as exactly one of correct,
    wrong, missed (passed the belt end unpicked) or dropped (released anywhere but a bin,
    or picked, put back and then lost) - or is still in play."""

    spawned: int = 0
    picked: int = 0  # suction attached (a re-grip of the same object counts again)
    correct: int = 0
    wrong: int = 0
    missed: int = 0
    dropped: int = 0
    pool_exhausted: int = 0  # spawns skipped because every body of the class was in use
    elapsed_s: float = 0.0

    @property
    def resolved(self) -> int:
        return self.correct + self.wrong + self.missed + self.dropped

    @property
    def success_rate(self) -> float:
        """correct / resolved (1.0 before anything resolved)."""
        return self.correct / self.resolved if self.resolved else 1.0

    @property
    def throughput_per_min(self) -> float:
        """Correctly sorted objects per minute of simulated time."""
        return 60.0 * self.correct / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "resolved": self.resolved,
            "success_rate": self.success_rate,
            "throughput_per_min": self.throughput_per_min,
        }
