"""The recorder: a run's bus messages into one MCAP file with ROS 2 message schemas.

    python -m rtinfer.record.node --listen ipc:///run/obs ipc:///run/actions ipc:///run/control \
        --out run.mcap [--seconds 60]

A node like the monitor, and as light on the loop: it only listens (SUB, connects), in a
process of its own at normal priority (docs/launch.md, "Scheduling the loop"), so the loop
never waits for it. `rtinfer launch --record F` and `rtinfer demo --record F` add it to a
launch. Channels (rtinfer.record.messages for the types):

| channel | type | from |
| --- | --- | --- |
| /rtinfer/obs/SRC | rtinfer_msgs/msg/Observation | each robot's `obs` |
| /rtinfer/camera/SRC/CAMERA | sensor_msgs/msg/Image | each frame an `obs` carries |
| /rtinfer/waypoints/DEST | rtinfer_msgs/msg/Waypoint | each `action_chunk` waypoint |
| /rtinfer/trace/NODE | rtinfer_msgs/msg/CycleTrace | each robot's per-cycle `trace` (ms) |
| /diagnostics | diagnostic_msgs/msg/DiagnosticArray | every node's `health` |
| /rtinfer/decisions | rtinfer_msgs/msg/Decision | the monitor's `budget` and `command` |

A message's log time is when the recorder took it (wall clock); its header stamp is the
instant it names (capture, publish) moved onto the wall clock. Compressed (zstd) in 1 MiB
chunks, with a summary and index written on close: a file is whole once the recorder
stopped (SIGINT/SIGTERM, --seconds), and a killed recorder leaves a file readers still
recover up to its last chunk (CHUNK_BYTES). A write that fails (a full disk) stops the
recording for good with one line; the recorder runs on and counts what it could not write
(`lost`: the failed chunk's messages and every one after). At exit it says its counts in
one line: messages handed to the file per kind, and lost.
"""

from __future__ import annotations

import argparse
import sys

from rtinfer.realtime.complaints import say
from rtinfer.realtime.spin import serve, spin
from rtinfer.record import messages as m
from rtinfer.transport.bus import Subscriber
from rtinfer.transport.curve import add_curve_arguments, curve_from_args
from rtinfer.transport.wire import now_ns

TOPICS = ("obs", "action_chunk", "trace", "health", "budget", "command")
# Messages reach the file a chunk at a time: this bounds what a killed recorder loses (about
# 2 s of the demo's messages) and when a full disk is noticed.
CHUNK_BYTES = 64 * 1024
DRAIN_LIMIT = 512  # messages one spin takes: bounds its work under a flood


class WholeWrites:
    """An unbuffered file whose write() writes all it is given or raises (a raw file may
    write less), so the MCAP writer's records land whole and a full disk raises at once."""

    def __init__(self, path: str):
        self._f = open(path, "wb", buffering=0)

    def write(self, data) -> int:
        view, done = memoryview(data), 0
        with view:
            while done < len(view):
                done += self._f.write(view[done:])
        return done

    def tell(self) -> int:
        return self._f.tell()

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self._f.close()


