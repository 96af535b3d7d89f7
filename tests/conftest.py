"""Shared fixtures: a tiny random-weight policy exported as a complete model directory.

Layout of the tiny model: instruction C=3, observation L=11 (gantry 3 uniform + 2 flags,
2 object slots x (class, x, y)), chunk H=3 waypoints x D=4, so prefix 16 + 12 actions
in max_ctx 32. Graphs: decode/draft k=1, verify k=4, prefill k=4 (instruction prefix),
12 (observation segment) and 16 (whole prefix, the uncached path).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# MuJoCo picks its GL backend once, when the first test imports it: the camera tests render
# in this process (the conveyor env's lockstep camera), so EGL before anything loads mujoco.
os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import pytest


def pytest_collection_modifyitems(config, items):
    """`slow` tests (over ~10 s each: whole launches, soaks, a fresh venv, benches' quick runs,
    long fuzzing) are left out of the default run, which `make test` does in under 15 min on 2
    cores; `make test-slow` (pytest -m slow) runs them and CI runs both. RTINFER_SLOW=1, an
    explicit -m, or a test named by its node id keeps them."""
    if os.environ.get("RTINFER_SLOW") == "1" or config.getoption("markexpr"):
        return
    named = {a.replace(os.sep, "/") for a in config.args if "::" in a}
    slow = [
        i
        for i in items
        if i.get_closest_marker("slow") and not any(i.nodeid.startswith(n) for n in named)
    ]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [i for i in items if i not in set(slow)]
        config._rtinfer_slow_left_out = len(slow)


def pytest_terminal_summary(terminalreporter, config):
    left_out = getattr(config, "_rtinfer_slow_left_out", 0)
    if left_out:
        terminalreporter.write_line(
            f"{left_out} slow tests left out: `make test-slow` (or RTINFER_SLOW=1) runs them"
        )


TINY_SPEC = {
    "format": "rtinfer-obs-tokens",
    "version": 1,
    "bins": 16,
    "fields": [
        {
            "key": "gantry",
            "slice": [0, 3],
            "kind": "uniform",
            "low": [-1.0, -1.0, 0.0],
            "high": [1.0, 1.0, 1.0],
        },
        {"key": "gantry", "slice": [3, 5], "kind": "threshold", "at": 0.5},
        {
            "key": "objects",
            "kind": "table",
            "rows": 2,
            "valid": {"column": 3, "above": 0.5},
            "columns": [
                {"column": 0, "kind": "categorical", "classes": 3},
                {"column": 1, "kind": "uniform", "low": -0.5, "high": 0.5},
                {"column": 2, "kind": "uniform", "low": -0.2, "high": 0.2},
            ],
        },
    ],
    "instruction": {"key": "instruction", "from": "values", "length": 3, "classes": 3},
}
K_VERIFY = 4


def write_random_stream(model_dir, cycles: int, seed: int = 0) -> None:
    """A recorded-style stream.npz in model_dir: `cycles` random observations, encoded."""
    from rtinfer.model.directory import ModelDir

    md, rng = ModelDir.load(model_dir), np.random.default_rng(seed)
    pairs = [md.obs.encode(random_obs_body(rng)) for _ in range(cycles)]
    np.savez(
        Path(model_dir) / "stream.npz",
        instruction_tokens=np.stack([i for i, _ in pairs]),
        obs_tokens=np.stack([o for _, o in pairs]),
    )


def random_obs_body(rng: np.random.Generator) -> dict:
    """A valid `obs` body for TINY_SPEC (values drawn partly outside the bin limits)."""
    objects = np.zeros((2, 4), np.float32)
    n = int(rng.integers(0, 3))
    objects[:n, 0] = rng.integers(0, 3, n)
    objects[:n, 1] = rng.uniform(-0.6, 0.6, n)
    objects[:n, 2] = rng.uniform(-0.25, 0.25, n)
    objects[:n, 3] = 1.0
    gantry = rng.uniform(-1.2, 1.2, 5).astype(np.float32)
    gantry[3:] = rng.integers(0, 2, 2)
    return {
        "values": {
            "gantry": gantry,
            "objects": objects,
            "instruction": rng.permutation(3).astype(np.int32),
        },
        "ints": {},
    }


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """Path of an exported tiny model directory (graphs, tokenizer, obs spec, card, ckpt)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnx")
    from models import checkpoint
    from models.config import PolicyConfig, Vocab
    from models.export import export_all
    from models.policy import Policy
    from rtinfer.model.action_tokens import TokenizerConfig

    torch.manual_seed(0)
    torch.set_num_threads(1)
    vocab = Vocab(n_instr=3, n_obs_bins=16, n_action_bins=32)
    cfg = PolicyConfig(
        vocab_size=vocab.size, n_layer=3, n_head=2, n_embd=32, max_ctx=32, exits=(1, 2)
    )
    model = Policy(cfg).eval()
    with torch.no_grad():  # larger weights: outputs depend strongly on the inputs
        for p in model.parameters():
            if p.dim() >= 2:
                p.mul_(6.0)
    out = tmp_path_factory.mktemp("tiny_model")
    export_all(
        model,
        cfg,
        out,
        k_verify=K_VERIFY,
        prefix_len=[4, 12, 16],
        vocab=vocab,
        fp16=False,
        exit_prefills=[(1, 12), (2, 12)],
    )
    TokenizerConfig(
        low=(-1.0, -1.0, 0.0, 0.0),
        high=(1.0, 1.0, 1.0, 1.0),
        bins=32,
        horizon=3,
        period_ns=50_000_000,
    ).save(out / "tokenizer.json")
    (out / "obs_tokens.json").write_text(json.dumps(TINY_SPEC))
    (out / "card.json").write_text(json.dumps({"accuracy": {"1": 0.5, "2": 0.8, "3": 0.9}}))
    checkpoint.save(out / "policy", model, vocab)
    return out


