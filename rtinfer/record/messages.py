"""What a recording holds: ROS 2 message definitions (standard types where one fits,
rtinfer_msgs where none does) and the conversion of rtinfer's bus messages into them.

The definitions are `ros2msg` text with their dependencies appended, as MCAP's ros2msg
schema encoding wants them, so the file opens in Foxglove and Rerun as it is and any ROS 2
MCAP reader (mcap-ros2-support, rosbags) decodes it without rtinfer. Stamps: rtinfer's are
monotonic ns (docs/wire.md); a header's `stamp` is that instant on the wall clock
(`WallClock`: the recorder's own monotonic -> wall offset, so it is exact for stamps taken
on the recorder's host and off by the hosts' clock offset for another host's).
"""

from __future__ import annotations

import math
import time

import numpy as np

from rtinfer.monitor.stages import STAGES, is_late

_SEP = "=" * 80
_TIME = "int32 sec\nuint32 nanosec\n"
_HEADER = "builtin_interfaces/Time stamp\nstring frame_id\n"


def _with(text: str, *deps: tuple[str, str]) -> str:
    """A definition followed by its dependencies, each as `MSG: pkg/Type` + its text."""
    return text + "".join(f"{_SEP}\nMSG: {name}\n{body}" for name, body in deps)


_STD = (("std_msgs/Header", _HEADER), ("builtin_interfaces/Time", _TIME))
_ARRAY = "string name\nstring dtype\nuint32[] shape\nfloat64[] data\n"
_KEYVALUE = "string key\nstring value\n"
_STATUS = (
    "byte OK=0\nbyte WARN=1\nbyte ERROR=2\nbyte STALE=3\nbyte level\nstring name\n"
    "string message\nstring hardware_id\ndiagnostic_msgs/KeyValue[] values\n"
)

# datatype -> ros2msg schema text (with dependencies)
DEFINITIONS = {
    "rtinfer_msgs/msg/Observation": _with(
        "# One `obs` message (docs/wire.md): header.stamp = capture, frame_id = the robot (src)\n"
        "std_msgs/Header header\nuint64 seq\nrtinfer_msgs/Array[] values\n"
        "string[] int_names\nint64[] ints\n",
        *_STD,
        ("rtinfer_msgs/Array", _ARRAY),
    ),
    "rtinfer_msgs/msg/Waypoint": _with(
        "# One `action_chunk` message: header.stamp = its publish, frame_id = the robot (dest)\n"
        "std_msgs/Header header\nstring src\nuint64 cycle\nuint64 index\nuint64 count\n"
        "float32[] values\nint64[] tokens\nbuiltin_interfaces/Time capture\nint64 period_ns\n"
        "int64 start_ns\n",
        *_STD,
    ),
    "rtinfer_msgs/msg/CycleTrace": _with(
        "# One `trace` record: a cycle's stamps (monotonic ns) and its stage latencies in ms\n"
        "# (NaN where the record lacks a stage's stamps); late: a waypoint the robot dropped\n"
        "# as late, never applied (a miss). header.stamp = capture, frame_id = the node\n"
        "std_msgs/Header header\nstring node\nuint64 cycle\nbool late\n"
        "float64 e2e_ms\nfloat64 obs_transport_ms\nfloat64 ttft_ms\nfloat64 transport_ms\n"
        "float64 apply_delay_ms\nstring[] stamp_names\nint64[] stamp_ns\n"
        "string[] field_names\nfloat64[] field_values\n",
        *_STD,
    ),
    "rtinfer_msgs/msg/Decision": _with(
        "# The monitor's `budget` (kind budget, level) or `command` (kind = the command,\n"
        "# level -1) message\n"
        "std_msgs/Header header\nstring src\nstring kind\nint64 level\nstring reason\n",
        *_STD,
    ),
    "diagnostic_msgs/msg/DiagnosticArray": _with(
        "std_msgs/Header header\ndiagnostic_msgs/DiagnosticStatus[] status\n",
        *_STD,
        ("diagnostic_msgs/DiagnosticStatus", _STATUS),
        ("diagnostic_msgs/KeyValue", _KEYVALUE),
    ),
    "sensor_msgs/msg/Image": _with(
        "std_msgs/Header header\nuint32 height\nuint32 width\nstring encoding\n"
        "uint8 is_bigendian\nuint32 step\nuint8[] data\n",
        *_STD,
    ),
}
ENCODINGS = {1: "mono8", 3: "rgb8", 4: "rgba8"}  # sensor_msgs/Image encoding by channels
STAGE_FIELDS = tuple(f"{name}_ms" for name, _, _ in STAGES)


