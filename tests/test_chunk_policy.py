"""Continuous-chunk policies: the model directory contract, packaging, and the inference node
serving one as it serves an action-token policy (streaming per waypoint, stamps, latest-only,
the last waypoint's slack, loud failures), in-process and as real processes over ipc."""

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import answered_node, random_obs_body, recv_chunks

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.chunk_model import ChunkModelDir, load_model
from rtinfer.model.directory import ModelError
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.obs_tokens import ObsError
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parents[1]
# random_obs_body's arrays (TINY_SPEC's observation): gantry (5,), objects (2, 4), instruction (3,)
SPEC = ActionSpec(
    ("x", "y", "z", "suction"),
    ("m", "m", "m", "1"),
    (-0.5, -0.5, 0.0, 0.0),
    (0.5, 0.5, 0.5, 1.0),
    horizon=3,
    period_ns=50_000_000,
    start_ns=0,
)


class Chunker(torch.nn.Module):
    """A tiny MLP over random_obs_body's arrays -> [1, 3, 4] within SPEC's limits."""

    def __init__(self, hidden=16, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(5 + 8 + 3, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 12)
        )
        self.low, self.high = torch.tensor(SPEC.low), torch.tensor(SPEC.high)

    def forward(self, gantry, objects, instruction):
        x = torch.cat([gantry, objects.flatten(1), instruction.float()], 1)
        return self.low + (self.high - self.low) * torch.sigmoid(self.net(x)).view(1, 3, 4)


def example_obs():
    return random_obs_body(np.random.default_rng(0))["values"]


@pytest.fixture(scope="module")
def chunk_dir(tmp_path_factory):
    from models.chunk_package import package_module

    out = tmp_path_factory.mktemp("chunk") / "policy"
    package_module([Chunker(), Chunker(hidden=4, seed=1)], example_obs(), out, SPEC)
    return out


# --- the contract ------------------------------------------------------------------------------
def test_package_writes_a_directory_the_loader_takes_with_both_levels(chunk_dir):
    md = load_model(chunk_dir)
    assert isinstance(md, ChunkModelDir) and md.kind == "chunk" and len(md.levels) == 2
    assert md.action == SPEC and md.action.hash == SPEC.hash
    assert md.obs.keys == ["gantry", "objects", "instruction"]
    card = json.loads((chunk_dir / "card.json").read_text())
    assert [lv["level"] for lv in card["levels"]] == [0, 1]
    assert all(lv["parity_max_abs"] < 1e-4 for lv in card["levels"])


def test_the_action_spec_hash_covers_every_field_and_an_edited_file_is_refused(tmp_path):
    hashes = {SPEC.hash}
    for change in (
        {"units": ("m", "m", "mm", "1")},
        {"start_ns": 50_000_000},
        {"high": (0.5, 0.5, 0.6, 1.0)},
        {"horizon": 4},
        {"names": ("a", "y", "z", "s")},
    ):
        hashes.add(replace(SPEC, **change).hash)
    assert len(hashes) == 6
    SPEC.save(tmp_path / "a.json")
    doc = json.loads((tmp_path / "a.json").read_text())
    assert ActionSpec.from_dict(doc) == SPEC
    doc["low"][0] = -0.4
    with pytest.raises(ValueError, match="was edited"):
        ActionSpec.from_dict(doc)


def test_the_conveyor_action_spec_is_the_one_docs_policies_shows():
    import re

    from examples.conveyor_sorting.config import CellConfig, action_spec

    text = (ROOT / "docs" / "policies.md").read_text()
    block = re.search(
        r"<!-- policies-example: action_spec.json -->\s*```json\n(.*?)```", text, re.S
    ).group(1)
    assert ActionSpec.from_dict(json.loads(block)) == action_spec(CellConfig())