@pytest.fixture
def no_launcher_left(request, monkeypatch):
    """The test module's `start` (tests.test_launch.start: one launcher process) is tracked,
    and every launcher a test starts is stopped at teardown, even when the test fails."""
    import subprocess

    from tests.test_launch import WAIT_S

    started, real_start = [], request.module.start

    def tracked(*a, **kw):
        started.append(real_start(*a, **kw))
        return started[-1]

    monkeypatch.setattr(request.module, "start", tracked)
    yield
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.communicate(timeout=WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def recv_chunks(sub, n: int, timeout_s: float = 10.0) -> list:
    """Up to n `action_chunk` envelopes from `sub` (other topics skipped), within timeout_s."""
    import time

    got, end = [], time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < end:
        env = sub.recv(100)
        if env is not None and env.topic == "action_chunk":
            got.append(env)
    return got


class SteppedClock:
    """A node's clock= for tests: the monotonic clock plus what the test stepped it by, so
    a timer (health, a robot's silence, a retry, a file's check interval) runs out at once
    while the sockets keep their real time."""

    def __init__(self) -> None:
        self.offset_ns = 0

    def __call__(self) -> int:
        from rtinfer.transport.wire import now_ns

        return now_ns() + self.offset_ns

    def step(self, ns: int) -> None:
        self.offset_ns += ns


def answered_node(node, obs_pub, act, rng):
    """Publish observations until `node` answers one (the slow joiner), then drain `act`."""
    import time

    from rtinfer.transport.wire import now_ns

    for _ in range(200):
        obs_pub.publish("obs", random_obs_body(rng), {"capture": now_ns()})
        if node.spin_once(20):
            break
    else:
        pytest.fail("node never answered an observation")
    time.sleep(0.1)
    while act.recv(50) is not None:
        pass


GANTRY_AXES = {  # a ~2 kg three-axis test gantry: per axis x, y, z
    "kp": (400.0, 400.0, 600.0),
    "ki": (200.0, 200.0, 300.0),
    "kd": (60.0, 60.0, 60.0),
    "effort_limit": (60.0, 60.0, 80.0),
    "low": (-0.5, -0.5, 0.0),
    "high": (0.5, 0.5, 0.5),
    "vel_limit": (0.6, 0.6, 0.4),
    "acc_limit": (3.0, 3.0, 3.0),
}


def gantry_control(tool: bool = True, **kw):
    """controllers.config.ControlConfig of the test gantry: three effort-mode axes (m, N)
    and a binary suction tool. kw: an AxisConfig field as a per-axis tuple (e.g.
    mass=(2, 2, 1)), or a ControlConfig field (e.g. blend_ns=...)."""
    from dataclasses import fields

    from controllers.config import AxisConfig, ControlConfig, ToolConfig

    per_axis = {f.name for f in fields(AxisConfig)}
    axes_kw = {**GANTRY_AXES, **{k: v for k, v in kw.items() if k in per_axis}}
    axes = tuple(
        AxisConfig(name, "m", "effort", **{k: v[i] for k, v in axes_kw.items()})
        for i, name in enumerate("xyz")
    )
    return ControlConfig(
        axes,
        ToolConfig("suction") if tool else None,
        **{k: v for k, v in kw.items() if k not in per_axis},
    )
