"""`rtinfer bench flow --json`: both forms of the same flow policy give the same chunk, and
each level reports medians, p99 and run counts of both, interleaved."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")


def test_bench_flow_reports_looped_and_unrolled_per_level_with_equal_chunks():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "bench",
            "flow",
            "--json",
            "--rounds",
            "4",
            "--size",
            "tiny",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    (size,) = out["sizes"]
    assert [lv["steps"] for lv in size["levels"]] == [10, 4, 2, 1]
    for lv in size["levels"]:
        assert lv["max_abs_diff"] < 1e-5
        assert lv["looped_runs"] == lv["unrolled_runs"] == 4
        assert lv["looped_p50_us"] <= lv["looped_p99_us"]
