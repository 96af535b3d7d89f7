"""The cell's overhead camera: MuJoCo renders the cell's state in a process of its own.

    python -m examples.conveyor_sorting.camera --state ipc:///tmp/cell_state \
        --frames ipc:///tmp/camera [--hz 20] [--width 224 --height 224 | --policy MODEL_DIR] \
        [--seconds 10] [--report camera_report.json]

Design. The 1 kHz sim loop only publishes its qpos (`StateTap`: `obs/cell_state`,
float64 [nq], about 1 KB, every 1000/state_hz ticks) on an endpoint of its own; this process
mirrors the cell's model (the same MJCF, no physics), sets the newest qpos, runs kinematics
and renders. Rendering in the sim's loop would stall it for a whole frame's render (ms: see
docs/benchmarks.md, "Camera"); mirroring from the `obs` message would show only what the
policy already knows (no orientations, nothing held or falling). The state has its own
endpoint because a SUB socket filters by prefix: on the sim's `obs` endpoint, every policy
node would receive `obs/cell_state` and count it rejected.

It renders each new state as it comes, at most `hz` frames a second (a state captured sooner
than 1/hz after the last one rendered waits, and the newest of those is rendered): a sim whose
StateTap runs at the camera's rate is the shutter, so a frame reaches it one render after its
capture, not up to a camera period later as with a camera polling on its own clock. With
`--policy`, the frame size is the one the policy's
obs_spec.json gives this camera's image input.

Each frame goes out as `obs/camera/NAME` with body {values: {NAME: uint8 [H, W, 3]}, ints:
{state_seq: the state message's seq}} and stamp `capture` = the state's `capture` (when the
world looked like that: a frame's age includes its render), `render` = when it was rendered.
Latest only: the publisher queues one frame per consumer (hwm=1) and drops newer ones while
that queue is full, silently (libzmq counts none: consumers see gaps in the envelope seq),
so it never blocks. A consumer subscribes with ``latest_only=True`` (and ``max_age_ns``):
after a 2 s stall it was handed 2-3 frames from the stall's start (and 2-4 more superseded)
that its socket buffers held, then fresh ones (96 and 224 px; `max_age_ns` drops those):

    Subscriber(FRAMES, [frame_topic("overhead")], latest_only=True, hwm=2, max_age_ns=...)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from rtinfer.model.obs_spec import ObsSpec
from rtinfer.realtime.complaints import say
from rtinfer.realtime.config_cli import add_config_arguments, config_from_args, option
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.realtime.rate import RateKeeper
from rtinfer.realtime.report_file import write_report
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

from .config import CellConfig
from .scene import build_mjcf

STATE_TOPIC = "obs/cell_state"
WAIT_MS = 100  # the longest wait for a state: how soon a stop is seen


def frame_topic(camera: str) -> str:
    """The topic of one camera's frames (a topic per camera: latest-only is per topic)."""
    return f"obs/camera/{camera}"


def frame_shapes(spec: ObsSpec) -> dict[str, tuple[int, int, int]]:
    """camera name -> the frame [H, W, C] a policy's image inputs take from it."""
    return {
        cam: tuple(shape[-3:])
        for key, shape in zip(spec.keys, spec.shapes)
        for cam in spec.images.get(key, ())
    }


def policy_frame(model_dir: str, camera: str) -> dict[str, int]:
    """{"height", "width"} of `camera`'s frames for the policy in `model_dir` (its
    obs_spec.json); ValueError naming the fix when it takes no RGB frame of that camera."""
    path = Path(model_dir) / "obs_spec.json"
    try:
        shapes = frame_shapes(ObsSpec.load(path))
    except OSError as e:
        raise ValueError(
            f"--policy {model_dir}: cannot read {path} ({e.strerror}); give a "
            "camera policy's model directory"
        ) from None
    except ValueError as e:
        raise ValueError(f"--policy {model_dir}: {path}: {e}") from None
    if camera not in shapes or shapes[camera][2] != 3:
        raise ValueError(
            f"--policy {model_dir} takes no RGB frame of camera {camera!r} (its "
            f"cameras: {shapes or 'none'}); give --camera one of them, or "
            "--width/--height without --policy"
        )
    return {"height": shapes[camera][0], "width": shapes[camera][1]}


