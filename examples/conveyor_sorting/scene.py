"""MJCF for the cell, generated from a CellConfig (bins, belt and pool sizes are config).

Bodies: a static belt (frictionless contact: `cell.py` drives objects on it kinematically),
one open bin per class on the floor, a 3-axis gantry (slide joints x > y > z driven by
force motors, the z carriage gravity-compensated like a counterbalanced axis) with a
suction cup, and a pool of `pool_per_class` free bodies per class parked out of the way.
Each pool body has an inactive weld to the z carriage: that weld is the suction.

Cameras: `overview` (oblique, for videos) and `overhead` (straight down over the belt and
bins: the camera a policy sees through, examples/conveyor_sorting/camera.py).

Collision bits: static world 1, objects 1 (affinity 1|2), the cup 2 only (it touches
objects, never the belt or bins), gantry structure none.
"""

from __future__ import annotations

import math

from .config import CellConfig

PARK_X, PARK_Y, PARK_Z = 4.0, 4.0, 0.5
OVERHEAD_FOVY = 45  # degrees: the overhead camera's vertical field of view


def park_position(slot: int) -> tuple[float, float, float]:
    """Where unused pool body `slot` waits (far from everything, spaced apart)."""
    return (PARK_X + 0.2 * (slot % 10), PARK_Y + 0.2 * (slot // 10), PARK_Z)


def _f(*v: float) -> str:
    return " ".join(f"{x:.6g}" for x in v)


def _bin(cfg: CellConfig, b: int) -> str:
    x, y = cfg.bin_center(b)
    h, t, w = cfg.bin_wall_h, 0.01, cfg.bin_half
    rgba = "0.55 0.5 0.45 1"  # bins look alike: the class -> bin mapping changes per episode
    walls = [(0, 0, t / 2, w + t, w + t, t / 2)]  # floor plate
    walls += [(sx * (w + t / 2), 0, h / 2, t / 2, w + t, h / 2) for sx in (-1, 1)]
    walls += [(0, sy * (w + t / 2), h / 2, w + t, t / 2, h / 2) for sy in (-1, 1)]
    geoms = "".join(
        f'<geom type="box" pos="{_f(px, py, pz)}" size="{_f(sx, sy, sz)}" rgba="{rgba}"/>'
        for px, py, pz, sx, sy, sz in walls
    )
    return f'<body name="bin{b}" pos="{_f(x, y, 0)}">{geoms}</body>'


def _object(cfg: CellConfig, slot: int, cls: int) -> str:
    c = cfg.classes[cls]
    size = _f(*c.size)
    return (
        f'<body name="obj{slot}" pos="{_f(*park_position(slot))}" gravcomp="1">'
        f'<freejoint name="obj{slot}"/>'
        f'<geom name="obj{slot}" type="{c.shape}" size="{size}" rgba="{_f(*c.rgba)}" '
        f'mass="{c.mass_kg}" contype="0" conaffinity="0"/></body>'
    )


def _gantry(cfg: CellConfig) -> str:
    lo, hi = cfg.gantry_low, cfg.gantry_high
    mx, my, mz = cfg.carriage_mass
    top = hi[2] + 0.25  # height of the bridge structure (visual only)

    def joint(name: str, axis: str, i: int) -> str:
        return (
            f'<joint name="{name}" type="slide" axis="{axis}" range="{_f(lo[i], hi[i])}" '
            f'limited="true" damping="{cfg.joint_damping[i]}" armature="{cfg.armature[i]}"/>'
        )

    vis = 'contype="0" conaffinity="0" group="1"'
    ymid, yhalf = (lo[1] + hi[1]) / 2, (hi[1] - lo[1]) / 2 + 0.1
    return (
        f'<body name="gantry_x">{joint("x", "1 0 0", 0)}'
        f'<inertial pos="0 {ymid:.4g} {top}" mass="{mx}" diaginertia="0.1 0.1 0.1"/>'
        f'<geom type="box" pos="0 {ymid:.4g} {top}" size="0.03 {yhalf:.4g} 0.03" '
        f'rgba=".6 .6 .65 1" {vis}/>'
        f'<body name="gantry_y">{joint("y", "0 1 0", 1)}'
        f'<inertial pos="0 0 {top - 0.05}" mass="{my}" diaginertia="0.01 0.01 0.01"/>'
        f'<geom type="box" pos="0 0 {top - 0.05}" size="0.05 0.05 0.04" rgba=".3 .3 .35 1" {vis}/>'
        f'<body name="gantry_z" gravcomp="1">{joint("z", "0 0 1", 2)}'
        f'<inertial pos="0 0 0.2" mass="{mz}" diaginertia="0.01 0.01 0.001"/>'
        f'<geom type="cylinder" fromto="0 0 0.02 0 0 {top - hi[2] + 0.1:.4g}" size="0.01" '
        f'rgba=".7 .7 .7 1" {vis}/>'
        f'<geom name="cup" type="cylinder" pos="0 0 0.01" size="{cfg.cup_radius} 0.01" mass="0.01" '
        f'rgba=".1 .1 .1 1" contype="2" conaffinity="0" margin="{cfg.touch_distance}" '
        f'gap="{cfg.touch_distance}"/>'
        f'<site name="cup" pos="0 0 0"/>'
        f"</body></body></body>"
    )


def _overhead_camera(cfg: CellConfig) -> str:
    """A camera looking straight down (image up = +y), framing the belt and the bins."""
    x0, x1 = cfg.belt_x
    y0, y1 = -cfg.belt_half_width, cfg.bin_y + cfg.bin_half
    half = max(x1 - x0, y1 - y0) / 2 + 0.05  # m of the belt's plane seen either side of centre
    z = cfg.belt_top + half / math.tan(math.radians(OVERHEAD_FOVY / 2))
    return (
        f'<camera name="overhead" pos="{_f((x0 + x1) / 2, (y0 + y1) / 2, z)}" '
        f'xyaxes="1 0 0 0 1 0" fovy="{OVERHEAD_FOVY}"/>'
    )


def build_mjcf(cfg: CellConfig) -> str:
    """The scene as an MJCF string. Pool body `slot` has class slot // pool_per_class."""
    x0, x1 = cfg.belt_x
    n = cfg.num_classes * cfg.pool_per_class
    objects = "".join(_object(cfg, s, s // cfg.pool_per_class) for s in range(n))
    welds = "".join(
        f'<weld name="suction{s}" body1="gantry_z" body2="obj{s}" active="false" solref="0.004 1"/>'
        for s in range(n)
    )
    motors = "".join(
        f'<motor name="f{a}" joint="{a}" ctrllimited="true" '
        f'ctrlrange="{_f(-cfg.force_limit[i], cfg.force_limit[i])}"/>'
        for i, a in enumerate("xyz")
    )
    bins = "".join(_bin(cfg, b) for b in range(cfg.num_classes))
    return f"""<mujoco model="conveyor_sorting">
<compiler angle="radian"/>
<option timestep="0.001" integrator="implicitfast"/>
<visual><global offwidth="640" offheight="480"/></visual>
<worldbody>
<light pos="0 0 3" dir="0 0 -1" directional="true"/>
<camera name="overview" pos="0 -0.86 2.05" xyaxes="1 0 0 0 0.85 0.53"/>
{_overhead_camera(cfg)}
<geom name="floor" type="plane" size="3 3 0.1" rgba=".8 .8 .8 1"/>
<geom name="belt" type="box" pos="{_f((x0 + x1) / 2, 0, cfg.belt_top - 0.02)}"
 size="{_f((x1 - x0) / 2, cfg.belt_half_width, 0.02)}" rgba=".15 .15 .15 1" priority="1"
 condim="1"/>
{bins}
{_gantry(cfg)}
{objects}
</worldbody>
<equality>{welds}</equality>
<actuator>{motors}</actuator>
</mujoco>"""
