"""Gated budget levels (graphs.json "gated"): a model directory declares token-gated graph sets,
the ModelDir checks them, default_levels places them by measured cost, the runner switches to
them with no reload, and speculative output stays identical to each level's plain greedy."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import random_obs_body

from rtinfer.inference.backends import get_backend
from rtinfer.inference.backends.base import BackendError
from rtinfer.inference.budget import BudgetLevel, default_levels
from rtinfer.inference.runner import TokenRunner
from rtinfer.model.directory import ModelDir, ModelError

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "zoo" / "conveyor-v1-large-gated"


@pytest.fixture(scope="module")
def gated_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with random (token-dependent) routers, shipped at tau 0.3 (declared
    step ratio 0.9), 0.6 (0.5) and 0.8 (1.2: not cheaper than dense)."""
    import torch
    from safetensors.torch import save_file

    from models import checkpoint
    from models.gating import GatedPolicy, ship_gated

    torch.manual_seed(0)
    gated = GatedPolicy(checkpoint.load(tiny_model_dir / "policy").model)
    for r in gated.routers:
        torch.nn.init.normal_(r.weight, std=2.0)
        torch.nn.init.zeros_(r.bias)
    tmp = tmp_path_factory.mktemp("gated")
    save_file(
        {k: t.contiguous() for k, t in gated.routers.state_dict().items()},
        str(tmp / "r.safetensors"),
    )
    levels = {
        0.3: {"ffn_active": 0.7, "step_ratio": 0.9, "accuracy": 0.85},
        0.6: {"ffn_active": 0.4, "step_ratio": 0.5, "accuracy": 0.6},
        0.8: {"ffn_active": 0.2, "step_ratio": 1.2},
    }
    return ship_gated(tiny_model_dir, tmp / "r.safetensors", tmp / "dir", list(levels), levels)


def _prefix_inputs(md, seed):
    return md.obs.encode(random_obs_body(np.random.default_rng(seed)))


def test_gated_levels_sit_in_the_ladder_by_measured_cost_and_a_dearer_one_is_left_out(gated_dir):
    md = ModelDir.load(gated_dir)
    assert list(md.gated) == ["gate30", "gate60", "gate80"]
    levels = default_levels(md, k_verify=4)
    # exits 2 and 1 of 3 layers cost 0.67 and 0.33; gate30 0.9, gate60 0.5; gate80 (1.2) out
    assert [(lv.depth, lv.gate) for lv in levels] == [
        (3, None),
        (3, None),
        (3, "gate30"),
        (2, None),
        (3, "gate60"),
        (1, None),
    ]
    g30 = levels[2]
    assert (g30.spec_len, g30.chunk, g30.accuracy) == (3, 2, 0.85)
    # a backend that built no gated set offers none: the dense ladder
    assert [(lv.depth, lv.gate) for lv in default_levels(md, k_verify=4, gates=())] == [
        (3, None),
        (3, None),
        (2, None),
        (1, None),
    ]
    assert [lv.gate for lv in default_levels(md, 4, gates=["gate60"])] == [
        None,
        None,
        None,
        "gate60",
        None,
    ]


def test_a_directory_without_the_key_has_no_gates_and_its_old_ladder(tiny_model_dir):
    md = ModelDir.load(tiny_model_dir)
    assert md.gated == {} and get_backend("onnx").load(md).gates == ()
    assert default_levels(md, k_verify=4) == [
        BudgetLevel(3, 3, 3, 0.9),
        BudgetLevel(3, 3, 2, 0.9),
        BudgetLevel(2, 0, 2, 0.8),
        BudgetLevel(1, 0, 2, 0.5),
    ]