@dataclass
class CameraConfig:
    state: str = option("", help="endpoint of the sim's StateTap (the camera connects)")
    frames: str = option("", help="endpoint this camera publishes its frames on (binds)")
    camera: str = option("overhead", help="MJCF camera to render (overhead, overview)")
    hz: float = option(
        20.0,
        help="at most this many frames per second (a camera's 15-30): "
        "each new state is rendered, none sooner than 1/hz after the last",
    )
    width: int = option(224, help="frame width in pixels (at most 640)")
    height: int = option(224, help="frame height in pixels (at most 480)")
    policy: str = option(
        "",
        help="a camera policy's model directory: the frame size is the "
        "one its obs_spec.json gives this camera (instead of --width/--height)",
    )
    report: str = option("", help="also write the JSON report to this file (at the end)")
    gl: str = option(
        "egl",
        choices=("egl", "osmesa", "glfw"),
        help="MuJoCo's GL backend (MUJOCO_GL); egl: the GPU's, or Mesa's on a CPU host",
    )
    shadows: bool = option(
        False,
        help="render shadows (a 4096^2 shadow map: about 17 ms more "
        "a frame on a CPU's Mesa, whatever the frame size)",
    )
    seconds: float | None = option(None, help="stop after this long (default: until SIGTERM)")
    free_cell: bool = option(
        False,
        help="instead of the camera: a free-running cell (gantry "
        "parked, objects on the belt) at 1 kHz, its state on --state (binds)",
    )
    state_hz: float = option(30.0, help="with --free-cell: state messages per second")
    measure: int = option(
        0,
        help="instead of running: render this many frames of a moving "
        "cell, time them and a StateTap's publish, print JSON",
    )

    def __post_init__(self):
        if not self.measure and not self.state:
            raise ValueError("--state is required (the endpoint of the sim's StateTap)")
        if not (self.measure or self.free_cell or self.frames):
            raise ValueError("--frames is required (the endpoint to publish frames on)")
        if not 0 < self.hz <= 240:
            raise ValueError(f"hz must be in (0, 240], got {self.hz}")
        if not (1 <= self.width <= 640 and 1 <= self.height <= 480):
            raise ValueError(
                f"frame size {self.width}x{self.height} is outside the cell's "
                "offscreen buffer (640x480): pick a smaller one"
            )


class StateTap:
    """What the sim's loop adds for a camera: its qpos on `endpoint`, every 1000/hz ticks.

    `tick(cell, now_ns)` costs a counter check on other ticks and one encode and send of nq
    float64 when due (docs/benchmarks.md, "Camera"). It never blocks: a camera that falls
    behind misses states (libzmq drops them at the queue's end), it never slows the loop."""

    def __init__(self, endpoint: str, hz: float = 30.0, src: str = "sim"):
        self.every = max(1, int(round(1000.0 / hz)))
        self.pub = Publisher(endpoint, src, hwm=2)
        self._tick = 0

    def tick(self, cell, now_ns: int) -> bool:
        """Publish cell.data.qpos stamped `capture` = now_ns when due; True if sent."""
        self._tick += 1
        if self._tick % self.every:
            return False
        return self.pub.publish(
            STATE_TOPIC,
            {"values": {"qpos": cell.data.qpos}, "ints": {"step": cell.step_count}},
            {"capture": now_ns},
        )

    def close(self) -> None:
        self.pub.close()


class CellMirror:
    """The cell's model without physics: qpos in, the camera's frame out. Not thread-safe."""

    def __init__(
        self,
        camera: str,
        width: int,
        height: int,
        cell: CellConfig | None = None,
        shadows: bool = False,
    ):
        import mujoco  # here, not at the top: MUJOCO_GL must be set before mujoco loads
        from mujoco.rendering.classic import gl_context

        if (
            getattr(gl_context, "GLContext", None) is not None
            and gl_context.GLContext.__module__ == "mujoco.glfw"
            and not os.environ.get("DISPLAY")
        ):
            # MuJoCo aborts the process (no exception) making a GLFW context without a display
            raise RuntimeError(
                "MuJoCo was loaded with the GLFW backend and there is no display: "
                "set MUJOCO_GL=egl (or osmesa) before anything imports mujoco"
            )
        self.mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_string(build_mjcf(cell or CellConfig()))
        if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera) < 0:
            raise ValueError(f"the cell has no camera {camera!r}: use 'overhead' or 'overview'")
        self.data = mujoco.MjData(self.model)
        self.renderer = mujoco.Renderer(self.model, height, width)
        self.camera, self.shadows = camera, shadows

    def render(self, qpos: np.ndarray) -> np.ndarray:
        """uint8 [H, W, 3] of the cell in pose qpos (shape (nq,)); a new array each call,
        because the last one may still be in zmq's hands (sent without a copy)."""
        m, d = self.model, self.data
        d.qpos[:] = qpos
        self.mujoco.mj_kinematics(m, d)
        self.mujoco.mj_camlight(m, d)  # camera and light poses: all the renderer needs
        self.renderer.update_scene(d, camera=self.camera)
        self.renderer.scene.flags[self.mujoco.mjtRndFlag.mjRND_SHADOW] = self.shadows
        return self.renderer.render()

    def close(self) -> None:
        self.renderer.close()


