"""ControllerConfig: one robot's controller, set against the policy it follows.

Two configs, two roles: controllers.config.ControlConfig is the robot alone (its axes, limits,
control law and rate: what a robot is whoever drives it); ControllerConfig is that robot's
ControlConfig plus what its controller needs from the policy side (the tokenizer or action
spec whose chunks it follows, the observation spec, the deadline, the chunk interval, health
and real-time chunking), each checked against the robot's axes once, when it is built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rtinfer.model.action_spec import ActionSpec
from rtinfer.model.action_tokens import TokenizerConfig
from rtinfer.model.obs_spec import FORMAT as OBS_SPEC_FORMAT
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.model.obs_tokens import ObsTokens
from rtinfer.realtime.deadline import DEADLINE_NS

from .config import ControlConfig
from .rtc import RtcConfig


@dataclass
class ControllerConfig:
    """The robot's controller (module doc: ControlConfig is the robot alone). control: the
    robot (controllers.config). tokenizer: the action-token policy's, whose
    chunks this robot follows; action: the continuous-chunk policy's action spec. At least
    one; each is checked against the robot's axes here (names, units, ranges): a policy that
    does not fit is a ValueError naming both sides, before the first tick."""

    control: ControlConfig
    tokenizer: TokenizerConfig | None = None
    name: str = "controller"
    deadline_ns: int = DEADLINE_NS
    chunk_interval_ns: int = 0  # expected time between fresh chunks (policy period);
    # set it whenever the deadline is shorter than that period, or the watchdog holds the
    # robot between every two chunks
    health_hz: float = 10.0
    max_msgs_per_tick: int = 32  # bounds update()'s work under a flood
    max_period_ns: int = 1_000_000_000  # a waypoint period (or start) longer than this is bogus
    action: ActionSpec | None = None  # the robot's action spec: continuous chunks must carry
    # its hash; None: only action-token chunks (on `tokenizer`) are followed
    obs: ObsSpec | ObsTokens | None = None  # the policy's observation spec: an observation
    # that does not match it is not sent (obs_bad); None: sent unchecked
    rtc: RtcConfig | None = None  # real-time chunking: send the committed prefix
    # with each observation (controllers.rtc); None: send none (chunks conditioned on a
    # prefix are still checked against the plan in use)
    clock_uncertainty_ns: int = 0  # how far a chunk's capture may lie in this robot's
    # future: 0 when the robot stamps its own observations (rtinfer's robots do); the clock
    # estimate's uncertainty when another host's clock stamps them
    open_loop_ms: float | None = None  # take a node's asks under overload (controllers.pace):
    # execute a chunk up to this long after its capture; None: declare nothing, take none

    def __post_init__(self) -> None:
        """Refuse settings the loop cannot run with: ValueError naming each and its fix."""
        rules: tuple[tuple[bool, str, str], ...] = (
            (bool(self.name), "name is empty", "give the node a name (it labels health, trace)"),
            (
                self.deadline_ns > 0,
                f"deadline_ns={self.deadline_ns} must be > 0",
                "the most a chunk's capture may lag its arrival, e.g. 100_000_000 (100 ms)",
            ),
            (
                self.chunk_interval_ns >= 0,
                f"chunk_interval_ns={self.chunk_interval_ns} must be >= 0",
                "the policy's period in ns, e.g. 50_000_000 at 20 Hz, or 0",
            ),
            (
                self.health_hz > 0,
                f"health_hz={self.health_hz} must be > 0",
                "health messages per second, e.g. 10",
            ),
            (
                self.max_msgs_per_tick >= 1,
                f"max_msgs_per_tick={self.max_msgs_per_tick} must be >= 1",
                "the messages one tick may take, e.g. 32",
            ),
            (
                self.max_period_ns > 0,
                f"max_period_ns={self.max_period_ns} must be > 0",
                "the longest plausible waypoint period, e.g. 1_000_000_000 (1 s)",
            ),
            (
                self.open_loop_ms is None or self.open_loop_ms > 0,
                f"open_loop_ms={self.open_loop_ms} must be > 0",
                "the longest a chunk is executed after its capture, e.g. 500, or leave it out",
            ),
            (
                0 <= self.clock_uncertainty_ns < self.deadline_ns,
                f"clock_uncertainty_ns="
                f"{self.clock_uncertainty_ns} must be >= 0 and below the deadline",
                "0 on one host, else the clock offset estimate's uncertainty, e.g. 2_000_000",
            ),
        )
        a, t = self.action, self.tokenizer
        if a is None and t is None:
            rules += (
                (
                    False,
                    "no policy spec",
                    "give the tokenizer (action-token policies) "
                    "or the action spec (continuous-chunk policies) this robot follows",
                ),
            )
        if a is not None and t is not None and (a.names, a.horizon) != (t.names, t.horizon):
            rules += (
                (
                    False,
                    f"action spec names {list(a.names)} / horizon {a.horizon} differ "
                    f"from the tokenizer's {list(t.names)} / {t.horizon}",
                    "describe the same axes and chunk length in both",
                ),
            )
        c = self.control
        misfit = (
            []
            if t is None
            else c.spec_problems(t.names, None, t.low, t.high, "the policy's tokenizer")
        ) + (
            []
            if a is None
            else c.spec_problems(a.names, a.units, a.low, a.high, "the policy's action spec")
        )
        rules += tuple(
            (False, m, "serve a policy made for this robot, or fix the robot config")
            for m in dict.fromkeys(misfit)
        )
        wrong = [f"{what}: {fix}" for ok, what, fix in rules if not ok]
        if wrong:
            raise ValueError(f"controller config {self.name!r}: " + "; ".join(wrong))

    @classmethod
    def from_dict(cls, d: dict) -> ControllerConfig:
        """From YAML data: "control" is a robot (controllers.config.ControlConfig.from_dict);
        "tokenizer", "action" and "obs" are dicts or paths of saved files."""
        d = dict(d)
        if "control" not in d:
            raise ValueError("controller config: `control` (the robot's axes) is missing")
        tok, act, obs = d.pop("tokenizer", None), d.pop("action", None), d.pop("obs", None)
        d["rtc"] = RtcConfig.from_dict(d.pop("rtc", None))
        tok = (
            TokenizerConfig.load(tok)
            if isinstance(tok, str)
            else None
            if tok is None
            else TokenizerConfig.from_dict(tok)
        )
        act = (
            ActionSpec.load(act)
            if isinstance(act, str)
            else None
            if act is None
            else ActionSpec.from_dict(act)
        )
        obs = obs_spec_from(json.loads(Path(obs).read_text()) if isinstance(obs, str) else obs)
        return cls(
            tokenizer=tok,
            control=ControlConfig.from_dict(d.pop("control")),
            action=act,
            obs=obs,
            **d,
        )


def obs_spec_from(doc: dict | None) -> ObsSpec | ObsTokens | None:
    """The observation spec in a policy's obs_spec.json or obs_tokens.json document."""
    if doc is None:
        return None
    return ObsSpec(doc) if doc.get("format") == OBS_SPEC_FORMAT else ObsTokens(doc)
