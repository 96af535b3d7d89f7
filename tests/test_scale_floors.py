"""rtinfer.bench.scale_floors: a step's FLOPs from its config, the floors a measured time is
held against, and the matmul rates measured on this host's ONNX Runtime kernels."""

import pytest

from rtinfer.bench.scale_floors import floors, matmul_gflops, step_flops

RUNG_100M = {"n_layer": 14, "n_embd": 768, "vocab_size": 519, "max_ctx": 64}


def test_step_flops_count_the_weights_twice_per_token_and_attention_over_the_cache():
    c = RUNG_100M
    weights = 14 * 12 * 768 * 768 + 768 * 519
    assert step_flops(c, 1) == 2 * weights + 4 * 14 * 64 * 768
    assert step_flops(c, 8) == pytest.approx(8 * step_flops(c, 1))
    assert step_flops(c, 1, depth=9) < step_flops(c, 1)
    assert 0.19e9 < step_flops(c, 1) < 0.21e9  # ~2 FLOPs per parameter of a 100 M policy


def test_a_verify_is_compute_bound_where_the_step_is_bandwidth_bound():
    # 64 MB of int4 weights at 40 GB/s, 150 GFLOP/s: the step streams, the verify computes
    f = floors(
        RUNG_100M, 64_000_000, 40.0, 150.0, {"step": 3.2, "verify": 16.0}, {"step": 1, "verify": 8}
    )
    assert f["step"]["bound"] == "bandwidth" and f["verify"]["bound"] == "compute"
    assert f["step"]["bandwidth_floor_ms"] == pytest.approx(1.6)
    assert f["step"]["over_floor"] == pytest.approx(2.0)
    assert f["verify"]["compute_floor_ms"] == pytest.approx(1.614e9 / 150e9 * 1e3, rel=1e-3)
    assert f["verify"]["over_floor"] == pytest.approx(16.0 / f["verify"]["compute_floor_ms"])


def test_matmul_rates_are_measured_for_each_precision_the_graphs_use():
    rates = matmul_gflops(("fp32", "int4"), repeats=3)
    assert set(rates) == {"fp32", "int4"}
    assert all(0.1 < r < 100_000 for r in rates.values())
