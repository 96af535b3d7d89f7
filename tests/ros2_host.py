"""One network namespace for the ROS 2 tests: its own loopback, with multicast on (DDS
discovery needs it), so their DDS traffic never meets another test's or the machine's."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from tests.faults.netns import _ip, _Namespaces, available  # noqa: F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class RosHost(_Namespaces):
    def __init__(self, name: str = "rtros2"):
        self.ns = {"h": f"{name}-{os.getpid()}"}

    def create(self) -> RosHost:
        self.remove()
        self._add("h")
        _ip("-n", self.ns["h"], "link", "set", "lo", "multicast", "on")
        return self

    def python(self, *args: str, **kw):
        """`python ARGS` (this venv's) inside the namespace, in the repository root."""
        kw.setdefault("cwd", ROOT)
        return self.popen("h", [sys.executable, *args], **kw)


def read(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def wait_for(what, pred, timeout_s=120):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def stop(*procs):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.wait(30)