def test_switching_levels_mid_run_keeps_every_level_identical_to_its_own_plain_greedy(gated_dir):
    md = ModelDir.load(gated_dir)
    spec = TokenRunner(md, drafter="chunk")
    plain = TokenRunner(md, drafter="none")
    fresh = TokenRunner(md, drafter="none", prefix_cache=False)  # every prefix from scratch
    full = BudgetLevel(3, 3, 3)
    order = [
        full,
        BudgetLevel(3, 3, 3, gate="gate60"),
        BudgetLevel(3, 3, 3, gate="gate30"),
        full,
        BudgetLevel(3, 3, 3, gate="gate60"),
        BudgetLevel(2, 0, 2),
        full,
        BudgetLevel(3, 3, 3, gate="gate80"),
    ] * 2
    outs: dict = {}
    for i, level in enumerate(order):
        instr, obs = _prefix_inputs(md, i // 3)  # a few cycles share an instruction prefix
        a, _ = spec.run(instr, obs, i * 50_000_000, level)
        b, _ = plain.run(instr, obs, i * 50_000_000, level)
        assert (a == b).all(), (i, level)
        assert spec.backend.gate == level.gate
        if level.depth == 3:  # the cached instruction prefix is the level's own graphs'
            assert (fresh.run(instr, obs, None, level)[0] == b).all(), (i, level)
        outs.setdefault(i // 3, {})[level.gate] = b.copy()
    # the gates really switch graphs: some cycle decodes differently gated than dense
    assert any((o[g] != o[None]).any() for o in outs.values() for g in o if g and None in o)
    assert spec.counters["prefix_hits"] > 0  # the prefix cache works per gate


def test_use_gate_refuses_a_set_the_backend_did_not_build(gated_dir):
    be = get_backend("onnx").load(gated_dir)
    assert be.gates == ("gate30", "gate60", "gate80")
    with pytest.raises(BackendError, match="gated level 'gate99'.*has: gate30, gate60, gate80"):
        be.use_gate("gate99")
    be.use_gate("gate30")
    be.use_gate(None)
    assert be.gate is None


def _broken(gated_dir, tmp_path, change) -> Path:
    out = tmp_path / "broken"
    shutil.copytree(gated_dir, out)
    m = json.loads((out / "graphs.json").read_text())
    change(m, out)
    (out / "graphs.json").write_text(json.dumps(m))
    return out


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda m, d: m["gated"][0].pop("step_ratio"), "missing key 'step_ratio'"),
        (lambda m, d: m["gated"][0].update(tau=1.5), "need 0 < tau < 1"),
        (lambda m, d: m["gated"][0].update(tau="high"), "wrong type"),
        (lambda m, d: m["gated"][1].update(name="gate30"), '"name" must be a unique string'),
        (lambda m, d: m["gated"][0]["graphs"].pop(), "a gated level needs exactly those"),
        (lambda m, d: m["gated"][0]["graphs"][0].update(depth=2), "full depth (3) only"),
        (lambda m, d: m["gated"][0].update(dtype="float16"), "not a graph set of this directory"),
        (lambda m, d: (d / m["gated"][0]["graphs"][0]["file"]).unlink(), "is missing; re-export"),
        (lambda m, d: m.update(gated={"gate30": {}}), "must be a list"),
    ],
)
def test_a_malformed_gated_declaration_is_refused_in_one_line(gated_dir, tmp_path, change, says):
    with pytest.raises(ModelError) as e:
        ModelDir.load(_broken(gated_dir, tmp_path, change))
    msg = str(e.value)
    assert says in msg and "\n" not in msg, msg


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="models/zoo/conveyor-v1-large-gated not shipped")
def test_the_shipped_gated_directory_runs_its_levels_in_the_real_runner():
    md = ModelDir.load(SHIPPED)
    assert md.gated and all(g.accuracy is not None for g in md.gated.values())
    ladder = default_levels(md, 8, gates=get_backend("onnx").load(md).gates)
    assert ladder[0].gate is None and {lv.gate for lv in ladder[2:]} >= set(md.gated)
    spec, plain = TokenRunner(md, drafter="chunk"), TokenRunner(md, drafter="none")
    stream = np.load(SHIPPED / "stream.npz")
    full = md.n_layer
    for i, name in enumerate([*md.gated, None] * 2):
        level = BudgetLevel(full, 7, md.tokenizer.horizon, gate=name)
        instr, obs = stream["instruction_tokens"][i], stream["obs_tokens"][i]
        a, _ = spec.run(instr, obs, i * 50_000_000, level)
        b, _ = plain.run(instr, obs, i * 50_000_000, level)
        assert (a == b).all() and spec.backend.gate == name


