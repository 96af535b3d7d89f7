"""`rtinfer bench dynamic`: one row per variant, every drafter lossless, figures consistent."""

import json


def test_bench_dynamic_rows_cover_dense_and_every_drafter(tiny_model_dir, tmp_path, capsys):
    from rtinfer.bench.dynamic import main
    from rtinfer.bench.dynamic_figures import params

    assert main(["--model", str(tiny_model_dir), "--quick", "--json", "--ffn-skip", "1"]) == 0
    r = json.loads(capsys.readouterr().out)
    rows = {row["variant"]: row for row in r["rows"]}
    assert list(rows)[0] == "dense" and r["runs"] == 2
    assert {"chunk", "self", "cascade", "model:truncated-d1"} <= set(rows)
    assert any(name.startswith("cascade-k") for name in rows)
    dense = rows.pop("dense")
    assert dense["active_flops_per_token"] == 1.0 and dense["identical"] is None
    cfg = json.loads((tiny_model_dir / "graphs.json").read_text())["config"]
    assert dense["params"] == params(cfg)
    assert rows["model:truncated-d1"]["params"] > dense["params"]
    skip = rows.pop("ffn-skip:1")
    assert skip["identical"] is None and skip["success"] is None
    assert 0 <= skip["token_agreement"] <= 1 and skip["step_ratio"] > 0
    assert skip["active_flops_per_token"] < 1 and skip["params"] < dense["params"]
    for name, row in rows.items():
        assert row["identical"] is True, name
        assert row["speedup"] > 0 and row["step_p50_us"] > 0 and row["chunk_p50_ms"] > 0
        assert row["speedup_min"] <= row["speedup"] <= row["speedup_max"]
        assert row["cpu_speedup_min"] <= row["cpu_speedup"] <= row["cpu_speedup_max"]
        assert row["active_flops_per_token"] > 0
        assert row["success_from"].startswith("dense")


def test_param_count_matches_the_torch_policy():
    from models.config import PolicyConfig
    from models.policy import Policy
    from rtinfer.bench.dynamic_figures import params

    for bias in (True, False):
        cfg = PolicyConfig(
            vocab_size=50, n_layer=2, n_head=2, n_embd=16, max_ctx=24, exits=(1,), bias=bias
        )
        assert params(cfg.to_dict()) == Policy(cfg).num_params()
