"""Configuration of the conveyor-sorting cell, as data.

World frame: x along the belt (objects travel +x), y across it, z up; SI units.
The gantry's joint positions are the suction cup's bottom-centre position in the world
frame, so `RobotState.pos` and action waypoints (x, y, z) share one frame.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: the cell's config module stays light
    from controllers.config import ControlConfig
    from rtinfer.model.action_spec import ActionSpec
    from rtinfer.model.action_tokens import TokenizerConfig


@dataclass(frozen=True)
class ObjectClass:
    """One object class. shape: "box" (size = half-extents x, y, z), "cylinder"
    (size = radius, half-height; stands upright) or "sphere" (size = radius)."""

    name: str
    shape: str
    size: tuple[float, ...]
    rgba: tuple[float, float, float, float]
    mass_kg: float = 0.1

    @property
    def half_height(self) -> float:
        """Height of the object's centre above the surface it rests on (m)."""
        return self.size[0] if self.shape == "sphere" else self.size[-1]


DEFAULT_CLASSES = (
    ObjectClass("box", "box", (0.025, 0.025, 0.02), (0.85, 0.2, 0.15, 1.0)),
    ObjectClass("cylinder", "cylinder", (0.022, 0.028), (0.2, 0.7, 0.25, 1.0)),
    ObjectClass("sphere", "sphere", (0.024,), (0.2, 0.35, 0.9, 1.0)),
)


@dataclass(frozen=True)
class CellConfig:
    """Everything that shapes the cell. Frozen: derive variants with dataclasses.replace."""

    seed: int = 0
    belt_speed: float = 0.3  # m/s along +x
    belt_x: tuple[float, float] = (-0.7, 0.6)  # belt start (spawn end) and end (m)
    belt_half_width: float = 0.15
    belt_top: float = 0.30  # z of the belt surface (m)
    spawn_interval_s: tuple[float, float] = (1.5, 2.5)  # uniform gap between spawns (s)
    spawn_y: float = 0.09  # spawn lateral position: U[-spawn_y, spawn_y]
    classes: tuple[ObjectClass, ...] = DEFAULT_CLASSES
    pool_per_class: int = 6  # preallocated bodies per class
    visible_k: int = 6  # object slots in the observation
    camera_x: tuple[float, float] = (-0.7, 0.6)  # objects on the belt within this x are seen
    bin_x: tuple[float, ...] = (-0.25, 0.05, 0.35)  # bin centres, one bin per class
    bin_y: float = 0.42
    bin_half: float = 0.10  # inner half-size of a bin opening (m)
    bin_wall_h: float = 0.15  # bins stand on the floor (z = 0)
    # Gantry: cup bottom position limits (m), motor force limits (N), moving masses (kg).
    gantry_low: tuple[float, float, float] = (-0.7, -0.25, 0.28)
    gantry_high: tuple[float, float, float] = (0.65, 0.6, 0.70)
    gantry_home: tuple[float, float, float] = (0.0, 0.0, 0.45)
    force_limit: tuple[float, float, float] = (300.0, 200.0, 150.0)
    carriage_mass: tuple[float, float, float] = (4.0, 2.0, 0.6)
    joint_damping: tuple[float, float, float] = (8.0, 5.0, 4.0)  # N s/m, viscous friction
    armature: tuple[float, float, float] = (0.5, 0.3, 0.2)  # reflected rotor inertia, kg
    cup_radius: float = 0.02
    touch_distance: float = 0.012  # the cup seals within this gap of a surface (m)
    settle_s: float = 0.4  # a binned object stays visible this long
    max_object_life_s: float = 60.0  # safety net: older objects count as missed

    def __post_init__(self):
        if len(self.bin_x) != len(self.classes):
            raise ValueError(
                f"need one bin per class: {len(self.classes)} classes, "
                f"{len(self.bin_x)} bin_x entries"
            )
        if self.spawn_interval_s[0] <= 0 or self.spawn_interval_s[1] < self.spawn_interval_s[0]:
            raise ValueError(f"spawn_interval_s must be 0 < lo <= hi, got {self.spawn_interval_s}")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def bin_center(self, b: int) -> tuple[float, float]:
        return (self.bin_x[b], self.bin_y)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


BELT_SPEED_MAX = 2.0  # m/s: faster, an object crosses the 1.3 m belt in under a policy second