@pytest.mark.parametrize(
    "damage, says",
    [
        (lambda d: (d / "chunk_l1.onnx").write_bytes(b"not onnx"), "sha256 differs"),
        (lambda d: (d / "chunk_l0.onnx").unlink(), "is missing"),
        (lambda d: (d / "action_spec.json").unlink(), "action_spec.json is missing"),
        (lambda d: (d / "obs_spec.json").write_text("{"), "not JSON"),
    ],
)
def test_a_broken_directory_is_one_error_naming_the_file(chunk_dir, tmp_path, damage, says):
    import shutil

    d = tmp_path / "p"
    shutil.copytree(chunk_dir, d)
    damage(d)
    with pytest.raises(ModelError, match=says):
        load_model(d)
    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "check-model", str(d), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1, r.stderr
    out = json.loads(r.stdout)
    assert not out["ok"] and len(out["problems"]) == 1 and says in out["problems"][0]


def test_check_model_compares_the_action_spec_with_the_robots(chunk_dir, tmp_path):
    replace(SPEC, start_ns=50_000_000).save(tmp_path / "robot.json")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "check-model",
            str(chunk_dir),
            "--robot-spec",
            str(tmp_path / "robot.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and "start_ns: 0 where 50000000 is expected" in r.stdout


def test_a_graph_whose_inputs_break_the_obs_spec_is_refused_with_the_fix(chunk_dir, tmp_path):
    from models.chunk_package import PackageError, package_onnx

    spec = json.loads((chunk_dir / "obs_spec.json").read_text())
    spec["inputs"][0]["shape"] = [6]
    with pytest.raises(
        PackageError,
        match="graph input 'gantry' is tensor.float. .1, 5.; obs_spec.json says float32 .1, 6.",
    ):
        package_onnx([chunk_dir / "chunk_l0.onnx"], tmp_path / "p", SPEC, obs=ObsSpec(spec))
    assert not (tmp_path / "p").exists()  # a refused package leaves no folder behind


def test_obs_spec_feeds_views_and_names_what_does_not_fit(chunk_dir):
    md = load_model(chunk_dir)
    body = random_obs_body(np.random.default_rng(1))
    feeds = md.obs.feeds(body)
    assert feeds["gantry"].shape == (1, 5) and np.shares_memory(
        feeds["gantry"], body["values"]["gantry"]
    )
    good = body["values"]["gantry"]
    body["values"]["gantry"] = good.astype(np.float64)
    with pytest.raises(
        ObsError, match=r"values\['gantry'\] is float64 \[5\]; .* wants float32 \[5\]"
    ):
        md.obs.feeds(body)
    body["values"]["gantry"] = good
    del body["values"]["objects"]
    with pytest.raises(ObsError, match=r"lacks values\['objects'\]"):
        md.obs.feeds(body)


# --- the node in-process -------------------------------------------------------------------------
@pytest.fixture
def chunk_node(chunk_dir, tmp_path):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl")}
    obs_pub = Publisher(eps["obs"], "robot7")
    # these tests are not about the deadline: an observation that waits out a stall of a busy
    # host must not turn stale (the node refuses those)
    node = InferenceNode(
        chunk_dir,
        eps["obs"],
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(health_hz=20.0, deadline_ms=60_000.0),
    )
    act = Subscriber(eps["act"], ["action_chunk", "health"])
    rng = np.random.default_rng(0)
    answered_node(node, obs_pub, act, rng)
    yield node, obs_pub, act, rng
    for s in (node, obs_pub, act):
        s.close()


def test_a_chunk_streams_one_values_only_waypoint_per_message_for_the_obs_robot(chunk_node):
    node, obs_pub, act, rng = chunk_node
    body = random_obs_body(rng)
    obs_pub.publish("obs", body, {"capture": now_ns()})
    assert node.spin_once(1000)
    chunk = recv_chunks(act, 3)
    assert [c.body["index"] for c in chunk] == [0, 1, 2]
    ref = (
        Chunker()(
            **{
                k: torch.from_numpy(v[None])
                for k, v in body["values"].items()
                if k in ("gantry", "objects", "instruction")
            }
        )
        .detach()
        .numpy()[0]
    )
    for c in chunk:
        b = c.body
        assert "tokens" not in b and b["spec"] == SPEC.hash and b["dest"] == "robot7"
        assert b["count"] == 3 and b["period_ns"] == SPEC.period_ns and b["start_ns"] == 0
        assert np.allclose(b["values"], ref[b["index"]], atol=1e-5)
        s = c.stamps
        assert list(s)[:4] == ["capture", "obs_recv", "first_token", "publish"]
        assert s["capture"] <= s["obs_recv"] <= s["first_token"] <= s["publish"] <= s["recv"]
    last = chunk[-1].stamps
    assert node.slack_ns == node.budget.deadline_ns - (last["publish"] - last["capture"])


def test_the_node_answers_only_the_newest_observation(chunk_node):
    node, obs_pub, act, rng = chunk_node
    skipped0 = node.health()["counters"]["obs_skipped"]
    seqs = [obs_pub._seq + i for i in range(5)]
    for _ in seqs:
        obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
    time.sleep(0.2)
    assert node.spin_once(1000)
    assert {c.body["cycle"] for c in recv_chunks(act, 3)} == {seqs[-1]}
    assert node.health()["counters"]["obs_skipped"] - skipped0 == 4


def test_the_budget_levels_are_the_graphs_and_a_level_runs_its_own(chunk_node):
    node, obs_pub, act, rng = chunk_node
    assert [lv.depth for lv in node.budget.levels] == [0, 1]
    body = random_obs_body(rng)
    node.budget.set_monitor_level(1)
    obs_pub.publish("obs", body, {"capture": now_ns()})
    assert node.spin_once(1000)
    small = (
        Chunker(hidden=4, seed=1)(
            **{k: torch.from_numpy(v[None]) for k, v in body["values"].items()}
        )
        .detach()
        .numpy()[0]
    )
    assert np.allclose(recv_chunks(act, 3)[0].body["values"], small[0], atol=1e-5)


def test_an_observation_that_does_not_fit_is_counted_and_not_answered(chunk_node):
    node, obs_pub, act, rng = chunk_node
    body = random_obs_body(rng)
    body["values"]["gantry"] = np.zeros(6, np.float32)
    obs_pub.publish("obs", body, {"capture": now_ns()})
    assert not node.spin_once(1000)
    assert node.counters["obs_bad"] == 1 and not recv_chunks(act, 1, timeout_s=0.3)


# --- real processes ----------------------------------------------------------------------------
def _node_proc(model, eps, tmp_path):
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rtinfer.inference.node",
            "--model",
            str(model),
            "--obs",
            eps["obs"],
            "--actions",
            eps["act"],
            "--name",
            "policy",
            "--seconds",
            "30",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )


