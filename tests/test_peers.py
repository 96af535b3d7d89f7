"""Smoke tests for `rtinfer bench peers`: every row's code path runs with tiny counts and
gives well-formed rows. No timing claims here (those live in the benchmark's own ratios);
rows whose peer package is missing are skipped."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from peers import markdown
from peers import run as peers
from peers.row import make_row

QUICK = peers.Counts.quick()
FIELDS = {
    "name",
    "peer",
    "peer_version",
    "peer_available",
    "unit",
    "rtinfer_p50",
    "peer_p50",
    "rtinfer_p99",
    "peer_p99",
    "speedup_p50",
    "speedup_p99",
    "target_speedup_p50",
    "runs",
}


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _check(rows: list[dict], name: str) -> None:
    assert rows and all(r["name"] == name for r in rows)
    for r in rows:
        assert FIELDS <= set(r)
        assert r["peer_available"], r.get("skipped")
        assert r["rtinfer_p50"] > 0 and r["peer_p50"] > 0
        assert r["speedup_p50"] == pytest.approx(r["peer_p50"] / r["rtinfer_p50"], rel=0.02)


def test_speedup_is_peer_over_rtinfer():
    row = make_row("x", "peer", "1", np.full(10, 1000), np.full(10, 3000), target_speedup_p50=2)
    assert row["speedup_p50"] == 3.0 and row["target_met"] is True
    assert row["runs"] == {"rtinfer": 10, "peer": 10}


@pytest.mark.skipif(
    not (_has("grpc") and _has("google.protobuf")), reason="grpcio/protobuf missing"
)
def test_roundtrip_row_compares_bus_with_lerobot_grpc(tmp_path):
    from peers import roundtrip

    rows = roundtrip.rows(QUICK.roundtrips, QUICK.blocks, str(tmp_path), warmup=2)
    _check(rows, "transport_vs_lerobot_grpc")
    assert {r["variant"] for r in rows} == {
        "image96+state",
        "state_only",
        "state_only_back_to_back",
    }
    assert all(r["runs"]["rtinfer"] == r["runs"]["peer"] == QUICK.roundtrips for r in rows)


@pytest.mark.slow
@pytest.mark.skipif(not _has("zenoh"), reason="eclipse-zenoh not installed")
def test_zenoh_row_receives_messages_on_both_paths(tmp_path):
    from peers import zenoh_raw

    rows = zenoh_raw.rows(
        QUICK.messages, QUICK.blocks, str(tmp_path), payloads=("image",), transports=("ipc",)
    )
    _check(rows, "transport_vs_zenoh")
    assert [r["variant"] for r in rows] == ["image/ipc"] and rows[0]["raw_pyzmq_p50"] > 0


@pytest.mark.skipif(not (_has("torch") and _has("onnxruntime")), reason="needs torch + onnxruntime")
def test_policy_row_is_token_identical_and_spec_matches_its_log(tmp_path):
    from peers import decode, torch_eager
    from rtinfer.bench.backend import make_random_model

    model = make_random_model("demo", tmp_path / "demo")
    rows = torch_eager.rows(model, QUICK.policy_cycles, warmup=1)
    _check(rows, "policy_vs_torch_eager")
    assert rows[0]["identical"] and rows[0]["mismatched_chunks"] == 0
    spec = decode.spec_rows(model, QUICK.spec_cycles)
    assert {r["variant"] for r in spec} == {"chunk", "self"}
    assert all(
        r["identical"] and r["verifies"] > 0 and r["theory_tokens_per_verify"] >= 1 for r in spec
    )


def test_theory_is_one_token_at_zero_acceptance_and_g_plus_one_at_full():
    from peers.decode import theory_tokens_per_verify

    assert theory_tokens_per_verify(0.0, [3, 5]) == 1.0
    assert theory_tokens_per_verify(1.0, [3]) == 4.0
    assert theory_tokens_per_verify(0.5, [2]) == pytest.approx(1.75)


def test_loop_row_runs_idle_and_under_stress():
    from peers import loop

    rows = loop.rows(QUICK.loop_seconds, stress=1)
    assert [r["variant"] for r in rows] == ["idle", "stress x1"]
    assert all(r["runs"]["rtinfer"] > 0 and r["peer_p999"] is not None for r in rows)


def test_markdown_replaces_only_its_own_section(tmp_path):
    result = {
        "machine": peers.machine(),
        "command": peers.COMMAND,
        "counts": {},
        "rows": [
            make_row(
                "transport_vs_zenoh",
                "Zenoh",
                "1",
                [100, 200],
                [90, 95],
                variant="chunk/tcp",
                target_speedup_p50=0.67,
            )
        ],
    }
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other\nkeep me\n")
    peers.write_markdown(result, doc)
    peers.write_markdown(result, doc)  # idempotent: one section, other text intact
    text = doc.read_text()
    assert "keep me" in text and text.count(markdown.BEGIN) == 1
    assert "transport_vs_zenoh" in text and str(Path(peers.COMMAND)) in text
