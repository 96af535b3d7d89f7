"""MJCF for the reach arm, generated from its robot config and an ArmGeometry.

The arm stands on a table (world z = 0 is the table top). Joint 0 turns the column about
z (yaw); every further joint pitches about its link's y axis. All joints are revolute,
driven by torque motors (`motor`, gear 1) whose ctrlrange is the axis's effort_limit, so
the controller's efforts are joint torques in N m. At zero angles the arm points straight
up; a positive pitch tips it towards +x. Joint names, ranges and torque limits come from the
robot config's axes (one axis per joint, same order), so the model and the controller
cannot disagree. The arm does not collide (the expert keeps it above the table); the target
is a mocap sphere without contacts. The end effector is the site `ee` at the hand's tip.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.config import ControlConfig


@dataclass(frozen=True)
class ArmGeometry:
    """Per joint (base first): the link it moves. lengths (m): column height to the first
    pitch joint, then each arm link to the next joint (the last: to the tip). masses (kg),
    radii (m): each link a capsule. armature (kg m^2): the rotor inertia seen at the joint
    (a geared motor's); damping (N m s/rad): viscous joint friction."""

    lengths: tuple[float, ...] = (0.12, 0.30, 0.25, 0.10)
    masses: tuple[float, ...] = (1.0, 1.2, 0.8, 0.3)
    radii: tuple[float, ...] = (0.045, 0.035, 0.03, 0.02)
    armature: tuple[float, ...] = (0.05, 0.05, 0.03, 0.01)
    damping: tuple[float, ...] = (0.2, 0.2, 0.1, 0.05)
    base_height: float = 0.04  # the yaw joint above the table top (m)

    @property
    def n(self) -> int:
        return len(self.lengths)

    @property
    def reach(self) -> float:
        """Distance from the first pitch joint to the tip, fully stretched (m)."""
        return sum(self.lengths[1:])


def _f(*v: float) -> str:
    return " ".join(f"{x:.6g}" for x in v)


def check_fits(control: ControlConfig, geom: ArmGeometry) -> None:
    """ValueError unless the config describes this arm: one effort-mode rad axis per joint."""
    wrong = []
    if control.n != geom.n:
        wrong.append(f"{control.n} axes for a {geom.n}-joint arm")
    wrong += [
        f"axis {a.name!r} must be unit rad, mode effort (got {a.unit}, {a.mode})"
        for a in control.axes
        if (a.unit, a.mode) != ("rad", "effort")
    ]
    if control.tool is not None:
        wrong.append(f"tool {control.tool.name!r}: this arm has no tool; remove `tool:`")
    if wrong:
        raise ValueError("robot config does not fit the reach arm: " + "; ".join(wrong))


def _link(i: int, control: ControlConfig, g: ArmGeometry, inner: str) -> str:
    a = control.axes[i]
    length, r = g.lengths[i], g.radii[i]
    axis = "0 0 1" if i == 0 else "0 1 0"
    # The body frame sits at its joint; the link runs along +z to the next joint.
    pos = _f(0, 0, g.base_height) if i == 0 else _f(0, 0, g.lengths[i - 1])
    rgba = ".35 .4 .5 1" if i % 2 == 0 else ".85 .55 .2 1"
    return (
        f'<body name="link{i}" pos="{pos}">'
        f'<joint name="{a.name}" type="hinge" axis="{axis}" range="{_f(a.low, a.high)}" '
        f'limited="true" armature="{g.armature[i]}" damping="{g.damping[i]}"/>'
        f'<geom type="capsule" fromto="0 0 0 0 0 {length:.6g}" size="{r}" '
        f'mass="{g.masses[i]}" rgba="{rgba}" contype="0" conaffinity="0"/>'
        f"{inner}</body>"
    )


def build_mjcf(control: ControlConfig, geom: ArmGeometry | None = None) -> str:
    """The scene as an MJCF string (timestep 1 ms: one physics step per control tick)."""
    g = geom or ArmGeometry()
    check_fits(control, g)
    chain = f'<site name="ee" pos="0 0 {g.lengths[-1]:.6g}" size="0.012" rgba="0 .8 0 1"/>'
    for i in reversed(range(g.n)):
        chain = _link(i, control, g, chain)
    motors = "".join(
        f'<motor name="tau_{a.name}" joint="{a.name}" gear="1" ctrllimited="true" '
        f'ctrlrange="{_f(-a.effort_limit, a.effort_limit)}"/>'
        for a in control.axes
    )
    return f"""<mujoco model="arm_reach">
<compiler angle="radian"/>
<option timestep="0.001" integrator="implicitfast"/>
<visual><global offwidth="640" offheight="480"/></visual>
<worldbody>
<light pos="0 0 2.5" dir="0 0 -1" directional="true"/>
<camera name="overview" pos="1.3 -1.1 0.9" xyaxes="0.65 0.76 0 -0.3 0.26 0.92"/>
<geom name="floor" type="plane" pos="0 0 -0.75" size="3 3 0.1" rgba=".8 .8 .8 1"/>
<geom name="table" type="box" pos="0.25 0 -0.02" size="0.5 0.6 0.02" rgba=".6 .5 .4 1"/>
<body name="target" mocap="true" pos="0.35 0 0.1">
<geom name="target" type="sphere" size="0.015" rgba="1 .1 .1 .8" contype="0" conaffinity="0"/>
</body>
{chain}
</worldbody>
<actuator>{motors}</actuator>
</mujoco>"""
