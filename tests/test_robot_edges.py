"""What `python -m controllers.run` says to the author of a driver, as a real process: a
driver written against the previous docs/robots.md (an `on_tick(node, ...)` or `on_stop`
hook, no `observe()`) hears at start-up what replaced it; a run in which the robot sent no
observation ends with a line that says so, with the counters that explain it, not a question
about the policy's wiring; a float32 camera frame is refused with a fix that names frames."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from controllers.simulated import uniform_robot

ROOT = Path(__file__).resolve().parents[1]
PERIOD = 50_000_000

DRIVERS = '''
import numpy as np
from controllers.hardware import Observation, RobotState


class Plain:
    """Reads and writes; no observe()."""

    def __init__(self, control):
        self.state = RobotState.zeros(control.n)

    def read(self):
        return self.state

    def write(self, cmd):
        pass


class OldTick(Plain):
    """The previous docs/robots.md's driver: it published its observations from on_tick."""

    def on_tick(self, node, state, now_ns):
        node.pub.publish("obs", {"values": {"joints": state.pos.astype(np.float32)},
                                 "ints": {}}, {"capture": now_ns})

    def on_stop(self, node):
        pass


class WrongObs(Plain):
    """Observes every tick, always one value too short for the policy's spec."""

    def observe(self, state, now_ns):
        return Observation(now_ns, {"joints": np.zeros(1, np.float32)})


class FloatFrame(Plain):
    """Observes with a float32 camera frame (a renderer's output, not converted)."""

    def observe(self, state, now_ns):
        return Observation(now_ns, {"joints": np.zeros(2, np.float32)},
                           frames={"overhead": (np.zeros((8, 8, 3), np.float32), now_ns)})
'''


def setup(d: Path, obs_spec: bool) -> tuple[Path, Path]:
    """(robot file, model directory): 2 axes; with obs_spec, the policy takes `joints` [2]."""
    control = uniform_robot(2, "effort")
    (d / "drivers.py").write_text(DRIVERS)
    cfg = d / "robot.yaml"
    cfg.write_text(yaml.safe_dump({"name": "arm", "control": control.to_dict()}))
    model = d / "policy"
    model.mkdir()
    control.action_spec(4, PERIOD).save(model / "action_spec.json")
    if obs_spec:
        (model / "obs_spec.json").write_text(
            json.dumps(
                {
                    "format": "rtinfer-obs-spec",
                    "version": 1,
                    "inputs": [{"key": "joints", "dtype": "float32", "shape": [2]}],
                }
            )
        )
    return cfg, model


def run(d: Path, driver: str, obs_spec: bool = True, *python: str):
    cfg, model = setup(d, obs_spec)
    p = subprocess.run(
        [
            sys.executable,
            *python,
            "-m",
            "controllers.run",
            "--hardware",
            f"drivers:{driver}",
            "--config",
            str(cfg),
            "--model",
            str(model),
            "--obs",
            f"ipc://{d}/robot",
            "--actions",
            f"ipc://{d}/policy",
            "--seconds",
            "1",
            "--report",
            str(d / "r.json"),
        ],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": f"{d}:{ROOT}"},
    )
    return p, json.loads((d / "r.json").read_text())


def test_a_driver_with_the_old_on_tick_hook_hears_what_replaced_it_at_start_up(tmp_path):
    p, report = run(tmp_path, "OldTick", True, "-X", "dev")
    lines = p.stderr.splitlines()
    tick = [ln for ln in lines if "OldTick.on_tick" in ln]
    stop = [ln for ln in lines if "OldTick.on_stop" in ln]
    assert len(tick) == 1 and "observe(state, now_ns)" in tick[0] and "advance(" in tick[0]
    assert "docs/robots.md section 2" in tick[0] and "2026-12-02" in tick[0], p.stderr
    assert len(stop) == 1 and "health(robot, state)" in stop[0], p.stderr
    assert lines.index(tick[0]) < 2  # at start-up, before the run
    last = lines[-1]
    assert p.returncode == 1 and "sent no observation" in last and "observe()" in last, last
    assert report["controller"]["obs_sent"] == 0


def test_a_driver_without_observe_while_the_policy_needs_observations_hears_it(tmp_path):
    p, _ = run(tmp_path, "Plain")
    first = p.stderr.splitlines()[0]
    assert "Plain has no observe()" in first and "docs/robots.md section 2" in first, p.stderr


def test_a_driver_without_observe_for_a_policy_with_no_spec_hears_nothing_at_start(tmp_path):
    p, _ = run(tmp_path, "Plain", False)
    assert "robot: warning" not in p.stderr, p.stderr


def test_a_robot_that_refused_every_observation_says_so_at_the_end(tmp_path):
    p, report = run(tmp_path, "WrongObs")
    c = report["controller"]
    # The loop ran on, refusing and counting each one: how many fit in 1 s depends on the
    # machine's speed and load (26 at a load of 15), so only "more than one" is asserted.
    assert c["obs_bad"] >= 2 and c["obs_sent"] == 0
    last = p.stderr.splitlines()[-1]
    assert p.returncode == 1 and "no action chunk was accepted" in last
    assert f"obs_bad: {c['obs_bad']}" in last and "is the policy running" not in last, last


def test_a_float32_frame_is_refused_with_a_fix_that_names_frames(tmp_path):
    p, report = run(tmp_path, "FloatFrame", False)
    said = [ln for ln in p.stderr.splitlines() if "observation not sent" in ln]
    assert said and "uint8" in said[0] and "frames" in said[0].split(";", 1)[1], said
    assert "numpy arrays in values and ints in ints" not in said[0]
    assert report["controller"]["obs_bad"] >= 2  # counted each time, the loop ran on
