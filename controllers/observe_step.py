"""ObserveStep: the controller's part that sends what the robot observed as `obs`.

send(obs, state, chunk) publishes the driver's Observation stamped capture, camera frames
included (out of band, not copied), checked against the policy's observation spec when it
has one (ObsCheck). Counted obs_sent, obs_dropped (the bus refused it) or obs_bad (not what
the spec names: said at most once a second, not sent). With cfg.rtc it carries the committed
prefix (controllers.rtc; a robot at rest commits to staying there) and is held back
(obs_held_rtc) while the one before awaits its chunk: one in flight. With
cfg.open_loop_ms it says the robot takes a node's asks (`open_loop_ns`) and sends no faster
than the observation period asked (controllers.pace): one held back counts obs_slowed.
Not thread-safe.
"""

from __future__ import annotations

from rtinfer.realtime.complaints import Complaints
from rtinfer.realtime.node_state import State
from rtinfer.transport.wire import WireError

from .assembler import ChunkAssembler
from .controller_config import ControllerConfig
from .hardware import Observation
from .obs_check import ObsCheck
from .pace import Pace
from .rest_point import RestPoint
from .rtc import Commitments


class ObserveStep:
    def __init__(
        self,
        cfg: ControllerConfig,
        pub,
        *,
        rtc: Commitments,
        rest: RestPoint,
        counters: dict[str, int],
        pace: Pace | None = None,
    ):
        """pace: the asks the chunk intake took (None: none are taken)."""
        self.cfg, self.pub, self.rtc, self.rest, self.counters = cfg, pub, rtc, rest, counters
        self.pace = pace or Pace(None, cfg.deadline_ns)
        counters.setdefault("obs_slowed", 0)
        self.check = ObsCheck(cfg.obs)
        self.complaints = Complaints(cfg.name)
        # waypoint 0's due time and the period of the policy's chunks (a rest prefix's)
        self.timing = (
            (cfg.action.start_ns, cfg.action.period_ns)
            if cfg.action is not None
            else (cfg.tokenizer.period_ns, cfg.tokenizer.period_ns)
            if cfg.tokenizer is not None
            else (0, 0)
        )

    def send(self, obs: Observation, state: State, chunk: ChunkAssembler) -> bool:
        """Publish `obs` (module doc); True if sent. state, chunk: the controller's, whose
        committed prefix an obs carries with cfg.rtc."""
        capture = int(obs.capture_ns)
        if self.pace.hold_back(capture):  # the node asked for fewer: no faster than asked
            self.counters["obs_slowed"] += 1
            return False
        committed = None
        if self.cfg.rtc is not None:
            if self.rtc.awaiting(capture):
                self.counters["obs_held_rtc"] += 1
                return False
            if state == State.RUN:
                committed = self.rtc.prefix(chunk, True, capture)
            elif (hold := self.rest.at(state)) is not None:
                committed = self.rtc.rest_prefix(hold, capture, *self.timing)
        body: dict = {"values": obs.values, "ints": obs.ints}
        why = None
        if obs.frames:  # each image goes as it is: out of band from 64 KiB (docs/wire.md)
            try:
                body["frames"] = {
                    name: {"image": image, "capture_ns": int(capture_ns)}
                    for name, (image, capture_ns) in obs.frames.items()
                }
            except (TypeError, ValueError):
                why = "frames must map a camera name to (uint8 image [H, W, C], capture ns)"
        why = why or self.check.problem(body)
        if committed is not None:  # after the check: the policy's spec names no such key
            body["committed"] = committed
        self.pace.declare(body)
        if why is not None:
            self.counters["obs_bad"] += 1
            self.complaints.say(
                "obs_bad",
                lambda: (
                    f"observation not sent: {why}; make the "
                    "driver's observe() return what the policy's spec names"
                ),
            )
            return False
        try:
            sent = self.pub.publish("obs", body, {"capture": capture})
        except WireError as e:  # not a valid obs body (a NaN, a list for an array): nothing sent
            self.counters["obs_bad"] += 1
            wrong = str(e)
            fix = (
                "each camera's frame as a uint8 numpy image [H, W, C] in frames"
                if "body.frames" in wrong
                else "finite numpy arrays in values and ints in ints"
            )
            self.complaints.say(
                "obs_bad",
                lambda: (
                    f"observation not sent: not a valid obs "
                    f"body ({wrong}); make the driver's observe() return {fix}"
                ),
            )
            return False
        self.counters["obs_sent" if sent else "obs_dropped"] += 1
        if sent:
            self.pace.sent(capture)
        if sent and self.cfg.rtc is not None:  # its answer is awaited: one in flight
            until = capture + self.cfg.deadline_ns
            if committed is not None:
                self.counters["committed_sent"] += 1
                until = max(
                    until, committed["start_ns"] + len(committed["values"]) * self.timing[1]
                )  # the policy's period (none held at rest)
            self.rtc.sent(capture, until)
        return sent
