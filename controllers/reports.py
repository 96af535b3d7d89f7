"""ControllerReports: what the controller tells the monitor, the dashboard and its trace.

Per applied cycle a `trace` record with its "apply" stamp and the e2e latency (apply -
capture: a histogram, the last and the largest); per late cycle, once, a `trace` record
without "apply" (fields.late_index: the waypoint found late), so the monitor counts it as a
deadline miss; and `health` at health_hz, with one line (at most once a second) when the
limits clipped the policy's waypoints since the last. Each record goes to the trace file
(when there is one) and the bus. Not thread-safe.
"""

from __future__ import annotations

from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.hist import LatencyHistogram

from .assembler import ChunkAssembler
from .stack import ControlStack

CLAMPS = ("waypoint_clamps", "workspace_clamps")  # the policy asked past the axes: said


class ControllerReports:
    def __init__(self, name: str, health_hz: float, pub, trace=None):
        """pub: the robot's Publisher; trace: an optional TraceWriter."""
        self.name, self.pub, self.trace = name, pub, trace
        self.period_ns = int(1e9 / health_hz)
        self.next_ns = 0  # when the next health message is due
        self.e2e = LatencyHistogram()  # apply - capture per cycle, ns
        self.e2e_last_ns = self.e2e_max_ns = 0
        self.late_key: tuple | None = None  # the last cycle reported late (once per cycle)
        self.complaints = Complaints(name)
        self._clamps = dict.fromkeys(CLAMPS, 0)  # the limits' counts when last said

    def applied(self, chunk: ChunkAssembler, apply_ns: int) -> int:
        """The chunk's first setpoint went out at apply_ns: its e2e (returned) and trace."""
        e2e = apply_ns - chunk.capture_ns
        self.e2e.record(e2e)
        self.e2e_last_ns, self.e2e_max_ns = e2e, max(self.e2e_max_ns, e2e)
        fields = {"e2e_ms": e2e / 1e6}
        if chunk.window_ns:  # fresh this long by its committed prefix (the monitor's rule)
            fields["window_ms"] = chunk.window_ns / 1e6
        self.emit(
            {
                "node": self.name,
                "cycle": int(chunk.cycle),
                "stamps": {**chunk.stamps, "apply": apply_ns},
                "fields": fields,
            }
        )
        return e2e

    def late(self, key: tuple, stamps: dict, index: int) -> None:
        """The `trace` of a late cycle (key: src, cycle, capture), reported once: stamps up to
        "recv", no "apply", fields.late_index = the waypoint found late."""
        self.late_key = key
        self.emit(
            {
                "node": self.name,
                "cycle": int(key[1]),
                "stamps": dict(stamps),
                "fields": {"late_index": float(index)},
            }
        )

    def emit(self, rec: dict) -> None:
        if self.trace is not None:
            self.trace.write(rec)
        self.pub.publish("trace", rec)

    def due(self, now: int) -> bool:
        """True (and the next one scheduled) when a health message is due at now."""
        if now < self.next_ns:
            return False
        self.next_ns = now + self.period_ns
        return True

    def health(self, state: str, counters: dict, stack: ControlStack) -> None:
        """`health` (counters: all of the controller's)."""
        self._say_clamps(stack.counters)
        gauges = {
            "e2e_last_ms": self.e2e_last_ns / 1e6,
            "e2e_max_ms": self.e2e_max_ns / 1e6,
            "holding": float(stack.holding),
        }
        self.pub.publish(
            "health",
            {"node": self.name, "state": str(state), "counters": counters, "gauges": gauges},
        )

    def _say_clamps(self, c: dict) -> None:
        """The limits clipped the policy's waypoints or cut the command at a workspace bound
        since the last health: one line (at most once a second), with the totals."""
        seen = self._clamps
        if all(c[k] == seen[k] for k in CLAMPS):
            return
        seen.update((k, c[k]) for k in CLAMPS)
        self.complaints.say(
            "clamps",
            lambda: (
                f"the policy's chunks go past the axis limits: {seen['waypoint_clamps']} waypoint "
                f"values clipped into [low + margin, high - margin], {seen['workspace_clamps']} "
                f"commands cut back at a workspace bound so far (clipped, never sent as is); "
                f"serve a policy whose action spec fits this robot, or check its output"
            ),
        )
