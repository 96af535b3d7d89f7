"""`rtinfer demo`'s options, checked before anything starts (DemoError: exit 2), and turned
into the launch file's `--set` overrides (launch_overrides)."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from rtinfer.cli.stress import STRESS_MODES
from rtinfer.launch.record import check_record
from rtinfer.launch.runs import unwritable
from rtinfer.launch.yaml_lines import LaunchError
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.zoo import zoo_model

STRESS_DEADLINE_MS = 20.0  # --stress with the expert, which has no chunk time to calibrate


class DemoError(Exception):
    """An option or output the demo refuses before it starts anything (exit 2)."""


def launch_overrides(
    policy: str | None,
    deadline_ms: float | None,
    stress: str | None,
    *,
    seed: int | None = None,
    instruction: str | None = None,
    belt_speed: float | None = None,
    realtime: bool = True,
    camera_hz: float | None = None,
) -> dict:
    """`--set` overrides for the launch file: the model directory, the task (cell seed,
    class -> bin instruction, belt speed), the camera's rate (conveyor_vision.yaml only),
    the nodes' scheduling (realtime False: no node's
    cpus or priority is applied), and the deadline with the monitor's budget
    margins scaled to it (lower the budget below 20% slack, raise it back above 50%, as the
    node's own budget does); --stress defaults to STRESS_DEADLINE_MS."""
    out = {} if policy in (None, "expert") else {"vars.model": policy}
    if not realtime:
        out["realtime"] = "false"
    if seed is not None:
        out["vars.seed"] = str(seed)
    if instruction is not None:
        out["vars.instruction"] = instruction
    if belt_speed is not None:
        out["vars.belt_speed"] = f"{belt_speed:g}"
    if camera_hz is not None:
        out["vars.camera_hz"] = f"{camera_hz:g}"
    if stress and deadline_ms is None:
        deadline_ms = STRESS_DEADLINE_MS
    if deadline_ms is not None:  # the monitor's margins follow it (rtinfer.realtime.deadline)
        out["deadline_ms"] = f"{deadline_ms:g}"
    return out


def model_dir(policy: str | None) -> Path | None:
    """The model directory for --policy (None for the expert), absolute; DemoError naming
    the path the user gave when it is not a model directory."""
    if policy == "expert":
        return None
    if policy is None:
        path = zoo_model()
        if not (path / "graphs.json").is_file():
            raise DemoError(
                f"the shipped model {path} is missing (graphs.json not found): "
                "reinstall rtinfer, or run with --policy expert"
            )
        return path
    path = Path(policy).expanduser()
    if not path.exists():
        raise DemoError(
            f"--policy {policy}: no such directory; give a model directory "
            "(e.g. one written by `rtinfer export`) or --policy expert"
        )
    if not (path / "graphs.json").is_file():
        raise DemoError(
            f"--policy {policy}: not a model directory (no graphs.json in it); "
            "give one written by `rtinfer export`, or --policy expert"
        )
    return path.resolve()


def takes_frames(model: Path | None) -> bool:
    """Whether the policy in model directory `model` reads camera frames (its obs_spec.json
    has image inputs); DemoError when that file is there but not a valid spec."""
    spec = None if model is None else model / "obs_spec.json"
    if spec is None or not spec.is_file():
        return False
    try:
        return bool(ObsSpec.load(spec).images)
    except (OSError, ValueError) as e:
        raise DemoError(
            f"--policy {model}: {spec} is not a valid observation spec ({e}); re-package the policy"
        ) from None


def check_camera(vision: bool, robots: int, camera_hz: float | None) -> None:
    """--camera-hz needs a camera policy, in (0, 240]; a camera policy runs one cell."""
    if camera_hz is not None and not vision:
        raise DemoError(
            f"--camera-hz {camera_hz:g}: this policy takes no camera frames; "
            "leave it out, or give a camera policy's --policy"
        )
    if camera_hz is not None and not (math.isfinite(camera_hz) and 0 < camera_hz <= 240):
        raise DemoError(f"--camera-hz {camera_hz:g}: give frames per second in (0, 240], e.g. 30")
    if vision and robots > 1:
        raise DemoError(
            f"--robots {robots} with a camera policy: the fleet launch has no "
            "cameras; run it with one robot"
        )


def check_fleet(robots: int, policy, stress, seed, instruction, png) -> None:
    """--robots N needs the learned policy and gives each cell its own seed (k) and
    instruction: the options that would contradict that are refused."""
    if robots < 1:
        raise DemoError(f"--robots {robots}: give 1 or more robots")
    if robots == 1:
        return
    clash = [
        o
        for o, v in (
            ("--policy expert", policy == "expert"),
            ("--stress", stress),
            ("--seed", seed is not None),
            ("--instruction", instruction),
            ("--png", png),
        )
        if v
    ]
    if clash:
        raise DemoError(
            f"--robots {robots} with {', '.join(clash)}: a fleet runs the learned "
            "policy on cells seeded 0..N-1, each with its own instruction; leave "
            f"{'them' if len(clash) > 1 else 'it'} out"
        )


def check_output(option: str, path: str | None) -> None:
    """An output file must be writable where it is asked for, before the run starts."""
    if path is None:
        return
    p = Path(path).expanduser()
    parent = p.parent
    if p.is_dir():
        raise DemoError(f"{option} {path}: is a directory; give a file name")
    if not parent.is_dir():
        raise DemoError(
            f"{option} {path}: directory {parent} does not exist; create it first "
            "or write elsewhere"
        )
    if not os.access(parent, os.W_OK):
        raise DemoError(f"{option} {path}: directory {parent} is not writable")


def check_options(
    seconds: float, deadline_ms: float | None, report: str | None, png: str | None
) -> None:
    if not (math.isfinite(seconds) and seconds > 0):
        raise DemoError(f"--seconds {seconds:g}: must be a positive number of seconds")
    if deadline_ms is not None and not (math.isfinite(deadline_ms) and deadline_ms > 0):
        raise DemoError(f"--deadline-ms {deadline_ms:g}: must be a positive number of ms")
    check_output("--report", report)
    check_output("--png", png)
    if png is not None:
        from importlib.util import find_spec

        if find_spec("matplotlib") is None:
            raise DemoError(f"--png {png}: needs matplotlib (pip install 'rtinfer[viz]')")


def check_stress(stress: str | None, model: Path | None) -> None:
    if stress is not None and stress not in STRESS_MODES:
        raise DemoError(f"--stress {stress}: give one of {', '.join(STRESS_MODES)}")
    if stress == "near-deadline" and model is None:
        raise DemoError(
            "--stress near-deadline with --policy expert: the expert has no chunk "
            "time to set a deadline from; run it with the learned policy"
        )


def check_record_option(record: str | None, stress: str | None) -> str | None:
    """--record's file, checked (rtinfer.launch.record): one run only, so not with --stress."""
    if record is None:
        return None
    if stress is not None:
        raise DemoError(
            f"--record {record}: records one run; --stress makes several, so drop one of the two"
        )
    try:
        return str(check_record(record))
    except LaunchError as e:
        raise DemoError(str(e)) from None


def run_base(run_dir: str | None) -> Path:
    """The folder the runs go in (--run-dir, else a new temporary one), created and checked
    writable."""
    base = Path(run_dir).expanduser() if run_dir else Path(tempfile.mkdtemp(prefix="rtinfer-demo-"))
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DemoError(f"--run-dir {run_dir}: cannot create it ({exc.strerror})") from None
    why = unwritable(base)
    if why:
        raise DemoError(f"--run-dir {run_dir}: not writable ({why}); give a writable folder")
    return base
