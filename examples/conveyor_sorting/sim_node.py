"""The conveyor cell as a robot process: ConveyorSim (the MuJoCo cell as the hardware of
controllers.run) and SimNode (it, behind controllers.run.RobotProcess, for callers in Python).

One tick = read -> observe -> PID -> write -> one 1 ms physics step (advance). Every policy
period observe() returns what a perception stage would send, stamped `capture` with the
loop's clock; the controller publishes it as `obs`. The launch files run it through the
generic robot entry point (docs/robots.md):

    python -m controllers.run --hardware examples.conveyor_sorting.sim_node:ConveyorSim \
        --config examples.conveyor_sorting:robot.yaml --model models/zoo/conveyor-v1 \
        --obs ipc:///tmp/obs --actions ipc:///tmp/act --set seed=1 --set seconds=60

Given its policy (`--set policy=MODEL_DIR`) whose obs_spec.json names inputs, the sim sends
only those: a camera policy never sees `objects`, the true positions. When those inputs
include the cell's camera, the frames come from the camera process (camera.py) through a
CellCamera (camera_driver.py): `--set camera_state=ENDPOINT --set camera_frames=ENDPOINT`
(launch/conveyor_vision.yaml wires both, and starts the camera first).
"""

from __future__ import annotations

from dataclasses import replace

from controllers.config import ControlConfig
from controllers.hardware import Observation
from controllers.run import RobotProcess, load_obs_spec
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.realtime.deadline import DEADLINE_MS, deadline_ns

from .camera import frame_shapes
from .camera_driver import CellCamera
from .cell import ConveyorCell
from .config import (
    CellConfig,
    action_spec,
    control_config,
    parse_belt_speed,
    parse_instruction,
    parse_seed,
    tokenizer_config,
)
from .observe import obs_body, observe

OBS_KEYS = ["objects", "gantry", "held", "instruction"]  # what observe() gives


class ConveyorSim:
    """The cell as a HardwareInterface with the simulator's hooks (controllers.hardware).

    The world stands still until the controller follows the policy's first chunk (at most
    wait_s), so a slow policy start costs no objects; it then runs `seconds` of sim time
    and ends the run. Observations are due at obs_hz, frozen or not; with a camera, one
    goes out only with a frame (module doc)."""

    def __init__(
        self,
        control: ControlConfig,
        *,
        seed=0,
        instruction="seed",
        belt_speed=None,
        seconds: float = 60.0,
        wait_s: float = 30.0,
        obs_hz: float = 20.0,
        policy: str | None = None,
        camera_state: str | None = None,
        camera_frames: str | None = None,
        camera_hz: float = 30.0,
        deadline_ms: float = DEADLINE_MS,
    ):
        """seed: the cell seed; instruction: the bin of each object class ("2,0,1"), or
        "seed"/None: drawn from the seed; belt_speed: m/s (None: the cell's default).
        policy: the policy's model directory (None: send every value the cell observes);
        camera_state, camera_frames: the camera process's endpoints, for a policy that takes
        frames; camera_hz: the camera's rate; deadline_ms: a frame older is not sent."""
        cell = (
            CellConfig()
            if belt_speed is None
            else replace(CellConfig(), belt_speed=parse_belt_speed(str(belt_speed)))
        )
        self.control = control
        self.cell = ConveyorCell(cell)
        self.seed = parse_seed(str(seed))
        instruction = (
            None
            if instruction in (None, "seed")
            else parse_instruction(str(instruction).strip("()[] ").replace(" ", ""))
        )
        self.cell.reset(self.seed, instruction)
        self.read, self.write = self.cell.read, self.cell.write
        self.seconds, self.wait_s = float(seconds), float(wait_s)
        self._obs_every = max(1, int(round(1000.0 / obs_hz)))  # ticks per observation
        self._tick = 0
        self._end_ns = self._wait_until_ns = None
        self.frozen = True
        self.health_node = "cell"  # its health's node name: the robot's when in a fleet
        self.keys, camera = policy_inputs(policy)
        self.camera = None
        if camera is not None:
            name, shape = camera
            if not (camera_state and camera_frames):
                raise ValueError(
                    f"the policy {policy} takes frames of camera {name!r}: give "
                    "--set camera_state=ENDPOINT --set camera_frames=ENDPOINT and "
                    "run the camera process on them (launch/conveyor_vision.yaml "
                    "does both)"
                )
            self.camera = CellCamera(
                name,
                shape,
                camera_state,
                camera_frames,
                hz=camera_hz,
                deadline_ns=deadline_ns(deadline_ms),
            )

    def observe(self, state, now_ns: int) -> Observation | None:
        """What the camera and the joints show, every 1/obs_hz s; None between, and when
        the camera has no frame to send (CellCamera.frame)."""
        if self.camera is not None:
            self.camera.tick(self.cell, now_ns)
        self._tick += 1
        if self._tick % self._obs_every:
            return None
        seen = observe(self.cell)
        if self.keys is None:
            body = obs_body(seen)
            return Observation(now_ns, body["values"], body["ints"])
        values = {k: seen[k] for k in self.keys}
        if self.camera is None:
            return Observation(now_ns, values)
        frame = self.camera.frame(now_ns)
        if frame is None:
            return None
        return Observation(now_ns, values, frames={self.camera.name: frame})

    def advance(self, now_ns: int, following: bool) -> bool:
        """One 1 ms physics step, once the policy answered (or wait_s passed); True when the
        `seconds` of sim time are over (the run ends after this tick)."""
        if self.frozen:
            if self._wait_until_ns is None:
                self._wait_until_ns = now_ns + int(self.wait_s * 1e9)
            if not following and now_ns < self._wait_until_ns:
                return False  # the world stands still until the policy answers
            self.frozen, self._end_ns = False, now_ns + int(self.seconds * 1e9)
        self.cell.step()
        return now_ns >= self._end_ns

    def health(self, robot: str, state: str) -> dict:
        """The cell's own `health` (its task counters), under node "cell", or the robot's
        name when it is one of a fleet (robot is not "sim")."""
        self.health_node = "cell" if robot == "sim" else robot
        return self.health_body(state)

    def health_body(self, state: str) -> dict:
        m = self.cell.metrics
        return {
            "node": self.health_node,
            "state": state,
            "counters": {
                k: getattr(m, k)
                for k in ("spawned", "picked", "correct", "wrong", "missed", "dropped")
            },
            "gauges": {"sim_s": self.cell.t_ns / 1e9},
        }

    def publish_health(self, pub, state: str) -> None:
        pub.publish("health", self.health_body(state))

    def report(self) -> dict:
        out = {
            "metrics": self.cell.metrics.as_dict(),
            "sim_s": self.cell.t_ns / 1e9,
            "task": {
                "seed": self.seed,
                "instruction": self.cell.instruction.tolist(),
                "belt_speed": self.cell.cfg.belt_speed,
            },
        }
        if self.camera is not None:
            out["camera"] = self.camera.report()
        return out

    def close(self) -> None:
        if self.camera is not None:
            self.camera.close()