def parse_instruction(text: str, num_classes: int = len(DEFAULT_CLASSES)) -> tuple[int, ...]:
    """ "2,0,1" -> (2, 0, 1): the bin for each object class, a permutation of 0..num_classes-1.
    Raises ValueError with a message that says what is wrong and what is expected."""
    want = ",".join(str(i) for i in range(num_classes))
    try:
        perm = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ValueError(
            f"instruction {text!r}: expected {num_classes} comma-separated bin "
            f"numbers, a permutation of {want} such as "
            f"{','.join(str(i) for i in reversed(range(num_classes)))}"
        ) from None
    if sorted(perm) != list(range(num_classes)):
        raise ValueError(
            f"instruction {text!r}: must be a permutation of {want} (one bin per "
            f"object class, each bin once)"
        )
    return perm


def parse_seed(text: str) -> int:
    """ "3" -> 3: a cell seed, a whole number >= 0 (it picks the spawns and, unless an
    instruction is given, the instruction)."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise ValueError(f"seed {text!r}: expected a whole number >= 0")
    return v


def parse_belt_speed(text: str) -> float:
    """ "0.3" -> 0.3 m/s; refuses what is not a number in (0, BELT_SPEED_MAX]."""
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"belt speed {text!r}: expected a number of m/s, e.g. 0.3") from None
    if not 0.0 < v <= BELT_SPEED_MAX:  # also refuses nan
        raise ValueError(
            f"belt speed {text!r}: must be in (0, {BELT_SPEED_MAX:g}] m/s "
            f"(the cell's default is {CellConfig.belt_speed:g})"
        )
    return v


@dataclass(frozen=True)
class EnvConfig:
    """The gymnasium env around a cell.

    steps_per_action: physics ms per env step (None -> one waypoint period of the action
    tokenizer, 50 ms). latency_ms: the previous chunk keeps playing this long after the
    observation before the new chunk applies (0 = ideal lockstep).
    episode_objects: spawning stops after this many objects; the episode ends when they
    are all resolved, or at max_episode_s.
    camera: a camera of the cell ("overhead") whose frame, rendered by the camera process's
    own code (camera.CellMirror) at frame_hw (height, width), each observation carries in
    obs["frames"]; None: vectors only.
    """

    cell: CellConfig = field(default_factory=CellConfig)
    steps_per_action: int | None = None
    latency_ms: int = 0
    episode_objects: int = 20
    max_episode_s: float = 120.0
    horizon: int = 4
    token_bins: int = 256
    camera: str | None = None
    frame_hw: tuple[int, int] = (128, 128)


def control_config(cell: CellConfig) -> ControlConfig:
    """The gantry as a robot: three effort-mode linear axes (x, y, z; their joint ranges,
    kept 5 mm inside) and the suction valve as a binary tool. PID tuned to ~60 rad/s
    closed-loop bandwidth per axis (kp = m w^2, kd = 1.8 m w), acceleration feed-forward with
    the moving masses (carriages + armature)."""
    from controllers.config import AxisConfig, ControlConfig, ToolConfig

    w = 60.0
    axes = []
    for i, (name, vmax) in enumerate(zip("xyz", (1.2, 1.2, 0.8))):
        m = sum(cell.carriage_mass[i:]) + cell.armature[i]
        axes.append(
            AxisConfig(
                name,
                "m",
                "effort",
                cell.gantry_low[i],
                cell.gantry_high[i],
                vel_limit=vmax,
                acc_limit=10.0,
                effort_limit=cell.force_limit[i],
                kp=m * w * w,
                ki=m * w * w * 5.0,
                kd=1.8 * m * w,
                mass=m,
                margin=0.005,
            )
        )
    return ControlConfig(tuple(axes), ToolConfig("suction", "binary"))


def tokenizer_config(cell: CellConfig, *, horizon: int = 4, bins: int = 256) -> TokenizerConfig:
    """Action tokens for this cell: x, y, z over the gantry workspace, suction over [0, 1];
    50 ms per waypoint (the policy period)."""
    from rtinfer.model.action_tokens import TokenizerConfig

    return TokenizerConfig(
        low=(*cell.gantry_low, 0.0), high=(*cell.gantry_high, 1.0), bins=bins, horizon=horizon
    )


ACTION_UNITS = ("m", "m", "m", "1")  # x, y, z of the gantry; suction on (1) / off (0)


def action_spec(cell: CellConfig, *, horizon: int = 4) -> ActionSpec:
    """What a continuous-chunk policy for this cell must declare (its action_spec.json):
    the tokenizer's axes, limits and timing, in ACTION_UNITS; waypoint 0 one period after
    capture."""
    from rtinfer.model.action_spec import ActionSpec

    return ActionSpec.from_tokenizer(tokenizer_config(cell, horizon=horizon), ACTION_UNITS)
