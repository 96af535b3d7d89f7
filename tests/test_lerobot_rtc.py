"""RTC guidance for a flow policy (rtinfer.inference.flow_guidance) against LeRobot 0.4.4's
lerobot/policies/rtc on the same inputs: the prefix weights of every schedule, the guidance
weight at every step time, and a whole guided cycle of a tiny flow policy served from its
ONNX graphs against LeRobot's RTCProcessor.denoise_step driving the same torch model through
the same Euler steps and noise (max abs difference <= 1e-4). The paper's full guidance
(jacobian "vjp", the guided step graph of models/flow_vjp.py) against torch autograd.

Runs where lerobot is installed (the LeRobot venv: `make lerobot-env`, then
`.venv-lerobot/bin/python -m pytest tests/test_lerobot_rtc.py`); skips elsewhere.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lerobot")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
torch = pytest.importorskip("torch")

from flow_dirs import AFFINE, build  # noqa: E402
from lerobot.configs.types import RTCAttentionSchedule  # noqa: E402
from lerobot.policies.rtc.configuration_rtc import RTCConfig  # noqa: E402
from lerobot.policies.rtc.modeling_rtc import RTCProcessor  # noqa: E402

from models.flow_tiny import TinyFlow  # noqa: E402
from rtinfer.inference.flow_guidance import (  # noqa: E402
    SCHEDULES,
    FlowGuidance,
    RtcGuidanceConfig,
    guidance_weight,
    prefix_weights,
)
from rtinfer.inference.flow_runner import FlowRunner  # noqa: E402
from rtinfer.inference.flow_schedule import euler_plan  # noqa: E402
from rtinfer.model.flow_model import FlowModelDir  # noqa: E402

ATOL = 1e-4
SCALE, OFFSET = np.float32(AFFINE["scale"]), np.float32(AFFINE["offset"])
STATE = np.array([[0.4, -0.3, 0.2, 0.1]], np.float32)
LEFT_OVER = np.array(
    [[3.0, -2.0], [3.5, -1.5], [4.0, -1.0], [4.5, -0.5], [5.0, 0.0]], np.float32
)  # action units


def _processor(schedule: str, horizon: int = 4) -> RTCProcessor:
    return RTCProcessor(
        RTCConfig(
            enabled=True,
            execution_horizon=horizon,
            prefix_attention_schedule=RTCAttentionSchedule[schedule.upper()],
            max_guidance_weight=10.0,
        )
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_prefix_weights_match_lerobots_for_every_schedule(schedule):
    p = _processor(schedule)
    for start, end, total in [(0, 4, 8), (2, 4, 8), (3, 3, 8), (5, 4, 8), (2, 10, 8), (0, 0, 6)]:
        ours = prefix_weights(start, end, total, schedule)
        theirs = p.get_prefix_weights(start, end, total).numpy()
        assert ours.shape == theirs.shape and np.abs(ours - theirs).max() <= 1e-7


def test_guidance_weight_matches_lerobots_at_every_step_time():
    for k in (1, 4, 10):
        for t in euler_plan(k).times:
            p = _processor("linear")
            p.rtc_config.debug, p.tracker = True, None
            x, prev = torch.zeros(1, 8, 2), torch.ones(1, 8, 2)
            # LeRobot's weight, read back from its result: v - w * err with v = 0, err = prev
            out = p.denoise_step(
                x, prev, 8, torch.tensor(t), lambda x: torch.zeros_like(x), execution_horizon=8
            )
            assert abs(float(guidance_weight(t, 10.0)) + float(out[0, 0, 0])) <= 1e-6


def _served(tmp_path, per_waypoint_t=False):
    model = TinyFlow(per_waypoint_t=per_waypoint_t, seed=7)
    build(tmp_path / "policy", model)
    return model, FlowRunner(FlowModelDir.load(tmp_path / "policy"), clip=False)


def _lerobot_cycle(model, noise, k, delay, schedule, vjp=False):
    """LeRobot's guided Euler loop on the torch model, in model units."""
    p = _processor(schedule)
    cond = model.prefix(torch.from_numpy(STATE))
    prev = torch.from_numpy((LEFT_OVER - OFFSET) / SCALE)
    plan, x = euler_plan(k), torch.from_numpy(noise.copy())
    for t in plan.times:
        time = torch.tensor(t)
        if vjp:  # the paper's: x requires grad before v is taken
            x_ = x.clone().requires_grad_(True)
            with torch.enable_grad():
                v = model.velocity(cond, x_, time.reshape(1))
                x1 = x_ - time * v
                w = p.get_prefix_weights(delay, 4, 8)[None, :, None]
                padded = torch.zeros_like(x)
                padded[0, : len(prev)] = prev
                err = ((padded - x1) * w).detach()
                corr = torch.autograd.grad(x1, x_, err)[0]
            v = v.detach() - torch.as_tensor(guidance_weight(t, 10.0)) * corr
        else:
            with torch.no_grad():
                v = p.denoise_step(
                    x,
                    prev,
                    delay,
                    time,
                    lambda x_t, s=time: model.velocity(cond, x_t, s.reshape(1)),
                )
        x = (x + float(plan.dt) * v).detach()
    return x.numpy()[0, :6] * SCALE + OFFSET


@pytest.mark.parametrize(
    "schedule,delay,k", [("linear", 2, 10), ("exp", 1, 4), ("zeros", 3, 10), ("ones", 0, 4)]
)
def test_a_guided_cycle_matches_lerobots_rtc(tmp_path, schedule, delay, k):
    model, runner = _served(tmp_path)
    level = {10: 0, 4: 1}[k]
    guide = FlowGuidance(runner, RtcGuidanceConfig(execution_horizon=4, schedule=schedule))
    noise = np.random.default_rng(delay).standard_normal((1, 8, 2)).astype(np.float32)
    ours = guide.run({"state": STATE}, level, LEFT_OVER, delay, noise=noise).copy()
    theirs = _lerobot_cycle(model, noise, k, delay, schedule)
    assert np.abs(ours - theirs).max() <= ATOL
    free = runner.run({"state": STATE}, level, noise=noise)
    assert np.abs(free - theirs).max() > 10 * ATOL  # the guidance moved the chunk
    if delay:  # toward the left-over where it is committed
        assert (
            np.abs(ours[:delay] - LEFT_OVER[:delay]).mean()
            < np.abs(free[:delay] - LEFT_OVER[:delay]).mean()
        )


def test_the_papers_guidance_through_a_guided_step_graph_matches_autograd(tmp_path):
    from models.flow_vjp import export_guided

    model, runner = _served(tmp_path)
    cond = model.prefix(torch.from_numpy(STATE)).detach()
    path = export_guided(
        model.velocity,
        (cond, torch.zeros(1, 8, 2), torch.ones(1)),
        ["cond", "x_t", "t"],
        tmp_path / "guided.onnx",
    )
    guide = FlowGuidance(
        runner, RtcGuidanceConfig(execution_horizon=4, jacobian="vjp"), guided_path=path
    )
    noise = np.random.default_rng(5).standard_normal((1, 8, 2)).astype(np.float32)
    ours = guide.run({"state": STATE}, 0, LEFT_OVER, 2, noise=noise).copy()
    theirs = _lerobot_cycle(model, noise, 10, 2, "linear", vjp=True)
    assert np.abs(ours - theirs).max() <= ATOL
    identity = _lerobot_cycle(model, noise, 10, 2, "linear")
    assert np.abs(identity - theirs).max() > 10 * ATOL  # the Jacobian matters here
