"""The conveyor cell as a robot process: ConveyorSim (the MuJoCo cell as the hardware of
controllers.run) and SimNode (it, behind controllers.run.RobotProcess, for callers in Python).

One tick = read -> observe -> PID -> write -> one 1 ms physics step (advance). Every policy
period observe() returns what a perception stage would send, stamped `capture` with the
loop's clock; the controller publishes it as `obs`. The launch files run it through the
generic robot entry point (docs/robots.md):

    python -m controllers.run --hardware examples.conveyor_sorting.sim_node:ConveyorSim \
        --config examples.conveyor_sorting:robot.yaml --model models/zoo/conveyor-v1 \
        --obs ipc:///tmp/obs --actions ipc:///tmp/act --set seed=1 --set seconds=60
"""
from __future__ import annotations

from dataclasses import replace

from controllers.config import ControlConfig
from controllers.hardware import Observation
from controllers.run import RobotProcess
from rtinfer.realtime.deadline import DEADLINE_MS

from .cell import ConveyorCell
from .config import (CellConfig, action_spec, control_config, parse_belt_speed, parse_seed,
                     parse_instruction, tokenizer_config)
from .observe import obs_body, observe


class ConveyorSim:
    """The cell as a HardwareInterface with the simulator's hooks (controllers.hardware).

    The world stands still until the controller follows the policy's first chunk (at most
    wait_s), so a slow policy start costs no objects; it then runs `seconds` of sim time
    and ends the run. Observations are due at obs_hz, frozen or not."""

    def __init__(self, control: ControlConfig, *, seed=0, instruction="seed", belt_speed=None,
                 seconds: float = 60.0, wait_s: float = 30.0, obs_hz: float = 20.0):
        """seed: the cell seed; instruction: the bin of each object class ("2,0,1"), or
        "seed"/None: drawn from the seed; belt_speed: m/s (None: the cell's default)."""
        cell = CellConfig() if belt_speed is None else \
            replace(CellConfig(), belt_speed=parse_belt_speed(str(belt_speed)))
        self.control = control
        self.cell = ConveyorCell(cell)
        self.seed = parse_seed(str(seed))
        instruction = None if instruction in (None, "seed") else \
            parse_instruction(str(instruction).strip("()[] ").replace(" ", ""))
        self.cell.reset(self.seed, instruction)
        self.read, self.write = self.cell.read, self.cell.write
        self.seconds, self.wait_s = float(seconds), float(wait_s)
        self._obs_every = max(1, int(round(1000.0 / obs_hz)))  # ticks per observation
        self._tick = 0
        self._end_ns = self._wait_until_ns = None
        self.frozen = True
        self.health_node = "cell"  # its health's node name: the robot's when in a fleet

    def observe(self, state, now_ns: int) -> Observation | None:
        """What the camera and the joints show, every 1/obs_hz s; None between."""
        self._tick += 1
        if self._tick % self._obs_every:
            return None
        body = obs_body(observe(self.cell))
        return Observation(now_ns, body["values"], body["ints"])

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
        return {"node": self.health_node, "state": state, "counters": {
            k: getattr(m, k) for k in ("spawned", "picked", "correct", "wrong", "missed",
                                       "dropped")}, "gauges": {"sim_s": self.cell.t_ns / 1e9}}

    def publish_health(self, pub, state: str) -> None:
        pub.publish("health", self.health_body(state))

    def report(self) -> dict:
        return {"metrics": self.cell.metrics.as_dict(), "sim_s": self.cell.t_ns / 1e9,
                "task": {"seed": self.seed, "instruction": self.cell.instruction.tolist(),
                         "belt_speed": self.cell.cfg.belt_speed}}


class SimNode(RobotProcess):
    """The conveyor robot process: ConveyorSim behind a RobotProcess that follows both policy
    kinds made for the cell (its tokenizer and its action spec). Not thread-safe."""

    def __init__(self, obs_endpoint: str, actions_endpoint: str, *,
                 control_endpoint: str | None = None, cell: CellConfig | None = None,
                 policy_hz: float = 20.0, seed: int = 0, instruction=None,
                 trace_path: str | None = None, deadline_ms: float = DEADLINE_MS, curve=None):
        """curve: bus ``curve=`` for every socket (keys.curve_configs: per endpoint).
        instruction: the bin of each object class (None: drawn from the seed)."""
        cell = cell or CellConfig()
        control = control_config(cell)
        self.sim = ConveyorSim(control, seed=seed, instruction=None if instruction is None
                               else ",".join(str(int(i)) for i in instruction),
                               belt_speed=cell.belt_speed, obs_hz=policy_hz)
        self.cell = self.sim.cell
        super().__init__(self.sim, control, robot="sim", obs=obs_endpoint,
                         actions=actions_endpoint, control_endpoint=control_endpoint,
                         tokenizer=tokenizer_config(cell), action=action_spec(cell),
                         deadline_ms=deadline_ms, policy_hz=policy_hz, trace_path=trace_path,
                         curve=curve)

    @property
    def obs_sent(self) -> int:
        return self.node.counters["obs_sent"]

    def run(self, seconds: float, wait_s: float = 30.0) -> dict:
        """Frozen until the first action chunk (at most wait_s), then `seconds` of sim, or
        until stop() (e.g. from a signal handler)."""
        self.sim.seconds, self.sim.wait_s = seconds, wait_s
        return super().run(None)