class CameraProcess:
    """Newest state -> render -> publish, at most cfg.hz times a second; renders only when a
    new state came."""

    def __init__(self, cfg: CameraConfig, cell: CellConfig | None = None, stop=lambda: False):
        """stop: called once per tick; True ends run() (e.g. set by a signal handler)."""
        self.cfg = cfg
        self.should_stop = stop
        self.mirror = CellMirror(cfg.camera, cfg.width, cfg.height, cell, cfg.shadows)
        self.nq = self.mirror.model.nq
        self.topic = frame_topic(cfg.camera)
        # latest_only drains up to 2 * hwm + 1 messages a call: after a stall, one call
        # catches up with every state queued meanwhile (1 KB each) instead of a few a tick
        self.sub = Subscriber(cfg.state, [STATE_TOPIC], latest_only=True, hwm=1000)
        self.pub = Publisher(cfg.frames, cfg.camera, hwm=1, oob_bytes=1024)
        self.counters = {"states": 0, "state_bad": 0, "frames": 0, "dropped": 0, "idle": 0}
        self.render_ns = LatencyHistogram()
        self.state_capture_ns = 0  # the capture of the last state rendered

    def step(self, timeout_ms: int = 0) -> bool:
        """One camera tick: wait up to timeout_ms for a state; True if a frame was rendered
        (and offered to the publisher)."""
        c = self.counters
        env = self.sub.recv(timeout_ms)
        if env is None:
            c["idle"] += 1
            return False
        qpos = env.body["values"].get("qpos")
        if qpos is None or qpos.shape != (self.nq,) or "capture" not in env.stamps:
            c["state_bad"] += 1  # another cell's model, or not a StateTap's message
            return False
        c["states"] += 1
        self.state_capture_ns = env.stamps["capture"]
        start = now_ns()
        frame = self.mirror.render(qpos)
        body = {"values": {self.cfg.camera: frame}, "ints": {"state_seq": env.seq}}
        stamps = {"capture": env.stamps["capture"], "render": now_ns()}
        self.render_ns.record(stamps["render"] - start)
        if self.pub.publish(self.topic, body, stamps):
            c["frames"] += 1
        else:
            c["dropped"] += 1
        return True

    def run(self) -> dict:
        """Each new state rendered as it comes, none captured sooner than 1/hz after the last
        one rendered, until stopped or cfg.seconds; the report. Paced by the states' capture
        stamps, not by when they arrived: a StateTap at hz is rendered as each state comes
        (waiting for the next from its own clock would drift against the tap's, until each
        frame showed a state a whole period old)."""
        period_ns = int(1e9 / self.cfg.hz)
        end = None if self.cfg.seconds is None else now_ns() + int(self.cfg.seconds * 1e9)
        while not self.should_stop() and (end is None or now_ns() < end):
            if self.step(WAIT_MS):
                rest_ns = self.state_capture_ns + period_ns - now_ns()
                if rest_ns > 0:  # a newer state meanwhile waits; the newest is taken then
                    time.sleep(rest_ns / 1e9)
        return self.report()

    def report(self) -> dict:
        """Counters (frames: rendered and sent; dropped: the publisher's queue was full),
        render_ms p50/p99/max, and the sockets' counters."""
        r = self.render_ns.percentiles_us()
        return {
            "camera": self.cfg.camera,
            "shape": [self.cfg.height, self.cfg.width, 3],
            "hz": self.cfg.hz,
            **self.counters,
            "render_ms": {k: round(r[k] / 1e3, 3) for k in ("p50", "p99", "max")},
            "pub": dict(self.pub.counters),
            "sub": {k: v for k, v in self.sub.counters.items() if "." not in k},
        }

    def close(self) -> None:
        self.sub.close()
        self.pub.close()
        self.mirror.close()


