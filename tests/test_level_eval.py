"""Measuring budget levels in lockstep: refused (late) chunks, and `rtinfer eval --level`."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from examples.conveyor_sorting.evaluate import LateChunks

MODEL = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1"


class Counting:
    """A policy whose n-th chunk is H waypoints all equal to n."""

    def __init__(self, horizon):
        self.horizon, self.n, self.resets = horizon, 0, 0

    def reset(self):
        self.resets += 1

    def act(self, obs):
        self.n += 1
        return np.full((self.horizon, 2), float(self.n))


def test_a_refused_chunk_leaves_the_robot_the_rest_of_the_last_one_it_took():
    inner = Counting(horizon=3)
    late = LateChunks(inner, late=0.999, seed=0)
    first = late.act({})  # nothing taken yet: the first is taken
    assert first.shape == (3, 2) and first[0, 0] == 1
    rest = [late.act({}) for _ in range(4)]
    assert [len(r) for r in rest] == [2, 1, 1, 1]  # its waypoints run out, then its last holds
    assert all((r == 1).all() for r in rest)
    assert inner.n == 5 and late.refused == 4  # every chunk was still computed
    late.reset()
    assert inner.resets == 1 and late.act({})[0, 0] == 6


def test_no_lateness_passes_every_chunk_and_the_fraction_is_seeded():
    on_time = LateChunks(Counting(2), late=0.0)
    assert [on_time.act({})[0, 0] for _ in range(5)] == [1, 2, 3, 4, 5] and on_time.refused == 0
    runs = []
    for _ in range(2):
        lc = LateChunks(Counting(4), late=0.3, seed=7)
        for _ in range(400):
            lc.act({})
        runs.append(lc.refused)
    assert runs[0] == runs[1] and 60 < runs[0] < 180
    with pytest.raises(ValueError, match="late"):
        LateChunks(Counting(2), late=1.0)


def test_eval_at_a_level_the_model_lacks_is_one_line_and_exit_2():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "eval",
            "--policy",
            str(MODEL),
            "--level",
            "9",
            "--episodes",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [
        "rtinfer eval: this model has 5 budget levels (0 .. 4, or -1 for the cheapest)"
    ]