def _doc_example() -> dict:
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "policies.md").read_text()
    block = re.search(r"<!-- gated-example: graphs.json -->\s*```json\n(.*?)```", text, re.S)
    return json.loads(block.group(1))


@pytest.mark.skipif(not SHIPPED.is_dir(), reason="models/zoo/conveyor-v1-large-gated not shipped")
def test_the_policies_doc_example_declares_a_level_the_runtime_accepts_and_checks(tmp_path):
    out = tmp_path / "doc"
    out.mkdir()
    for f in [*SHIPPED.iterdir(), *SHIPPED.parent.glob("_blobs/*/*")]:  # the page's names
        if not (out / f.name).exists():
            (out / f.name).symlink_to(f)
    (tmp_path / "_blobs").symlink_to(SHIPPED.parent / "_blobs")  # graphs.json's shared files
    m = json.loads((SHIPPED / "graphs.json").read_text())
    decl = _doc_example()["gated"]
    for g in decl[0]["graphs"]:
        g.pop("sha256")  # the page shows "..."; without one the file is not hash-checked
    (out / "graphs.json").unlink()
    (out / "graphs.json").write_text(json.dumps({**m, "gated": decl}))
    md = ModelDir.load(out)
    assert list(md.gated) == ["gate50"] and md.gated["gate50"].step_ratio == 0.85
    assert any(lv.gate == "gate50" for lv in default_levels(md, 8))
    decl[0]["graphs"] = decl[0]["graphs"][:1] + decl[0]["graphs"][2:3]  # only k 1 and 8
    (out / "graphs.json").write_text(json.dumps({**m, "gated": decl}))
    with pytest.raises(
        ModelError,
        match=r"its graphs have k \[1, 8\] but the float32 set has "
        r"k \[1, 4, 8, 28, 32\] at full depth",
    ):
        ModelDir.load(out)


def test_the_node_decodes_at_a_gated_level_the_monitor_picks(gated_dir, tmp_path):
    import time

    from conftest import answered_node, recv_chunks

    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig
    from rtinfer.transport.bus import Publisher, Subscriber
    from rtinfer.transport.wire import now_ns

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl")}
    obs_pub, ctl_pub = Publisher(eps["obs"], "sim"), Publisher(eps["ctl"], "monitor")
    node = InferenceNode(
        gated_dir,
        eps["obs"],
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(health_hz=20.0, deadline_ms=60_000.0),
    )
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    rng = np.random.default_rng(0)
    try:
        answered_node(node, obs_pub, act, rng)
        assert node.budget.levels[2].gate == "gate30"
        ctl_pub.publish("budget", {"level": 2, "reason": "slack low"})
        end = time.monotonic() + 10
        while node.budget.monitor_level != 2:  # a wait on its control socket, not a sleep
            assert time.monotonic() < end, "the node never heard the budget"
            node.spin_once(10)
        obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
        assert node.spin_once(1000) and node.budget.index == 2
        assert node.policy.runner.backend.gate == node.budget.level.gate == "gate30"
        assert len(recv_chunks(act, 2)) == 2
    finally:
        for s in (node, obs_pub, ctl_pub, act):
            s.close()


def test_a_backend_without_gated_sets_decodes_a_gated_level_dense_and_counts_it(gated_dir):
    md = ModelDir.load(gated_dir)
    runner = TokenRunner(md, backend="torch", drafter="none")
    assert runner.backend.gates == ()
    instr, obs = _prefix_inputs(md, 0)
    dense = runner.run(instr, obs, None, BudgetLevel(3, 0, 3))[0].copy()
    gated = runner.run(instr, obs, None, BudgetLevel(3, 0, 3, gate="gate60"))[0]
    assert (gated == dense).all() and runner.counters["gate_fallbacks"] == 1
    with pytest.raises(BackendError, match="the torch backend built no such graph set"):
        runner.backend.use_gate("gate60")
