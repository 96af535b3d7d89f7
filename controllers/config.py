"""A robot as data: its axes, their units, limits, gains and command modes, and its tool.

    axes:
      - {name: shoulder, unit: rad, mode: effort, low: -2.0, high: 2.0, vel_limit: 2.0,
         acc_limit: 12.0, effort_limit: 30.0, kp: 400.0, ki: 800.0, kd: 40.0}
      - {name: x, unit: m, mode: position, low: 0.0, high: 0.3, vel_limit: 0.5, acc_limit: 4.0}
    tool: {name: gripper, kind: continuous, unit: m, low: 0.0, high: 0.04}

Per command mode (docs/robots.md says the same, as the contract):
- position: the drive closes its own loop; the command is the tracked reference position.
  No gains. Hold: the reference brakes to a stop and stays there.
- velocity: the command is the reference velocity plus kp * (position error) + the integral
  of ki * error (kd is not used), limited to the measured-velocity safety limit. Hold: the
  reference brakes, so the command ramps to zero and then corrects position drift.
- effort: the command is PID(reference, measured) + feed-forward (gravity: the constant
  `gravity` plus the hardware's gravity() hook; mass * reference acceleration), limited to
  effort_limit. Hold: the PID holds the braked reference against gravity.
The action dimensions a policy must produce are the axes in order, then the tool.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, fields

MODES = ("position", "velocity", "effort")
TOOL_KINDS = ("binary", "continuous")


def _from_dict(cls, d: dict, where: str):
    """cls(**d) for YAML data; an unknown or missing key is an error naming `where`."""
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a mapping of {cls.__name__} fields, got {d!r}")
    names = {f.name for f in fields(cls)}
    required = [f.name for f in fields(cls) if f.default is MISSING]
    unknown, missing = sorted(set(d) - names), [k for k in required if k not in d]
    if unknown or missing:
        raise ValueError(
            f"{where}: unknown keys {unknown}, missing {missing}; the keys are "
            f"{[f.name for f in fields(cls)]}"
        )
    return cls(**d)


@dataclass(frozen=True)
class AxisConfig:
    """One axis. low/high: its position range (the hardware's limits); the controller keeps
    waypoints and the measured position `margin` inside it. vel_limit, acc_limit: of the
    tracked reference. safety_vel_limit: of the measured velocity (None: 1.5 * vel_limit).
    hold_decel: braking deceleration on hold (None: acc_limit). effort_limit: |effort| (effort
    mode; required there). kt: PID back-calculation gain (None: ki / kp). gravity: constant
    effort feed-forward, e.g. m * g on a vertical axis; mass: kg or kg m^2, for mass *
    reference acceleration feed-forward (effort mode)."""

    name: str
    unit: str
    mode: str
    low: float
    high: float
    vel_limit: float
    acc_limit: float
    effort_limit: float = math.inf
    kp: float = 0.0
    ki: float = 0.0
    kd: float = 0.0
    kt: float | None = None
    gravity: float = 0.0
    mass: float = 0.0
    margin: float = 0.0
    safety_vel_limit: float | None = None
    hold_decel: float | None = None

    def __post_init__(self):
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name not in ("name", "unit", "mode") and v is not None:
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise ValueError(f"axis {self.name!r}: {f.name} must be a number, got {v!r}")
                object.__setattr__(self, f.name, float(v))
        wrong = []
        if not self.name or not isinstance(self.name, str):
            wrong.append("name must be a non-empty string")
        if not self.unit or not isinstance(self.unit, str):
            wrong.append('unit must be the position unit, e.g. "m" or "rad"')
        if self.mode not in MODES:
            wrong.append(f"mode {self.mode!r} must be one of {list(MODES)}")
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            wrong.append(f"needs finite low < high, got {self.low:g}, {self.high:g}")
        elif not 0 <= self.margin < (self.high - self.low) / 2:
            wrong.append(
                f"margin {self.margin:g} must be >= 0 and leave room inside "
                f"[{self.low:g}, {self.high:g}]"
            )
        for k in ("vel_limit", "acc_limit", "safety_vel_limit", "hold_decel"):
            v = getattr(self, k)
            if v is not None and not (math.isfinite(v) and v > 0):
                wrong.append(f"{k} must be finite and > 0, got {v:g}")
        gains = {k: getattr(self, k) for k in ("kp", "ki", "kd")}
        if any(not math.isfinite(g) or g < 0 for g in gains.values()):
            wrong.append(f"gains must be finite and >= 0, got {gains}")
        if self.ki and not self.kp and self.kt is None:
            wrong.append(
                "ki without kp: kt (back-calculation) would default to ki / kp; give kt explicitly"
            )
        if self.mode == "effort":
            if not (math.isfinite(self.effort_limit) and self.effort_limit > 0):
                wrong.append("effort mode needs a finite effort_limit > 0 (N or N m)")
            if self.kp <= 0:
                wrong.append("effort mode needs kp > 0 (it is the position loop)")
        elif self.mode == "velocity" and self.kd:
            wrong.append("velocity mode does not use kd; leave it out")
        elif self.mode == "position" and any(gains.values()):
            wrong.append("position mode: the drive closes the loop; leave kp, ki, kd out")
        if self.mode != "effort" and (self.gravity or self.mass):
            wrong.append("gravity and mass are effort-mode feed-forwards; leave them out")
        if wrong:
            raise ValueError(f"axis {self.name!r}: " + "; ".join(wrong))

    @property
    def workspace(self) -> tuple[float, float]:
        """[low, high] less the margin: where the controller keeps the axis."""
        return self.low + self.margin, self.high - self.margin


@dataclass(frozen=True)
class ToolConfig:
    """The tool channel: the last action dimension. binary (a suction valve, an on/off
    gripper): a value above (low + high) / 2 means high (on), else low; continuous (a
    gripper opening): the value, clipped to [low, high]. Either switches at its waypoint's
    due time."""

    name: str
    kind: str = "binary"
    unit: str = "1"
    low: float = 0.0
    high: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "low", float(self.low))
        object.__setattr__(self, "high", float(self.high))
        if not self.name or self.kind not in TOOL_KINDS or not self.low < self.high:
            raise ValueError(
                f"tool {self.name!r}: needs a name, kind in {list(TOOL_KINDS)} and "
                f"low < high, got kind {self.kind!r}, {self.low:g}, {self.high:g}"
            )

    def command(self, value: float) -> float:
        """The tool command for a waypoint's tool value."""
        if self.kind == "binary":
            return self.high if value > (self.low + self.high) / 2 else self.low
        return min(max(value, self.low), self.high)


@dataclass(frozen=True)
class ControlConfig:
    """The whole robot for the controller: axes, the optional tool, and the loop's settings;
    the robot alone, whoever drives it (controllers.controller_config.ControllerConfig adds
    what its controller takes from the policy: specs, deadline, health). tau_d_s: low-pass
    on the measured velocity (PID derivative). blend_ns: old -> new chunk blend window.
    follow_per_s: the reference's catch-up rate when off plan (1/s)."""

    axes: tuple[AxisConfig, ...]
    tool: ToolConfig | None = None
    rate_hz: float = 1000.0
    tau_d_s: float = 0.002
    blend_ns: int = 0
    follow_per_s: float = 200.0

    def __post_init__(self):
        object.__setattr__(self, "axes", tuple(self.axes))
        names = [a.name for a in self.axes] + ([self.tool.name] if self.tool else [])
        if not self.axes or len(set(names)) != len(names):
            raise ValueError(f"a robot needs one or more axes and distinct names, got {names}")
        if not (
            self.rate_hz > 0 and self.tau_d_s >= 0 and self.blend_ns >= 0 and self.follow_per_s > 0
        ):
            raise ValueError("need rate_hz > 0, tau_d_s >= 0, blend_ns >= 0, follow_per_s > 0")

    @property
    def n(self) -> int:
        """Axes (the tool not counted)."""
        return len(self.axes)

    @property
    def names(self) -> tuple[str, ...]:
        """The action dimensions: the axes in order, then the tool."""
        return tuple(a.name for a in self.axes) + ((self.tool.name,) if self.tool else ())

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(a.unit for a in self.axes) + ((self.tool.unit,) if self.tool else ())

    @property
    def ranges(self) -> tuple[tuple[float, float], ...]:
        """Per action dimension, the hardware's [low, high]."""
        t = ((self.tool.low, self.tool.high),) if self.tool else ()
        return tuple((a.low, a.high) for a in self.axes) + t

    def axis(self, key: str) -> tuple:
        """One AxisConfig field, per axis: e.g. axis("kp")."""
        return tuple(getattr(a, key) for a in self.axes)

    def action_spec(self, horizon: int, period_ns: int, start_ns: int | None = None):
        """The ActionSpec of a policy made for exactly this robot (its names, units, ranges)."""
        from rtinfer.model.action_spec import ActionSpec

        lo, hi = zip(*self.ranges)
        return ActionSpec(
            self.names,
            self.units,
            lo,
            hi,
            int(horizon),
            int(period_ns),
            int(period_ns if start_ns is None else start_ns),
        )

    def spec_problems(self, names, units, low, high, what: str = "the policy") -> list[str]:
        """Why a policy's actions (names, units per dimension, or None to skip units, and
        limits) do not fit this robot: one line per difference, naming both sides; empty
        if they fit. The policy's [low, high] must lie within the hardware's per dimension."""
        mine, theirs = list(self.names), list(names)
        if len(theirs) != len(mine):
            return [
                f"{what} has {len(theirs)} action dimensions {theirs}; this robot has "
                f"{len(mine)}: {mine}"
            ]
        out = []
        if theirs != mine:
            out.append(f"{what}'s action names {theirs} are not this robot's {mine}")
        if units is not None and list(units) != list(self.units):
            out.append(f"{what}'s units {list(units)} are not this robot's {list(self.units)}")
        for name, lo, hi, (rlo, rhi) in zip(mine, low, high, self.ranges):
            if lo < rlo - 1e-9 or hi > rhi + 1e-9:
                out.append(
                    f"{what}'s {name} spans [{lo:g}, {hi:g}], beyond this robot's "
                    f"[{rlo:g}, {rhi:g}]"
                )
        return out

    def to_dict(self) -> dict:
        d = asdict(self)
        d["axes"] = [{k: v for k, v in a.items() if v is not None} for a in d["axes"]]
        if d["tool"] is None:
            del d["tool"]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ControlConfig:
        """From YAML data (docs/robots.md); unknown keys are an error (typos must not pass)."""
        d = dict(d)
        axes = d.pop("axes", None)
        if not isinstance(axes, list) or not axes:
            raise ValueError("robot config: `axes` must be a list of one or more axes")
        axes = [_from_dict(AxisConfig, a, f"axes[{i}]") for i, a in enumerate(axes)]
        tool = d.pop("tool", None)
        tool = None if tool is None else _from_dict(ToolConfig, tool, "tool")
        return _from_dict(cls, {**d, "axes": tuple(axes), "tool": tool}, "robot config")
