"""The closed loop in one process, on sim time: observation -> policy -> ControlStack ->
ArmSim, no sockets and no wall clock (datasets, evaluation, tests).

Every policy period (1 / obs_hz) the loop observes and asks the policy for a chunk; after
`latency_ms` of sim time (the previous chunk keeps playing meanwhile, as on a robot whose
policy takes that long) the chunk goes to the real controllers.stack.ControlStack with
the observation's capture time, and every 1 ms tick is read -> compute -> write -> step,
exactly as the ControllerNode does. `on_chunk(obs, chunk)` may record or replace what is
applied (return None to apply the policy's own chunk). Deterministic for a seed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

import controllers.run
from controllers.config import ControlConfig
from controllers.stack import ControlStack
from rtinfer.model.action_spec import ActionSpec

from .observe import observe
from .sim import NS_PER_STEP, ArmSim

ROBOT_YAML = Path(__file__).with_name("robot.yaml")
HORIZON = 10  # waypoints per chunk
PERIOD_NS = 50_000_000  # 20 Hz waypoints, one policy period apart

Policy = Callable[[dict], np.ndarray]


def load_robot(path=ROBOT_YAML) -> tuple[str, ControlConfig, dict]:
    """(name, control config, hardware keyword arguments) from a robot YAML (a path or
    PACKAGE:NAME, as controllers.run reads it); ValueError names the problem."""
    return controllers.run.load_robot(path)


def action_spec(control: ControlConfig) -> ActionSpec:
    """The arm's action spec: its joints (rad, their ranges), HORIZON waypoints PERIOD_NS apart,
    waypoint 0 one period after capture."""
    return control.action_spec(HORIZON, PERIOD_NS)


def run(
    sim: ArmSim,
    policy: Policy,
    *,
    seconds: float | None = None,
    targets: int | None = None,
    latency_ms: int = 0,
    on_chunk: Callable | None = None,
) -> dict:
    """Run until `seconds` of sim time or `targets` resolved; the task's metrics plus the
    controller's counters and the sim speed."""
    if seconds is None and targets is None:
        raise ValueError("give seconds or targets: the loop needs an end")
    spec = action_spec(sim.control)
    stack = ControlStack(sim.control, gravity=sim.gravity)
    obs_every = round(1e9 / sim.cfg.obs_hz / NS_PER_STEP)
    if not 0 <= latency_ms < obs_every:
        raise ValueError(f"latency_ms must be in [0, {obs_every})")
    end = None if seconds is None else sim.step_count + round(seconds * 1000)
    pending, chunks, wall0 = None, 0, time.perf_counter()
    while (end is None or sim.step_count < end) and (
        targets is None or sim.task.resolved < targets
    ):
        k = sim.step_count % obs_every
        if k == 0:
            obs = observe(sim)
            chunk = policy(obs)
            if on_chunk is not None:
                applied = on_chunk(obs, chunk)
                chunk = chunk if applied is None else applied
            pending = (np.asarray(chunk, np.float64), sim.t_ns)
        if pending is not None and k == latency_ms:
            stack.set_chunk(
                pending[0], pending[1], spec.period_ns, sim.t_ns, start_ns=spec.start_ns
            )
            pending, chunks = None, chunks + 1
        now = sim.t_ns
        sim.write(stack.compute(sim.read(), now))
        sim.step()
    wall = time.perf_counter() - wall0
    return {
        **sim.task.metrics(),
        "chunks": chunks,
        "sim_s": sim.t_ns / 1e9,
        "speed_x": sim.t_ns / 1e9 / wall if wall > 0 else None,
        "stack": dict(stack.counters),
    }
