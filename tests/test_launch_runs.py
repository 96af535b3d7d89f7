"""Two runs at once (issue 15, item 1), with real launchers and real ZeroMQ sockets: run
directories are never shared, an endpoint or run directory held by a live run is refused
naming that run, a socket file left by a SIGKILLed run is reused, ipc paths fit sun_path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rtinfer.launch.runs import RUNTIME_DIR, SUN_PATH_MAX, make_run_dir
from tests.test_launch import ROOT, WAIT_S, alive, finish, pids, start, text, wait_for

BIND = """\
name: {name}
endpoints:
  obs: {url}
nodes:
  - name: pub
    entry: tests.launch_fixtures:bind_forever
    args: ["${{run_dir}}/pub.pid", "${{endpoints.obs}}"]
    stop_grace_s: 2
"""


@pytest.fixture(autouse=True)
def _no_launcher_left(no_launcher_left):
    """Every launcher a test starts is stopped at teardown, even when the test fails."""


def bind_file(tmp_path: Path, fname: str, url: str = "ipc", name: str = "t") -> Path:
    p = tmp_path / fname
    p.write_text(BIND.format(name=name, url=url))
    return p


def test_default_run_dirs_are_unique_within_one_second(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dirs = [make_run_dir(None, "cell", "20260101-120000") for _ in range(3)]
    assert len(set(dirs)) == 3 and all(d.is_dir() and d.parent == tmp_path / "runs" for d in dirs)


def test_two_launches_at_once_each_get_their_own_run_dir_and_endpoints(tmp_path):
    f = bind_file(tmp_path, "l.yaml")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "rtinfer.launch.supervisor", str(f), "--seconds", "1.5"]
    procs = [
        subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for _ in range(2)
    ]
    outs = [finish(p) for p in procs]
    assert [rc for rc, _ in outs] == [0, 0], outs
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 2  # both kept as records
    for rd in runs:
        assert len(pids(rd / "pub.pid")) == 1 and "stopped 'pub'" in text(rd / "launch.log")


def test_endpoint_bound_by_a_live_run_is_refused_naming_that_run(tmp_path):
    shared = f"ipc://{tmp_path}/shared.sock"
    a_file, b_file = bind_file(tmp_path, "a.yaml", shared), bind_file(tmp_path, "b.yaml", shared)
    a = start(a_file, tmp_path / "run-a")
    try:
        assert wait_for(lambda: pids(tmp_path / "run-a" / "pub.pid"))
        rc, out = finish(start(b_file, tmp_path / "run-b"))
        assert rc == 2, out
        assert (
            f"endpoint 'obs' ({shared}) is in use by the live run of {a_file} in "
            f"{tmp_path / 'run-a'} (launcher pid {a.pid})"
        ) in out
        assert not (tmp_path / "run-b").exists()  # nothing started, no empty record left
        rc, out = finish(start(b_file, tmp_path / "run-a"))  # the same run dir, too
        assert rc == 2 and f"run directory {tmp_path / 'run-a'} is in use by" in out, out
        assert alive(pids(tmp_path / "run-a" / "pub.pid")[0])  # the first run is untouched
    finally:
        a.send_signal(signal.SIGTERM)
        assert finish(a)[0] == 0


def test_ipc_socket_left_by_a_sigkilled_run_is_reused(tmp_path):
    run, f = tmp_path / "run", bind_file(tmp_path, "l.yaml")
    first = start(f, run)
    assert wait_for(lambda: pids(run / "pub.pid"))
    first.kill()  # SIGKILL: no cleanup; the node dies of PR_SET_PDEATHSIG's SIGTERM
    first.communicate(timeout=WAIT_S)
    node = pids(run / "pub.pid")[0]
    assert wait_for(lambda: not alive(node))
    assert (run / "obs").is_socket()  # left behind, bound by nobody
    second = start(f, run)
    assert wait_for(lambda: len(pids(run / "pub.pid")) == 2)
    second.send_signal(signal.SIGTERM)
    rc, out = finish(second)
    assert rc == 0, out
    assert f"reusing {run / 'obs'}: a stale ipc socket file" in out
    assert (
        f"removed the record of a run that no longer runs ({run}, launcher pid {first.pid})" in out
    )


def test_deep_run_dir_keeps_ipc_sockets_in_a_short_directory(tmp_path):
    run = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(f"{run}/obs".encode()) > SUN_PATH_MAX
    proc = start(bind_file(tmp_path, "l.yaml"), run)
    assert wait_for(lambda: pids(run / "pub.pid"))  # it bound: the path fitted
    started = next(l for l in text(run / "launch.log").splitlines() if "started 'pub'" in l)
    sock = started.split("ipc://")[1].split()[0]
    assert sock.startswith(f"{RUNTIME_DIR}/s/") and len(sock.encode()) <= SUN_PATH_MAX
    assert Path(sock).is_socket()
    proc.send_signal(signal.SIGTERM)
    rc, out = finish(proc)
    assert rc == 0, out
    assert not Path(sock).parent.exists()  # the short directory goes with the run
