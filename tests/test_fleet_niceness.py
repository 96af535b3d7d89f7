"""A fleet's inference node runs at niceness 0 even where its host's actor does not.

The node is a child of its host's actor, a Ray worker, which Ray runs at niceness 15 by
default: beside three CPU-bound loops on 2 cores such nodes were not ready after 120 s (at
niceness 0: 8 s). The host starts its node at 0 where it may lower it (root), and a node
that still runs niced is named in the host's `up` line. With Ray, tests/test_fleet_ray.py
checks the nodes of a real cluster."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a niceness needs root")
def test_a_node_started_by_a_niced_host_runs_at_niceness_0():
    code = (
        "import os, subprocess\n"
        "from rtinfer.fleet.host import child_preexec\n"
        "os.nice(15 - os.nice(0))\n"
        "kids = [subprocess.Popen(['sleep', '5'], preexec_fn=f) for f in (None, child_preexec)]\n"
        "print(*(os.getpriority(os.PRIO_PROCESS, k.pid) for k in kids))\n"
        "for k in kids: k.kill()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["15", "0"]  # a plain child inherits 15; the node gets 0


def test_the_up_line_names_a_niced_node_and_the_fix():
    pytest.importorskip("ray")
    from rtinfer.fleet.roster import niced

    assert niced(0) == ""
    line = niced(15)
    assert "niceness 15" in line and "worker_niceness 0" in line and "docs/fleet.md" in line
