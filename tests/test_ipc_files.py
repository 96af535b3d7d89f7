"""ipc endpoints as files, with real processes: a controller, an inference node and a monitor
leave no socket file behind when they stop cleanly (SIGINT or SIGTERM); and an endpoint in
a directory only its user may enter is out of reach of another user's process."""

import errno
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rtinfer.transport.bus import Publisher, Subscriber
from tests.test_controllers_run import robot_files

ROOT = Path(__file__).resolve().parents[1]


def started(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", *args],
        cwd=cwd,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def stopped(proc: subprocess.Popen, sig: int) -> str:
    """Send `sig`, wait for the exit; its stderr."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def ready_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    assert "ready" in line, proc.stderr.read() if proc.poll() is not None else line
    return line


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_monitor_stopped_by_a_signal_leaves_no_socket_file(tmp_path, sig):
    proc = started(
        [
            "rtinfer.monitor.node",
            "--listen",
            f"ipc://{tmp_path}/obs",
            "--control",
            f"ipc://{tmp_path}/control",
        ],
        tmp_path,
    )
    ready_line(proc)  # its signal handlers are in place
    assert (tmp_path / "control").exists()
    err = stopped(proc, sig)
    assert proc.returncode == 0, err
    assert not (tmp_path / "control").exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_controller_stopped_by_a_signal_leaves_no_socket_file(tmp_path, sig):
    cfg, spec = robot_files(tmp_path)
    proc = started(
        [
            "controllers.run",
            "--hardware",
            "controllers.simulated:SimulatedAxes",
            "--config",
            str(cfg),
            "--model",
            str(spec),
            "--obs",
            f"ipc://{tmp_path}/robot",
            "--actions",
            f"ipc://{tmp_path}/policy",
        ],
        tmp_path,
    )
    with Subscriber(f"ipc://{tmp_path}/robot", ["obs", "heartbeat", "health"]) as bus:
        end = time.monotonic() + 60
        while bus.recv(100) is None:  # its loop runs: its signal handlers are in place
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < end, "no message from the controller in 60 s"
    assert (tmp_path / "robot").exists()
    stopped(proc, sig)
    assert proc.returncode is not None and not (tmp_path / "robot").exists()


def test_an_inference_node_stopped_by_a_signal_leaves_no_socket_file(tiny_model_dir, tmp_path):
    proc = started(
        [
            "rtinfer.inference.node",
            "--model",
            str(tiny_model_dir),
            "--obs",
            f"ipc://{tmp_path}/obs",
            "--actions",
            f"ipc://{tmp_path}/act",
        ],
        tmp_path,
    )
    ready_line(proc)
    assert (tmp_path / "act").exists()
    err = stopped(proc, signal.SIGINT)
    assert proc.returncode == 0, err
    assert not (tmp_path / "act").exists()


# --- a private ipc endpoint -------------------------------------------------------------------
REACH = """
import os, socket, sys
os.setgid(int(sys.argv[2])); os.setuid(int(sys.argv[2]))
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    print(e.errno)
else:
    print(0)
"""


def reached_as(uid: int, path: Path) -> int:
    """0 if a process running as `uid` connects to the socket at `path`, else the errno."""
    out = subprocess.run(
        [sys.executable, "-c", REACH, str(path), str(uid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def test_an_endpoint_in_a_directory_only_its_user_may_enter_is_out_of_another_users_reach():
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the other process as another user")
    nobody = pwd.getpwnam("nobody").pw_uid
    base = Path(tempfile.mkdtemp(prefix="rtinfer-ipc-"))  # in /tmp: others may pass through
    pubs = []
    try:
        os.chmod(base, 0o755)
        shared, private = base / "shared", base / "private"
        shared.mkdir(mode=0o755)
        private.mkdir(mode=0o700)
        old = os.umask(0)  # the socket files themselves open to all: only the directory guards
        try:
            pubs = [Publisher(f"ipc://{d}/obs", "robot") for d in (shared, private)]
        finally:
            os.umask(old)
        assert reached_as(nobody, shared / "obs") == 0  # the control case: it connects
        assert reached_as(nobody, private / "obs") == errno.EACCES  # it cannot even look inside
    finally:
        for p in pubs:
            p.close()
        shutil.rmtree(base)
