"""The conveyor cell as a robot process: ConveyorSim (the MuJoCo cell as the hardware of
controllers.run) and SimNode (it, behind controllers.run.RobotProcess, for callers in Python).

One tick = read -> PID -> write -> one 1 ms physics step. Every policy period the tick also
publishes an `obs` message stamped `capture` (what a perception stage would send). The launch
files run it through the generic robot entry point (docs/robots.md):

    python -m controllers.run --hardware examples.conveyor_sorting.sim_node:ConveyorSim \
        --config examples.conveyor_sorting:robot.yaml --model models/zoo/conveyor-v1 \
        --obs ipc:///tmp/obs --actions ipc:///tmp/act --set seed=1 --set seconds=60
"""
from __future__ import annotations

from dataclasses import replace

from controllers.config import ControlConfig
from controllers.run import RobotProcess

from .cell import ConveyorCell
from .config import (CellConfig, action_spec, control_config, parse_belt_speed, parse_seed,
                     parse_instruction, tokenizer_config)
from .observe import obs_body, observe

HEALTH_EVERY = 500  # ticks between the cell's own health messages (2 Hz)


class ConveyorSim:
    """The cell as a HardwareInterface with the simulator's hooks (controllers.hardware).

    The world stands still until the policy's first chunk is accepted (at most wait_s), so
    a slow policy start costs no objects; it then runs `seconds` of sim time and stops the
    loop. Observations go out at obs_hz on the controller node's publisher."""

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
        self.obs_sent = 0
        self._end_ns = self._wait_until_ns = None
        self.frozen = True
        self.health_node = "cell"  # its health's node name: the robot's when in a fleet

    def on_tick(self, node, state, now_ns: int) -> None:
        pub = node.pub
        if self.frozen:
            if self._wait_until_ns is None:
                self._wait_until_ns = now_ns + int(self.wait_s * 1e9)
                self.health_node = "cell" if node.robot == "sim" else node.robot
            # Observations go out, but the world stands still until the policy answers.
            if node.counters["chunks_accepted"] == 0 and now_ns < self._wait_until_ns:
                self._tick += 1
                if self._tick % self._obs_every == 0:
                    pub.publish("obs", obs_body(observe(self.cell)), {"capture": now_ns})
                return
            self.frozen, self._end_ns = False, now_ns + int(self.seconds * 1e9)
        if now_ns >= self._end_ns:
            node.stop()  # the loop ends after this tick
        self.cell.step()
        self._tick += 1
        if self._tick % self._obs_every == 0:
            if pub.publish("obs", obs_body(observe(self.cell)), {"capture": now_ns}):
                self.obs_sent += 1
        if self._tick % HEALTH_EVERY == 0:
            self.publish_health(pub, "run")

    def publish_health(self, pub, state: str) -> None:
        m = self.cell.metrics
        pub.publish("health", {"node": self.health_node, "state": state, "counters": {
            k: getattr(m, k) for k in ("spawned", "picked", "correct", "wrong", "missed",
                                       "dropped")}, "gauges": {"sim_s": self.cell.t_ns / 1e9}})

    def on_stop(self, node) -> None:
        self.publish_health(node.pub, "stopped")  # the dashboard's last counts are the report's

    def report(self) -> dict:
        return {"metrics": self.cell.metrics.as_dict(), "obs_sent": self.obs_sent,
                "sim_s": self.cell.t_ns / 1e9,
                "task": {"seed": self.seed, "instruction": self.cell.instruction.tolist(),
                         "belt_speed": self.cell.cfg.belt_speed}}


class SimNode(RobotProcess):
    """The conveyor robot process: ConveyorSim behind a RobotProcess that follows both policy
    kinds made for the cell (its tokenizer and its action spec). Not thread-safe."""

    def __init__(self, obs_endpoint: str, actions_endpoint: str, *,
                 control_endpoint: str | None = None, cell: CellConfig | None = None,
                 policy_hz: float = 20.0, seed: int = 0, instruction=None,
                 trace_path: str | None = None, deadline_ms: float = 100.0, curve=None):
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
        return self.sim.obs_sent

    def run(self, seconds: float, wait_s: float = 30.0) -> dict:
        """Frozen until the first action chunk (at most wait_s), then `seconds` of sim, or
        until stop() (e.g. from a signal handler)."""
        self.sim.seconds, self.sim.wait_s = seconds, wait_s
        return super().run(None)