def test_the_node_process_says_it_has_one_level_and_names_a_misfit_observation_within_1s(
    chunk_dir, tmp_path
):
    import shutil

    single = tmp_path / "single"
    shutil.copytree(chunk_dir, single)
    man = json.loads((single / "graphs.json").read_text())
    man["graphs"] = man["graphs"][:1]
    (single / "graphs.json").write_text(json.dumps(man))
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    obs_pub = Publisher(eps["obs"], "robot7")
    proc = _node_proc(single, eps, tmp_path)
    try:
        assert "1 budget level; a one-shot graph without alternatives" in proc.stdout.readline()
        body = random_obs_body(np.random.default_rng(0))
        del body["values"]["objects"]
        t0 = time.monotonic()
        line = ""
        while "error" not in line and time.monotonic() - t0 < 5:
            obs_pub.publish("obs", body, {"capture": now_ns()})
            os.set_blocking(proc.stderr.fileno(), False)
            line = proc.stderr.readline() or ""
            time.sleep(0.05)
        assert "lacks values['objects']" in line and time.monotonic() - t0 < 1.5, line
    finally:
        proc.terminate()
        proc.wait(10)
        obs_pub.close()


def test_a_corrupt_graph_is_one_line_and_exit_2(chunk_dir, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(chunk_dir, bad)
    (bad / "chunk_l0.onnx").write_bytes(b"\0" * 64)
    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act")}
    proc = _node_proc(bad, eps, tmp_path)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.count("\n") == 1 and "sha256 differs" in err and "Traceback" not in err