def free_running_cell(
    state_endpoint: str, seconds: float, state_hz: float = 30.0, seed: int = 0, stop=lambda: False
) -> dict:
    """A state source without controller or policy: the cell (gantry parked, objects riding the
    belt) stepped at 1 kHz on a RateKeeper, its state out through a StateTap that binds
    `state_endpoint`. Returns the loop's lateness (us) and the tap's publish cost (us)."""
    from .cell import ConveyorCell

    cell = ConveyorCell(CellConfig(seed=seed))
    tap = StateTap(state_endpoint, state_hz)
    cost = LatencyHistogram()
    rk = RateKeeper(1000.0, "cell")
    end = now_ns() + int(seconds * 1e9)
    while now_ns() < end and not stop():
        cell.step()
        t = now_ns()
        if tap.tick(cell, t):
            cost.record(now_ns() - t)
        rk.keep_time()
    tap.close()
    late = rk.lateness.percentiles_us()
    return {
        "ticks": rk.frame,
        "late_ticks": rk.late_ticks,
        "overruns": rk.overruns,
        "skipped": rk.skipped_frames,
        "lateness_p50_us": late["p50"],
        "lateness_p99_us": late["p99"],
        "lateness_max_us": late["max"],
        "states_sent": tap.pub.counters["sent"],
        "state_dropped": tap.pub.counters["dropped"],
        "tap_p50_us": cost.percentiles_us()["p50"],
        "tap_p99_us": cost.percentiles_us()["p99"],
        "spawned": cell.metrics.spawned,
    }


def measure(cfg: CameraConfig, frames: int) -> dict:
    """Render `frames` frames of a free-running cell (one every 33 ms of sim) at cfg's size
    and GL backend; ms per frame, and a StateTap's publish cost in us, p50/p99."""
    from .cell import ConveyorCell

    cell = ConveyorCell()
    mirror = CellMirror(cfg.camera, cfg.width, cfg.height, shadows=cfg.shadows)
    render, publish = LatencyHistogram(), LatencyHistogram()
    with tempfile.TemporaryDirectory() as tmp:
        tap = StateTap(f"ipc://{tmp}/state", 1000.0)  # publishes on every tick() below
        sub = Subscriber(tap.pub.endpoint, [STATE_TOPIC], latest_only=True)  # a real reader
        for i in range(frames + 5):
            cell.step(33)
            t0 = now_ns()
            mirror.render(cell.data.qpos)
            t1 = now_ns()
            tap.tick(cell, t1)
            t2 = now_ns()
            sub.recv(0)
            if i >= 5:  # the first frames pay for compiling shaders and uploading meshes
                render.record(t1 - t0)
                publish.record(t2 - t1)
        sub.close()
        tap.close()
    mirror.close()
    r, p = render.percentiles_us(), publish.percentiles_us()
    return {
        "gl": cfg.gl,
        "camera": cfg.camera,
        "size": f"{cfg.width}x{cfg.height}",
        "shadows": cfg.shadows,
        "frames": int(r["count"]),
        "render_p50_ms": round(r["p50"] / 1e3, 3),
        "render_p99_ms": round(r["p99"] / 1e3, 3),
        "tap_p50_us": p["p50"],
        "tap_p99_us": p["p99"],
        "load_1min": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m examples.conveyor_sorting.camera", description=__doc__.splitlines()[0]
    )
    add_config_arguments(ap, CameraConfig)
    a = ap.parse_args(argv)
    try:
        cfg = config_from_args(CameraConfig, a)
        if cfg.policy:
            cfg = replace(cfg, **policy_frame(cfg.policy, cfg.camera))
    except ValueError as e:
        ap.error(str(e))
    os.environ["MUJOCO_GL"] = cfg.gl
    stopped = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.append(1))
    if cfg.measure:
        report = measure(cfg, cfg.measure)
    elif cfg.free_cell:
        report = free_running_cell(
            cfg.state,
            1e9 if cfg.seconds is None else cfg.seconds,
            cfg.state_hz,
            stop=lambda: bool(stopped),
        )
    else:
        try:
            cam = CameraProcess(cfg, stop=lambda: bool(stopped))
        except ValueError as e:  # no such camera in the cell
            ap.error(str(e))
        try:
            report = cam.run()
        finally:
            cam.close()
    text = json.dumps(report)
    why = write_report(cfg.report, text + "\n") if cfg.report else None
    if why:
        say("camera", f"report {cfg.report} not written: {why}", error=False)
    print(text, flush=True)  # one line, for jq
    return 0


if __name__ == "__main__":
    sys.exit(main())
