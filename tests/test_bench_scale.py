"""`rtinfer bench scale --quick`: the shipped policy and a tiny random rung (exported into a
temporary cache), fp32 and int8, plain and speculative. Keys as issue 20 names them, numbers
that hang together, measured speculation identical to plain greedy, projections labelled, and
the deadline verdict following the rows. The full ladder (up to 300 M) is `rtinfer bench
scale --json`, run by hand (docs/benchmarks.md)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtinfer.bench.scale import largest_meeting

ROOT = Path(__file__).resolve().parents[1]
KEYS = {
    "params",
    "precision",
    "method",
    "chunk_p50_ms",
    "chunk_p99_ms",
    "step_over_floor",
    "torch_eager_chunk_ms",
    "projected",
}


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    png = cache / "scale.png"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "bench",
            "scale",
            "--quick",
            "--json",
            "--plot",
            str(png),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), cache, png


@pytest.mark.slow
def test_quick_ladder_has_every_row_with_the_issue_keys(quick):
    result, cache, png = quick
    assert result["deadline_ms"] == 100
    rows = result["rows"]
    assert all(KEYS <= set(r) for r in rows)
    cells = {(r["rung"], r["precision"], r["method"]) for r in rows}
    assert cells == {
        (s, p, m)
        for s in ("1M", "tiny")
        for p in ("fp32", "int8")
        for m in ("plain", "speculative")
    }
    assert any(cache.glob("rtinfer/scale/tiny-*/int8/weights.bin"))  # exported into the cache
    assert png.stat().st_size > 0


@pytest.mark.slow
def test_quick_numbers_are_sane(quick):
    result, _, _ = quick
    rows = result["rows"]
    for r in rows:
        assert 0 < r["chunk_p50_ms"] <= r["chunk_p99_ms"] < 10_000
        assert 0 < r["prefill_p50_ms"] < r["chunk_p50_ms"] or r["method"] == "speculative"
        assert r["step_over_floor"] > 0.5  # a step cannot beat streaming its weights by 2x
        assert r["torch_eager_chunk_ms"] > 0
    shipped = {r["params"] for r in rows if r["rung"] == "1M"}
    tiny = {r["params"] for r in rows if r["rung"] == "tiny"}
    assert shipped == {1_330_944} and len(tiny) == 1 and max(tiny) < min(shipped)
    for r in rows:  # measured on the trained policy, projected on random weights
        if r["method"] == "speculative":
            assert r["projected"] == (r["rung"] != "1M")
            assert r.get("identical", True) is True
        else:
            assert r["projected"] is False
            assert r["exit_chunk_p50_ms"] > 0 and r["exit_depth"] < 6 or r["rung"] == "tiny"
    over = result["overheads"]
    assert result["fixed_overheads_ms"] == pytest.approx(sum(over["parts_ms"].values()))
    assert 0 < result["fixed_overheads_ms"] < 100 and over["source"]
    assert result["largest_params_meeting_deadline"] == largest_meeting(
        rows, result["fixed_overheads_ms"]
    )


@pytest.mark.slow
def test_random_rungs_time_the_kv_read_in_place_against_the_whole_kv_rewritten(quick):
    rows = [r for r in quick[0]["rows"] if r["method"] == "plain"]
    for r in rows:
        if r["rung"] == "1M":  # the shipped directory has no KV-rows twins
            assert r["kv"] == "full" and "kv_full_chunk_p50_ms" not in r
            continue
        assert r["kv"] == "rows" and r["kv_rows_identical"] is True
        assert 0 < r["kv_full_chunk_p50_ms"] <= r["kv_full_chunk_p99_ms"]
        assert r["kv_full_step_p50_ms"] > 0 and r["kv_full_verify_p50_ms"] > 0
    assert {r["rung"] for r in rows if r["kv"] == "rows"} == {"tiny"}


def test_the_verdict_counts_measured_rows_under_the_deadline_only():
    rows = [
        {"params": 1, "chunk_p99_ms": 10.0, "projected": False},
        {"params": 5, "chunk_p99_ms": 95.0, "projected": False},
        {"params": 9, "chunk_p99_ms": 20.0, "projected": True},
        {"params": 7, "chunk_p99_ms": 101.0, "projected": False},
    ]
    assert largest_meeting(rows, 4.0) == 5
    assert largest_meeting(rows, 6.0) == 1  # 95 + 6 is over
    assert largest_meeting(rows, 95.0) is None


@pytest.mark.slow
def test_cost_sweep_covers_each_length_and_longer_chunks_cost_more(tmp_path, monkeypatch):
    from rtinfer.bench.scale_sweep import VALUES, sweep

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    s = sweep("tiny", "fp32", runs=3, log=lambda msg: None)
    assert set(s["points"]) == set(VALUES) == {"H", "D", "L", "C"}
    for var, pts in s["points"].items():
        assert sorted({p["value"] for p in pts}) == sorted(VALUES[var])
        assert all(0 < p["chunk_p50_ms"] <= p["chunk_p99_ms"] for p in pts)
    assert {p["prefix"] for p in s["points"]["C"]} == {"cached", "uncached"}
    h = {p["value"]: p["chunk_p50_ms"] for p in s["points"]["H"]}
    assert h[16] > 2 * h[1]  # 64 decoded tokens against 4
    assert s["slopes_ms"]["H_per_token"] > 0


def test_sizes_without_the_shipped_policy_is_one_usage_line_not_a_traceback():
    out = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "bench", "scale", "--json", "--sizes", "100M"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and out.stdout == ""
    assert "Traceback" not in out.stderr and "--sizes must include 1M" in out.stderr
