"""The flow runner and policy: Euler against the torch policy it was exported from, DDIM against
a float64 numpy reference and against diffusers' own DDIMScheduler (LeRobot venv), the noise
seeded per cycle (a run replays; another seq or robot draws other noise), zero noise only
where allowed, conditioning on committed waypoints, and no allocation in the step loop."""

from __future__ import annotations

import json
import subprocess
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rtinfer.inference.budget import BudgetLevel
from rtinfer.inference.cycle import Cycle
from rtinfer.inference.node_config import InferenceNodeConfig
from rtinfer.inference.policy import load_policy
from rtinfer.model.chunk_model import load_model

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

from flow_dirs import AFFINE, SPEC, build  # noqa: E402

from models.flow_tiny import TinyFlow  # noqa: E402
from rtinfer.inference.flow_runner import FlowRunner  # noqa: E402
from rtinfer.inference.flow_schedule import ddim_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCALE, OFFSET = np.array(AFFINE["scale"], np.float32), np.array(AFFINE["offset"], np.float32)
STATE = np.array([[0.3, -0.2, 0.5, 0.1]], np.float32)


def _noise(seed=1, shape=(1, 8, 2)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _physical(x: np.ndarray) -> np.ndarray:
    return x[0, : SPEC.horizon, : SPEC.dim] * SCALE + OFFSET


@pytest.fixture(scope="module")
def euler(tmp_path_factory):
    out = tmp_path_factory.mktemp("euler") / "policy"
    return build(out), out


def test_euler_matches_the_torch_policy_at_every_level(euler):
    model, d = euler
    runner = FlowRunner(load_model(d), clip=False)
    for level, k in enumerate([10, 4, 2, 1]):
        chunk = runner.run({"state": STATE}, level, noise=_noise())
        ref = model.sample(torch.from_numpy(STATE), torch.from_numpy(_noise()), k).numpy()
        assert np.abs(chunk - _physical(ref)).max() < 1e-5, level


ALPHAS = np.cumprod(1.0 - np.linspace(1e-4, 0.02, 100, dtype=np.float32), dtype=np.float32)


def _ddim_reference(d: Path, k: int, prediction: str, clip: float | None) -> np.ndarray:
    """DDIM (eta 0, leading spacing) in float64 over plain ONNX Runtime runs of the graphs."""
    prefix = ort.InferenceSession(str(d / "prefix.onnx"))
    step = ort.InferenceSession(str(d / "step.onnx"))
    cond = prefix.run(None, {"state": STATE})[0]
    x, ratio = _noise().astype(np.float64), len(ALPHAS) // k
    for t in (np.arange(k) * ratio)[::-1]:
        out = step.run(
            None, {"cond": cond, "x_t": x.astype(np.float32), "t": np.array([t], np.float32)}
        )[0].astype(np.float64)
        a = float(ALPHAS[t])
        a_prev = float(ALPHAS[t - ratio]) if t - ratio >= 0 else 1.0
        if prediction == "epsilon":
            x0, eps = (x - np.sqrt(1 - a) * out) / np.sqrt(a), out
        else:
            x0 = out
            eps = (x - np.sqrt(a) * x0) / np.sqrt(1 - a)
        if clip is not None:
            x0 = np.clip(x0, -clip, clip)
        x = np.sqrt(a_prev) * x0 + np.sqrt(1 - a_prev) * eps
    return x


@pytest.mark.parametrize("prediction, clip", [("epsilon", 1.0), ("sample", None)])
def test_ddim_matches_a_float64_reference_at_every_level(tmp_path, prediction, clip):
    d = tmp_path / "ddim"
    ddim = {"alphas_cumprod": ALPHAS.tolist(), "prediction": prediction, "clip_sample": clip}
    build(d, TinyFlow(seed=3), levels=[(10, 0), (5, 0), (2, 0)], integrator="ddim", ddim=ddim)
    runner = FlowRunner(load_model(d), clip=False)
    for level, k in enumerate([10, 5, 2]):
        chunk = runner.run({"state": STATE}, level, noise=_noise())
        ref = _physical(_ddim_reference(d, k, prediction, clip))
        assert np.abs(chunk - ref).max() < 1e-4, (level, np.abs(chunk - ref).max())


DIFFUSERS = """
import json, sys, numpy as np, torch
from diffusers import DDIMScheduler
pred, k = sys.argv[1], int(sys.argv[2])
s = DDIMScheduler(num_train_timesteps=100, beta_schedule="linear", clip_sample=True,
                  prediction_type=pred)
s.set_timesteps(k)
x = torch.from_numpy(np.random.default_rng(0).standard_normal((1, 8, 2)).astype(np.float32))
for t in s.timesteps:
    out = 0.3 * x + 0.01 * float(t)
    x = s.step(out, t, x).prev_sample
print(json.dumps({"timesteps": s.timesteps.tolist(), "x": x.numpy().tolist(),
                  "alphas": s.alphas_cumprod.numpy().tolist()}))
"""


@pytest.mark.parametrize("prediction", ["epsilon", "sample", "v_prediction"])
def test_ddim_schedule_and_step_are_diffusers_ddimscheduler(prediction):
    py = ROOT / ".venv-lerobot" / "bin" / "python"
    # the marker, not the interpreter: make test builds that venv while this suite runs
    if not (ROOT / ".venv-lerobot" / ".installed-lerobot").exists():
        pytest.skip("the LeRobot venv (diffusers) is not built: make lerobot-env")
    k = 7  # 100 // 7 = 14: leading spacing leaves timesteps 84 .. 0
    r = subprocess.run(
        [str(py), "-c", DIFFUSERS, prediction, str(k)], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    want = json.loads(r.stdout)
    plan = ddim_plan(
        {"alphas_cumprod": want["alphas"], "prediction": prediction, "clip_sample": 1.0}, k
    )
    assert plan.times.tolist() == want["timesteps"]
    x = np.random.default_rng(0).standard_normal((1, 8, 2)).astype(np.float32)
    scratch = (np.zeros_like(x), np.zeros_like(x))
    for i, t in enumerate(plan.times):
        out = (np.float32(0.3) * x + np.float32(0.01 * float(t))).astype(np.float32)
        plan.step(i, x, out, scratch)
    assert np.abs(x - np.array(want["x"], np.float32)).max() < 1e-5


def _cycle(seq: int, dest="robot", level=0) -> Cycle:
    return Cycle(seq, {"obs_recv": 0}, 0, BudgetLevel(level, 0, SPEC.horizon), SPEC.horizon, dest)


def _chunk(policy, seq, dest="robot", level=0):
    return policy.run([(_cycle(seq, dest, level), {"state": STATE})])[0].copy()


def test_the_noise_is_seeded_per_cycle_so_a_run_replays(euler):
    _, d = euler
    a = load_policy(d, InferenceNodeConfig(seed=7))
    b = load_policy(d, InferenceNodeConfig(seed=7))
    assert np.array_equal(_chunk(a, 3), _chunk(b, 3))  # same seed and seq: replayed
    assert not np.array_equal(_chunk(a, 3), _chunk(a, 4))  # another cycle: other noise
    assert not np.array_equal(_chunk(a, 3), _chunk(a, 3, "other"))  # another robot too
    c = load_policy(d, InferenceNodeConfig(seed=8))
    assert not np.array_equal(_chunk(a, 3), _chunk(c, 3))
    assert a.figures()["flow_steps"] == 10 * 6  # six cycles of a at level 0


def test_zero_noise_only_where_the_manifest_allows_it(tmp_path, euler):
    _, d = euler
    with pytest.raises(ValueError, match="zero_noise_ok is false; pass a seed"):
        FlowRunner(load_model(d)).run({"state": STATE}, 0)
    z = tmp_path / "zero"
    model = build(z, noise="zero", zero_noise_ok=True)
    policy = load_policy(z, InferenceNodeConfig())
    assert "zero noise" in policy.summary
    first = _chunk(policy, 1)
    assert np.array_equal(first, _chunk(policy, 2))
    ref = model.sample(torch.from_numpy(STATE), torch.zeros(1, 8, 2), 10).numpy()
    assert np.abs(first - _physical(ref)).max() < 1e-5


def test_committed_waypoints_are_fed_clean_at_t0_and_kept(tmp_path):
    d = tmp_path / "rtc"
    model = build(d, TinyFlow(per_waypoint_t=True, seed=5))
    runner = FlowRunner(load_model(d), clip=False)
    committed = np.array([[1.0, 2.0], [1.5, 2.5], [2.0, 3.0]], np.float32)
    chunk = runner.run({"state": STATE}, 1, noise=_noise(), committed=committed).copy()
    assert np.abs(chunk[:3] - committed).max() < 1e-5
    free = runner.run({"state": STATE}, 1, noise=_noise()).copy()
    assert np.abs(chunk[3:] - free[3:]).max() > 1e-4  # the rest was conditioned on them
    # the same mechanism in torch: rows fixed, their time 0, 4 Euler steps
    cond = model.prefix(torch.from_numpy(STATE))
    x = torch.from_numpy(_noise())
    fixed = torch.zeros(3, 2)
    fixed[:, :2] = torch.from_numpy((committed - OFFSET) / SCALE)
    with torch.no_grad():
        for i in range(4):
            t = torch.full((1, 8), 1.0 - i / 4)
            t[0, :3] = 0.0
            x[0, :3] = fixed
            x = x + (-0.25) * model.velocity(cond, x, t)
        x[0, :3] = fixed
    assert np.abs(chunk - _physical(x.numpy())).max() < 1e-5
    with pytest.raises(ValueError, match=r"per-waypoint t \[1, 8\]; this one takes t \[1\]"):
        build(tmp_path / "scalar-t")
        FlowRunner(load_model(tmp_path / "scalar-t")).run(
            {"state": STATE}, 0, noise=_noise(), committed=committed
        )


def test_the_step_loop_allocates_nothing_and_reuses_its_buffers(tmp_path):
    d = tmp_path / "big"
    from models.flow_package import package_flow
    from models.flow_tiny import export_looped
    from rtinfer.model.action_spec import ActionSpec

    names = tuple(f"j{i}" for i in range(64))  # a chunk of 16 KiB: above the run's own few KiB
    spec = ActionSpec(
        names, ("1",) * 64, (-9.0,) * 64, (9.0,) * 64, horizon=64, period_ns=50_000_000, start_ns=0
    )
    prefix, step = export_looped(TinyFlow(horizon=64, dim=64), tmp_path / "g")
    package_flow(d, prefix, [step], [10, 1], spec)
    runner = FlowRunner(load_model(d))
    noise, feeds = _noise(shape=(1, 64, 64)), {"state": STATE}
    x_ptr, v_ptr, out = (
        runner.x.ctypes.data,
        runner.v.ctypes.data,
        runner.run(feeds, 0, noise=noise),
    )
    peaks = []
    for level in (0, 1, 0, 1):
        tracemalloc.start()
        chunk = runner.run(feeds, level, noise=noise)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert chunk is out
    assert (runner.x.ctypes.data, runner.v.ctypes.data) == (x_ptr, v_ptr)
    # any temporary of the chunk's size (x + dt * v without out=) would show as 16 KiB here
    assert max(peaks) < runner.x.nbytes, peaks


def test_the_tensorrt_path_imports_without_a_gpu_and_says_the_fix_where_it_cannot_run(euler):
    import importlib.util

    import rtinfer.inference.flow_trt  # noqa: F401  (import-safe: tensorrt and torch lazily)
    from rtinfer.inference.backends.base import BackendError

    if importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available():
        pytest.skip("a GPU with TensorRT is here: the parity run belongs on it")
    with pytest.raises(BackendError, match="use --backend onnx"):
        load_policy(euler[1], InferenceNodeConfig(backend="tensorrt"))


def test_noise_of_the_wrong_shape_is_one_line_naming_the_shape(euler):
    runner = FlowRunner(load_model(euler[1]))
    with pytest.raises(
        ValueError,
        match=r"noise of shape \[1, 6, 2\]; give the step graphs' "
        r"x_t shape \[1, 8, 2\]",
    ):
        runner.run({"state": STATE}, 0, noise=np.zeros((1, 6, 2), np.float32))


def test_a_level_that_a_cheaper_one_beats_in_the_card_leaves_the_ladder(euler):
    from rtinfer.inference.flow_policy import flow_levels

    md = load_model(euler[1])
    assert [lv.depth for lv in flow_levels(md)] == [0, 1, 2, 3]  # no accuracies: all kept
    md.card = {
        "levels": [{"level": i, "accuracy": a} for i, a in enumerate([0.98, 0.90, 0.95, 0.6])]
    }
    ladder = flow_levels(md)
    assert [lv.depth for lv in ladder] == [0, 2, 3]
    assert [lv.accuracy for lv in ladder] == [0.98, 0.95, 0.6]