class Recorder:
    """Subscribes to `listen` and writes what arrives to `out` (an MCAP file)."""

    def __init__(self, listen, out: str, *, curve=None, ctx=None, name: str = "recorder"):
        from mcap_ros2.writer import Writer  # the extra: pip install 'rtinfer[record]'

        self.name, self.path = name, out
        self.running = True
        self.counters = {
            "obs": 0,
            "images": 0,
            "waypoints": 0,
            "traces": 0,
            "health": 0,
            "decisions": 0,
            "lost": 0,
        }
        self.failed: str | None = None
        self.clock = m.WallClock()
        self._file = WholeWrites(out)  # a chunk's write fails where it happens
        self._writer = Writer(self._file, chunk_size=CHUNK_BYTES)
        self._pending = 0  # messages handed to the writer since a chunk last reached the file
        self._schemas = {t: self._writer.register_msgdef(t, d) for t, d in m.DEFINITIONS.items()}
        self.sub = Subscriber(listen, TOPICS, ctx=ctx, curve=curve)
        self._route = {
            "obs": self._obs,
            "action_chunk": self._waypoint,
            "trace": self._trace,
            "health": self._health,
            "budget": self._decision,
            "command": self._decision,
        }

    def stop(self) -> None:
        self.running = False

    def run(self, seconds: float | None = None) -> None:
        spin(self, seconds, 50)

    def spin_once(self, timeout_ms: int = 50) -> bool:
        env = self.sub.recv(timeout_ms)
        for _ in range(DRAIN_LIMIT):
            if env is None:
                return True
            self._route[env.topic.split("/", 1)[0]](env)
            env = self.sub.recv(0)
        return True

    def _write(self, channel: str, datatype: str, msg: dict, counter: str) -> None:
        if self.failed is not None:
            self.counters["lost"] += 1
            return
        at = self._file.tell()
        try:
            self._writer.write_message(
                channel, self._schemas[datatype], msg, log_time=self.clock.wall_ns(now_ns())
            )
        except OSError as e:  # a full disk: stop recording, say it once, keep counting
            self._fail(f"recording {self.path} stopped", e, self._pending + 1)
            return
        self.counters[counter] += 1
        self._pending = 0 if self._file.tell() != at else self._pending + 1

    def _fail(self, what: str, e: OSError, lost: int) -> None:
        """Stop for good: the messages of the chunk that could not be written are lost
        (counted); the chunks written before stay readable."""
        self.failed = e.strerror or str(e)
        self.counters["lost"] += lost
        say(
            self.name,
            f"{what}: {self.failed}; {lost} messages not written; free space "
            "and record again (the chunks written before are readable)",
            error=False,
        )

    def _obs(self, env) -> None:
        dt = "rtinfer_msgs/msg/Observation"
        self._write(f"/rtinfer/obs/{env.src}", dt, m.observation(env, self.clock), "obs")
        for camera, img in m.images(env, self.clock):
            self._write(
                f"/rtinfer/camera/{env.src}/{camera}", "sensor_msgs/msg/Image", img, "images"
            )

    def _waypoint(self, env) -> None:
        dt = "rtinfer_msgs/msg/Waypoint"
        self._write(
            f"/rtinfer/waypoints/{env.body['dest']}", dt, m.waypoint(env, self.clock), "waypoints"
        )

    def _trace(self, env) -> None:
        dt = "rtinfer_msgs/msg/CycleTrace"
        self._write(
            f"/rtinfer/trace/{env.body['node']}", dt, m.cycle_trace(env, self.clock), "traces"
        )

    def _health(self, env) -> None:
        dt = "diagnostic_msgs/msg/DiagnosticArray"
        self._write("/diagnostics", dt, m.diagnostics(env, self.clock), "health")

    def _decision(self, env) -> None:
        dt = "rtinfer_msgs/msg/Decision"
        self._write("/rtinfer/decisions", dt, m.decision(env, self.clock), "decisions")

    def close(self) -> None:
        """Write the summary and index, close the file and the socket; idempotent."""
        if self._file is not None:
            try:
                if self.failed is None:
                    self._writer.finish()
            except OSError as e:
                self._fail(f"recording {self.path} not finished", e, self._pending)
            finally:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None
        self.sub.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m rtinfer.record.node", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--listen",
        nargs="+",
        required=True,
        help="endpoints to connect to (obs, actions, control: every one of a run)",
    )
    ap.add_argument("--out", required=True, help="the MCAP file to write (run.mcap)")
    ap.add_argument("--name", default="recorder")
    ap.add_argument("--seconds", type=float, default=None)
    add_curve_arguments(ap)
    a = ap.parse_args(argv)
    curve = curve_from_args(ap, a, binds=[], connects=a.listen)
    try:
        rec = Recorder(a.listen, a.out, curve=curve, name=a.name)
    except ImportError as e:
        say(
            a.name,
            f"recording needs mcap and mcap-ros2-support ({e}); pip install 'rtinfer[record]'",
        )
        return 2
    except OSError as e:
        say(a.name, f"cannot write {a.out}: {e.strerror}; give a writable path")
        return 2
    try:
        serve(rec, a.seconds, f"{a.name}: recording to {a.out}")
    finally:
        print(
            f"{a.name}: {a.out}: " + ", ".join(f"{k} {v}" for k, v in rec.counters.items()),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
