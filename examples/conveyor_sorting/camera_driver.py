"""CellCamera: the cell's camera process as the camera of the sim's driver (docs/robots.md,
"Cameras"): what ConveyorSim holds when its policy takes frames.

The camera renders in a process of its own (examples.conveyor_sorting.camera), never on the
1 kHz loop. Per tick the loop only offers its state to the camera (`tick`: a StateTap at the
camera's rate, the shutter); per observation it takes the newest frame that has arrived
(`frame`), without waiting: a latest-only subscriber drained once, no copy of the image (the
frame message's own buffer goes out in the observation). The frame keeps its own capture
stamp (the state's), never newer than the observation's. An observation goes out only with
a frame: none yet (the camera is starting) or the newest older than the deadline (the camera
stalled) skips it, counted (no_frame, stale); the policy node would refuse it anyway
(frame_missing, frame_stale). A frame of another size or camera is refused (bad) and said
once a second, with the fix.
"""

from __future__ import annotations

import numpy as np

from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.hist import LatencyHistogram
from rtinfer.transport.bus import Subscriber

from .camera import StateTap, frame_topic

_UINT8 = np.dtype(np.uint8)


class CellCamera:
    """One camera of the cell, seen from the sim's loop. Not thread-safe (the loop's own)."""

    def __init__(
        self,
        camera: str,
        shape: tuple[int, int, int],
        state_endpoint: str,
        frames_endpoint: str,
        *,
        hz: float,
        deadline_ns: int,
    ):
        """camera: its name (the policy's obs_spec.json names it too); shape: the frame
        [H, W, C] the policy takes; state_endpoint: where this sim's StateTap binds (the
        camera connects), at hz; frames_endpoint: where the camera publishes (it binds)."""
        self.name, self.shape, self.deadline_ns = camera, tuple(shape), int(deadline_ns)
        self.tap = StateTap(state_endpoint, hz)
        self.sub = Subscriber(frames_endpoint, [frame_topic(camera)], latest_only=True, hwm=2)
        self.newest: tuple[np.ndarray, int] | None = None  # (image, capture ns)
        self.counters = {"received": 0, "bad": 0, "sent": 0, "no_frame": 0, "stale": 0}
        self.age_ns = LatencyHistogram()  # the frame's age when its observation went out
        self.complaints = Complaints("sim")

    def tick(self, cell, now_ns: int) -> None:
        """Every tick: the cell's state to the camera when due (a counter check otherwise)."""
        self.tap.tick(cell, now_ns)

    def frame(self, now_ns: int) -> tuple[np.ndarray, int] | None:
        """The newest frame for an observation captured at now_ns, as (image, capture ns),
        without waiting; None (counted: no_frame, stale) when there is none to send."""
        env = self.sub.recv(0)
        if env is not None:
            self._take(env)
        if self.newest is None:
            self.counters["no_frame"] += 1
            return None
        age_ns = now_ns - self.newest[1]
        if age_ns > self.deadline_ns:
            self.counters["stale"] += 1
            return None
        self.counters["sent"] += 1
        self.age_ns.record(age_ns)
        return self.newest

    def _take(self, env) -> None:
        image, capture_ns = env.body["values"].get(self.name), env.stamps.get("capture")
        if (
            getattr(image, "dtype", None) != _UINT8
            or image.shape != self.shape
            or capture_ns is None
        ):
            self.counters["bad"] += 1
            got = (getattr(image, "dtype", None), getattr(image, "shape", None))
            self.complaints.say(
                "camera_bad",
                lambda: (
                    f"camera {self.name!r} sent a frame of {got[0]} {got[1]}; the policy takes "
                    f"uint8 {list(self.shape)}: start the camera with the policy's --policy "
                    f"MODEL_DIR (or --width/--height)"
                ),
            )
            return
        self.counters["received"] += 1
        self.newest = (image, capture_ns)

    def report(self) -> dict:
        """Counters, frame_age_ms (capture to its observation) p50/p99/max, the states sent."""
        a = self.age_ns.percentiles_us()
        return {
            "camera": self.name,
            "shape": list(self.shape),
            **self.counters,
            "frame_age_ms": {k: round(a[k] / 1e3, 3) for k in ("p50", "p99", "max")},
            "states_sent": self.tap.pub.counters["sent"],
        }

    def close(self) -> None:
        self.sub.close()
        self.tap.close()
