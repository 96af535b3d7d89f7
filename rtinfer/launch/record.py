"""`rtinfer launch --record run.mcap`: the recorder (rtinfer.record.node) as one more node
of the launch, started first and stopped last (so it has the nodes' last words), listening
to every endpoint the launched nodes use. Not required (its death never stops the robot)
and never restarted (a second recorder would truncate the file). A CURVE endpoint is not
recorded: the recorder has no key of its own (said once in the launch log)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from rtinfer.launch.spec import LaunchSpec, NodeSpec, RestartPolicy
from rtinfer.launch.yaml_lines import LaunchError

ENTRY = "rtinfer.record.node:main"
# The other nodes start once the recorder says it is listening, or after this long: at
# normal priority its start-up waits behind the SCHED_FIFO nodes' own, and it missed the
# run's first second when they started together.
READY_S = 20.0


def check_record(out: str) -> Path:
    """The recording's absolute path; LaunchError (one line with the fix) before anything
    starts when it cannot be written (its folder may be one to make, such as the run
    directory the launcher creates) or the record extra is missing."""
    if importlib.util.find_spec("mcap_ros2") is None:
        raise LaunchError(
            f"--record {out}: needs mcap and mcap-ros2-support; pip install 'rtinfer[record]'"
        )
    path = Path(out).expanduser().resolve()
    if path.suffix != ".mcap":
        raise LaunchError(f"--record {out}: name an .mcap file (e.g. run.mcap)")
    base = path.parent  # folders not there yet (the run directory) are made at the start
    while not base.exists() and base != base.parent:
        base = base.parent
    if path.is_dir() or not base.is_dir() or not os.access(base, os.W_OK):
        raise LaunchError(f"--record {out}: cannot write there; give a file in a writable folder")
    return path


def make_folder(path: Path) -> None:
    """The recording's folder, made when the run starts (LaunchError if it cannot be)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LaunchError(f"--record {path}: cannot make its folder: {e.strerror}") from None


def recorder_node(spec: LaunchSpec, nodes, out: Path) -> tuple[NodeSpec, list[str]]:
    """The recorder's NodeSpec for `nodes` of `spec`, and the notes to say."""
    if any(n.name == "recorder" for n in nodes):
        raise LaunchError(
            f"--record {out}: this launch has a node named recorder already; "
            "rename it, or drop --record and keep your own"
        )
    names = spec.endpoints_used(nodes)
    plain = [e for e in names if not spec.endpoints[e].curve]
    notes = (
        [
            f"record: {', '.join(sorted(set(names) - set(plain)))} not recorded (CURVE: "
            "the recorder has no key)"
        ]
        if len(plain) < len(names)
        else []
    )
    if not plain:
        raise LaunchError(
            f"--record {out}: every endpoint of this launch uses CURVE; nothing could be recorded"
        )
    args = ("--listen", *(f"${{endpoints.{e}}}" for e in plain), "--out", str(out))
    return NodeSpec(
        name="recorder",
        entry=ENTRY,
        args=args,
        required=False,
        restart=RestartPolicy("never"),
        stop_grace_s=5.0,
        ready_s=READY_S,
    ), notes
