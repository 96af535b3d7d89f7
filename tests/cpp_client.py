"""The C++ client's builds and processes, for the tests that run it (test_cpp_client,
test_cpp_fleet, test_cpp_camera).

The C++ builds (build/cpp, build/cpp-asan) are made by `make cpp`, or here with cmake when
missing. Without the toolchain the tests skip, except in CI (CI=true), where it is a failure:
.ci/run installs it (scripts/cpp_deps.sh)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILDS = {"release": ROOT / "build" / "cpp", "asan": ROOT / "build" / "cpp-asan"}
FLAGS = {
    "release": ["-DCMAKE_BUILD_TYPE=RelWithDebInfo"],
    "asan": ["-DCMAKE_BUILD_TYPE=Debug", "-DRTINFER_SANITIZE=ON"],
}
TOKENIZER = ROOT / "models/zoo/conveyor-v1/tokenizer.json"


def _missing_toolchain() -> str | None:
    for tool in ("cmake", "g++", "pkg-config"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["pkg-config", "--exists", "libzmq"]).returncode != 0:
        return "libzmq3-dev is not installed"
    for header in ("/usr/include/zmq.hpp", "/usr/include/msgpack.hpp"):
        if not Path(header).exists():
            return f"{header} is missing (cppzmq-dev / libmsgpack-cxx-dev)"
    return None


def build(kind: str) -> Path:
    """The build dir of `kind`, configured and built (incremental: a no-op when up to date)."""
    why = _missing_toolchain()
    if why:
        msg = f"C++ toolchain absent: {why}; run: bash scripts/cpp_deps.sh"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(msg + " (in CI the toolchain is required)")
        pytest.skip(msg)
    out = BUILDS[kind]
    if not (out / "CMakeCache.txt").exists():
        subprocess.run(
            ["cmake", "-S", str(ROOT / "clients/cpp"), "-B", str(out), *FLAGS[kind]],
            check=True,
            capture_output=True,
        )
    target = ["--target", "rtinfer_wire_tool"] if kind == "asan" else []  # no sockets under ASan
    r = subprocess.run(
        ["cmake", "--build", str(out), "-j2", *target], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def start(cmd, **kw):
    return subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kw,
    )


def stop(proc, timeout=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.communicate()


def controller_cmd(
    build_dir, actions, publish, robot="cpparm", control=None, extra=()
) -> list[str]:
    """The example controller on conveyor-v1's tokenizer, following the policy nodes at
    `actions` (one endpoint or several), publishing on `publish`, heeding `control`."""
    actions = [actions] if isinstance(actions, str) else list(actions)
    return [
        str(build_dir / "rtinfer_controller"),
        "--actions",
        *actions,
        "--publish",
        publish,
        *(["--control", control] if control else []),
        "--robot",
        robot,
        "--name",
        "cppctl",
        "--tokenizer",
        str(TOKENIZER),
        "--chunk-interval-ms",
        "100",
        "--beat-s",
        "0.5",
        *extra,
    ]


def conveyor_obs(rng) -> dict:
    """An obs body conveyor-v1 answers."""
    objects = np.zeros((6, 4), np.float32)
    objects[0] = (rng.integers(0, 3), rng.uniform(-0.5, 0.5), rng.uniform(-0.2, 0.5), 1.0)
    gantry = np.array([0.0, 0.2, 0.5, 0, 0, 0, 0, 0], np.float32)
    return {
        "values": {
            "objects": objects,
            "gantry": gantry,
            "held": np.array([-1], np.float32),
            "instruction": np.array([2, 0, 1], np.int32),
        },
        "ints": {"instruction_id": 4},
    }
