"""A real-time node's ZeroMQ I/O thread runs one SCHED_FIFO level above the node
(rtinfer.transport.bus.io_priority), and only where the OS grants that level: libzmq would
abort the process otherwise."""

import json
import os
import resource
import shutil
import subprocess
import sys

import pytest

PROBE = """
import glob, json, os, sys, time
from rtinfer.transport.bus import Publisher
p = Publisher(sys.argv[1], "t")
time.sleep(0.3)  # the I/O thread names itself once it runs
out = {}
for t in glob.glob("/proc/self/task/*"):
    name = open(t + "/comm").read().strip()
    stat = open(t + "/stat").read().rsplit(")", 1)[1].split()
    out[name] = [int(stat[38]), int(stat[37])]  # policy, rt priority (proc(5) fields 41, 40)
p.close()
print(json.dumps(out))
"""


def threads(tmp_path, priority=None, without_sys_nice=False) -> dict:
    def setup():
        if priority is not None:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))

    # without CAP_SYS_NICE (root, still), the rtprio limit decides: 0 here, so no level above
    wrap = (
        ["setpriv", "--inh-caps=-sys_nice", "--bounding-set=-sys_nice"] if without_sys_nice else []
    )
    r = subprocess.run(
        [*wrap, sys.executable, "-c", PROBE, f"ipc://{tmp_path}/p"],
        preexec_fn=setup,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def fifo_permitted() -> bool:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        return False
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    return True


def test_under_normal_scheduling_nothing_changes(tmp_path):
    t = threads(tmp_path)
    assert t["ZMQbg/IO/0"] == [0, 0] and t["python"] == [0, 0]


@pytest.mark.skipif(not fifo_permitted(), reason="SCHED_FIFO is not permitted here")
def test_the_io_thread_runs_one_level_above_its_fifo_node(tmp_path):
    t = threads(tmp_path, priority=5)
    assert t["python"] == [os.SCHED_FIFO, 5]
    assert t["ZMQbg/IO/0"] == [os.SCHED_FIFO, 6]


@pytest.mark.skipif(
    not fifo_permitted()
    or shutil.which("setpriv") is None
    or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 5,
    reason="needs SCHED_FIFO, setpriv (util-linux) and an rtprio limit below 6",
)
def test_where_the_level_above_is_not_permitted_the_io_thread_keeps_the_nodes(tmp_path):
    # libzmq aborts a process whose I/O thread cannot take its priority: it must not be asked
    t = threads(tmp_path, priority=5, without_sys_nice=True)
    assert t["python"] == [os.SCHED_FIFO, 5]
    assert t["ZMQbg/IO/0"] == [os.SCHED_FIFO, 5]
