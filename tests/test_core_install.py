"""`pip install rtinfer` with no extras is the robot side: a fresh venv with the core alone runs a
controller against action chunks from a real publisher process, and nothing heavy is there.

The venv is built from this checkout (pip, the registry for the five core dependencies);
it takes about a minute on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = (
    "controllers",
    "controllers.node",
    "rtinfer.transport.bus",
    "rtinfer.transport.wire",
    "rtinfer.transport.curve",
    "rtinfer.realtime.rate",
    "rtinfer.realtime.hist",
    "rtinfer.realtime.trace",
    "rtinfer.model.directory",
    "rtinfer.model.action_tokens",
    "rtinfer.model.obs_tokens",
    "rtinfer.model.action_spec",
    "rtinfer.transport.action_chunk",
)
ABSENT = ("torch", "onnxruntime", "tensorrt", "mujoco", "rich", "matplotlib", "onnx")

PUBLISHER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
    from rtinfer.transport.action_chunk import waypoint_body
    from rtinfer.transport.bus import Publisher
    from rtinfer.transport.wire import now_ns
    tok = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0), horizon=2)
    enc = ActionTokenizer(tok)
    pub = Publisher(sys.argv[1], "policy")
    tokens = enc.encode(np.array([[0.1, 0.0, 0.2, 0.0], [0.12, 0.0, 0.2, 0.0]]))
    end = time.monotonic() + float(sys.argv[2])
    cycle = 0
    while time.monotonic() < end:
        stamps = {"capture": now_ns()}
        for i in range(2):
            pub.publish("action_chunk", waypoint_body(
                cycle, i, 2, enc.decode(tokens[i]), spec=tok.hash, period_ns=tok.period_ns,
                start_ns=tok.period_ns, dest=sys.argv[3], tokens=tokens[i]), dict(stamps))
        cycle += 1
        time.sleep(0.02)
    pub.close()
""")

CONTROLLER = textwrap.dedent("""
    import importlib, importlib.util, json, subprocess, sys, time
    import numpy as np
    for m in sys.argv[3].split(","):
        importlib.import_module(m)
    from controllers.config import AxisConfig, ControlConfig, ToolConfig
    from controllers.hardware import Command, RobotState
    from controllers.node import ControllerConfig, ControllerNode
    from rtinfer.model.action_tokens import TokenizerConfig
    from rtinfer.transport.bus import Publisher, Subscriber

    class Plant:
        def __init__(self):
            self.state, self.writes, self.max_force = RobotState(0, np.array([0.0, 0.0, 0.2]), np.zeros(3)), 0, 0.0
        def read(self):
            return self.state
        def write(self, cmd):
            self.writes += 1
            self.max_force = max(self.max_force, float(np.abs(cmd.value).max()))

    tok = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0), horizon=2)
    ep = sys.argv[1]
    sub = Subscriber(ep, ["action_chunk", "command"], bind=False)
    out = Publisher("inproc://health", "controller")
    plant = Plant()
    axes = [AxisConfig(n, 'm', 'effort', lo, hi, 0.6, 3.0, effort_limit=60.0, kp=400.0, ki=200.0,
                       kd=60.0) for n, lo, hi in zip('xyz', tok.low, tok.high)]
    control = ControlConfig(tuple(axes), ToolConfig('suction'))
    node = ControllerNode(plant, ControllerConfig(control, tokenizer=tok), sub, out, tok.hash)
    assert node.robot == "controller"  # its pub's src: the dest chunks for it carry
    pub = subprocess.Popen([sys.executable, "-c", sys.argv[2], ep, "3", node.robot])
    node.run(4.0)
    pub.wait(10)
    heavy = [m for m in sys.argv[4].split(",") if importlib.util.find_spec(m) is not None]
    print(json.dumps({"counters": node.counters, "writes": plant.writes,
                      "max_force": plant.max_force, "heavy_installed": heavy,
                      "publisher_exit": pub.returncode}))
""")


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory):
    venv = tmp_path_factory.mktemp("core") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return py


@pytest.mark.slow
def test_core_install_runs_a_controller_against_a_real_publisher(core_venv, tmp_path):
    ep = f"ipc://{tmp_path}/act"  # the publisher binds, the controller connects
    r = subprocess.run(
        [str(core_venv), "-c", CONTROLLER, ep, PUBLISHER, ",".join(CORE), ",".join(ABSENT)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )  # not the checkout: the installed package is what runs
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    print("core install:", out)
    assert out["heavy_installed"] == []
    assert out["publisher_exit"] == 0
    c = out["counters"]
    assert c["chunks_accepted"] >= 50  # ~150 sent in 3 s at 50 Hz; PUB/SUB joins late
    assert c["rejected_bad"] == c["rejected_hash"] == c["rejected_dest"] == 0
    assert out["writes"] > 1000 and out["max_force"] > 0.0  # the 1 kHz loop drove the plant


def test_core_install_declares_only_the_light_dependencies():
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = sorted(d.split(">")[0].split("=")[0].split("<")[0].strip().lower() for d in deps)
    assert names == ["hdrhistogram", "msgpack", "numpy", "pyyaml", "pyzmq"]