def policy_inputs(policy: str | None) -> tuple[list[str] | None, tuple | None]:
    """(the vector keys to send, (camera, frame shape) or None) for the policy in model
    directory `policy`: None keys (send all) for no policy or an obs_tokens.json one;
    ValueError, with the fix, for inputs this cell cannot give."""
    spec = load_obs_spec(policy) if policy else None
    if not isinstance(spec, ObsSpec):
        return None, None
    keys = [k for k in spec.keys if k not in spec.images]
    unknown = sorted(set(keys) - set(OBS_KEYS))
    shapes = frame_shapes(spec)
    if unknown or len(shapes) > 1:
        raise ValueError(
            f"the policy {policy} takes inputs this cell does not observe "
            f"({unknown or sorted(shapes)}): the cell gives values {OBS_KEYS} and "
            "frames of one camera (overhead)"
        )
    return keys, next(iter(shapes.items()), None)


class SimNode(RobotProcess):
    """The conveyor robot process: ConveyorSim behind a RobotProcess that follows both policy
    kinds made for the cell (its tokenizer and its action spec). Not thread-safe."""

    def __init__(
        self,
        obs_endpoint: str,
        actions_endpoint: str,
        *,
        control_endpoint: str | None = None,
        cell: CellConfig | None = None,
        policy_hz: float = 20.0,
        seed: int = 0,
        instruction=None,
        trace_path: str | None = None,
        deadline_ms: float = DEADLINE_MS,
        curve=None,
    ):
        """curve: bus ``curve=`` for every socket (keys.curve_configs: per endpoint).
        instruction: the bin of each object class (None: drawn from the seed)."""
        cell = cell or CellConfig()
        control = control_config(cell)
        self.sim = ConveyorSim(
            control,
            seed=seed,
            instruction=None if instruction is None else ",".join(str(int(i)) for i in instruction),
            belt_speed=cell.belt_speed,
            obs_hz=policy_hz,
        )
        self.cell = self.sim.cell
        super().__init__(
            self.sim,
            control,
            robot="sim",
            obs=obs_endpoint,
            actions=actions_endpoint,
            control_endpoint=control_endpoint,
            tokenizer=tokenizer_config(cell),
            action=action_spec(cell),
            deadline_ms=deadline_ms,
            policy_hz=policy_hz,
            trace_path=trace_path,
            curve=curve,
        )

    @property
    def obs_sent(self) -> int:
        return self.node.counters["obs_sent"]

    def run(self, seconds: float, wait_s: float = 30.0) -> dict:
        """Frozen until the first action chunk (at most wait_s), then `seconds` of sim, or
        until stop() (e.g. from a signal handler)."""
        self.sim.seconds, self.sim.wait_s = seconds, wait_s
        return super().run(None)