class WallClock:
    """Monotonic ns -> ROS Time on the wall clock, by this process's offset at start."""

    def __init__(self) -> None:
        self.offset_ns = time.time_ns() - time.monotonic_ns()

    def wall_ns(self, mono_ns: int) -> int:
        return int(mono_ns) + self.offset_ns

    def stamp(self, mono_ns: int) -> dict:
        ns = self.wall_ns(mono_ns)
        return {"sec": ns // 1_000_000_000, "nanosec": ns % 1_000_000_000}


def header(clock: WallClock, mono_ns: int, frame_id: str) -> dict:
    return {"stamp": clock.stamp(mono_ns), "frame_id": frame_id}


def observation(env, clock: WallClock) -> dict:
    b = env.body
    return {
        "header": header(clock, env.stamps.get("capture", env.stamps["publish"]), env.src),
        "seq": env.seq,
        "values": [
            {
                "name": k,
                "dtype": str(a.dtype),
                "shape": list(a.shape),
                "data": np.asarray(a, np.float64).ravel().tolist(),
            }
            for k, a in b["values"].items()
        ],
        "int_names": list(b["ints"]),
        "ints": [int(v) for v in b["ints"].values()],
    }


def images(env, clock: WallClock):
    """(camera, sensor_msgs/Image) for each frame an `obs` message carries."""
    for camera, frame in (env.body.get("frames") or {}).items():
        img = np.ascontiguousarray(frame["image"])
        h, w = img.shape[:2]
        c = img.shape[2] if img.ndim == 3 else 1
        yield (
            camera,
            {
                "header": header(clock, frame["capture_ns"], camera),
                "height": h,
                "width": w,
                "encoding": ENCODINGS.get(c, f"8UC{c}"),
                "is_bigendian": 0,
                "step": w * c,
                "data": img.tobytes(),
            },
        )


def waypoint(env, clock: WallClock) -> dict:
    b = env.body
    tokens = b.get("tokens")
    return {
        "header": header(clock, env.stamps["publish"], b["dest"]),
        "src": env.src,
        "cycle": b["cycle"],
        "index": b["index"],
        "count": b["count"],
        "values": np.asarray(b["values"], np.float32).tolist(),
        "tokens": [] if tokens is None else [int(t) for t in tokens],
        "capture": clock.stamp(env.stamps.get("capture", env.stamps["publish"])),
        "period_ns": b["period_ns"],
        "start_ns": b["start_ns"],
    }


def cycle_trace(env, clock: WallClock) -> dict:
    b, st = env.body, env.body["stamps"]
    out = {
        "header": header(clock, st.get("capture", env.stamps["publish"]), b["node"]),
        "node": b["node"],
        "cycle": b["cycle"],
        "late": is_late(b),
        "stamp_names": list(st),
        "stamp_ns": [int(v) for v in st.values()],
        "field_names": list(b["fields"]),
        "field_values": [float(v) for v in b["fields"].values()],
    }
    for (_name, a, z), key in zip(STAGES, STAGE_FIELDS):
        out[key] = (st[z] - st[a]) / 1e6 if a in st and z in st else math.nan
    return out


def diagnostics(env, clock: WallClock) -> dict:
    b = env.body
    level = 0 if b["state"] in ("run", "ok", "ready") else 1
    values = [{"key": k, "value": str(v)} for k, v in b["counters"].items()]
    values += [{"key": k, "value": f"{v:g}"} for k, v in b["gauges"].items()]
    return {
        "header": header(clock, env.stamps["publish"], b["node"]),
        "status": [
            {
                "level": level,
                "name": b["node"],
                "message": b["state"],
                "hardware_id": env.src,
                "values": values,
            }
        ],
    }


def decision(env, clock: WallClock) -> dict:
    b = env.body
    kind, level = ("budget", b["level"]) if env.topic == "budget" else (b["cmd"], -1)
    return {
        "header": header(clock, env.stamps["publish"], env.src),
        "src": env.src,
        "kind": kind,
        "level": level,
        "reason": b["reason"],
    }


def trace_record(msg) -> dict:
    """A CycleTrace message (as a reader decodes it) back into a trace record
    (rtinfer.realtime.trace's form): what `rtinfer report run.mcap` reads."""
    return {
        "node": msg.node,
        "cycle": msg.cycle,
        "stamps": dict(zip(msg.stamp_names, msg.stamp_ns)),
        "fields": dict(zip(msg.field_names, msg.field_values)),
    }
