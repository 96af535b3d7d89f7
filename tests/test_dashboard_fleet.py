"""The fleet dashboard (issue 19): a row per robot, from the health the real nodes publish.

In one process, on real ipc sockets: the real inference node (the tiny exported model,
--max-robots 2) serves robots cell-0 and cell-1 and refuses cell-2; each robot is a real
ControllerNode (controller-K, over the bench robot's still hardware) that sends its
observations and traces on its own obs endpoint, with the health of a real conveyor cell
(ConveyorSim, stepped on its own so that objects pass by unpicked); the real deadline
monitor listens to all of it. cell-1's observations are stamped 1.2 s old: past the
monitor's 1 s deadline, well within the controllers' 2.5 s, so every one of its cycles is a
miss and none of cell-0's is (wide margins: the test machine may be busy). The dashboard must show each robot's own figures: the
instruction its observations carry, its cell's objects, the monitor's figures for its
controller (equal to the controller's own e2e histogram: the same samples), its holds and
budget level, and cell-2 as refused.
"""

import json
import time

import numpy as np
import pytest
from conftest import gantry_control, random_obs_body
from rich.console import Console

from controllers.bench_robot import StillRobot
from controllers.node import ControllerConfig, ControllerNode
from controllers.run import load_policy_spec, load_robot
from rtinfer.monitor.dashboard import Dashboard
from rtinfer.monitor.node import Monitor
from rtinfer.monitor.policy import MonitorConfig
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import now_ns

MS = 1_000_000
INSTRUCTIONS = ([2, 0, 1], [1, 2, 0], [0, 1, 2])
AGE_MS = (0, 1200, 0)  # how old each robot's observations are when sent
CONTROLLER_DEADLINE_MS, MONITOR_DEADLINE_MS = 2500, 1000.0
CELL_STEPS = (8000, 14000, 3000)  # sim ticks each cell ran before the run: objects missed


class Robot:
    """controller-K serving robot cell-K: its obs publisher (bound), its controller, its cell."""

    def __init__(self, k, eps, tok, cell_control):
        from examples.conveyor_sorting.sim_node import ConveyorSim

        self.name, self.k = f"cell-{k}", k
        self.pub = Publisher(eps[f"obs-{k}"], self.name)
        self.sub = Subscriber([eps["act"], eps["ctl"]], ["action_chunk", "command"])
        cfg = ControllerConfig(
            gantry_control(low=(-1.0, -1.0, 0.0), high=(1.0, 1.0, 1.0)),
            tokenizer=tok,
            name=f"controller-{k}",
            deadline_ns=CONTROLLER_DEADLINE_MS * MS,
            chunk_interval_ns=50 * MS,
        )
        self.node = ControllerNode(StillRobot(3), cfg, self.sub, self.pub, robot=self.name)
        self.cell = ConveyorSim(cell_control, seed=k)
        for _ in range(CELL_STEPS[k]):
            self.cell.cell.step()
        self.cell.health_node = self.name  # as in a fleet: the cell's health under its robot
        self.next_obs_ns = 0

    def step(self, rng, send: bool) -> None:
        now = now_ns()
        if send and now >= self.next_obs_ns:
            self.next_obs_ns = now + 50 * MS
            body = random_obs_body(rng)
            body["values"]["instruction"] = np.array(INSTRUCTIONS[self.k], np.int32)
            self.pub.publish("obs", body, {"capture": now - AGE_MS[self.k] * MS})
        self.node.tick()

    def close(self):
        self.sub.close()
        self.pub.close()


@pytest.fixture
def fleet(tiny_model_dir, tmp_path):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs-0", "obs-1", "obs-2", "act", "ctl")}
    tok, _ = load_policy_spec(tiny_model_dir)
    _, cell_control, _ = load_robot("examples.conveyor_sorting:robot.yaml")
    robots = [Robot(k, eps, tok, cell_control) for k in range(3)]
    obs = [eps[f"obs-{k}"] for k in range(3)]
    mon = Monitor(
        obs + [eps["act"]],
        eps["ctl"],
        MonitorConfig(
            deadline_ms=MONITOR_DEADLINE_MS,
            policy_node="policy",
            ping_period_s=0,
            republish_s=0.5,
            hold_after_misses=10**6,
        ),
    )
    node = InferenceNode(
        tiny_model_dir,
        obs,
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(
            name="policy", health_hz=20.0, deadline_ms=3000.0, auto_budget=False, max_robots=2
        ),
    )
    node.robots.period_ns = 1_000_000_000  # admission over 1 s: the cap refuses, not the load
    dash = Dashboard(list(eps.values()), "fleet test")
    time.sleep(0.3)  # every subscriber connected before the first cycle is counted
    yield robots, node, mon, dash
    for s in (dash, node, mon, *robots):
        s.close()


def run(robots, node, mon, dash, seconds, send, until=lambda: False):
    """Tick every robot (the first `send` sending observations) and spin the node, the
    monitor (None: it has stopped) and the dashboard, for `seconds` or until `until()`."""
    rng = np.random.default_rng(1)
    end = time.monotonic() + seconds
    while time.monotonic() < end and not until():
        for r in robots[:send]:
            r.step(rng, True)
        for r in robots[send:]:
            r.step(rng, False)
        node.spin_once(2)
        for _ in robots:  # every robot waiting is answered (one cycle per call)
            if not node.spin_once(0):
                break
        if mon is not None:
            mon.spin_once(0)
        dash.poll(0)


@pytest.mark.slow  # 7-25 s on 2 cores: `make test-slow` runs it
def test_each_robot_has_a_row_with_its_own_figures_and_a_refused_robot_shows_refused(
    fleet, tmp_path
):
    robots, node, mon, dash = fleet
    # cell-0 and cell-1 join first (admitted), then cell-2 (beyond --max-robots 2: refused)
    run(
        *fleet,
        20,
        send=2,
        until=lambda: (
            len(node.robots.slots) == 2
            and all(r.node.counters["chunks_accepted"] for r in robots[:2])
        ),
    )
    run(*fleet, 4.0, send=3)
    assert set(node.robots.slots) == {"cell-0", "cell-1"} and node.robots.refused.keys() == {
        "cell-2"
    }
    run(*fleet, 1.0, send=3, until=lambda: dash.latest["policy"]["counters"]["robots_refused"])
    # each robot's budget level as the node reports it while serving them (robots that
    # fall silent leave the node, and their levels its health)
    assert [r["budget_level"] for r in dash.robot_rows()] == [0, 0, None]
    # the stream stops: the watchdogs hold, the cells report, the monitor ends
    run(*fleet, CONTROLLER_DEADLINE_MS / 1e3 + 0.3, send=0)
    for r in robots:
        r.cell.publish_health(r.pub, "run")
    mon.spin_once(50)
    mon.publish_final()
    run(robots, node, None, dash, 10, send=0, until=lambda: dash.final)
    assert dash.final

    rows = dash.robot_rows()
    assert [r["robot"] for r in rows] == ["cell-0", "cell-1", "cell-2"]
    assert [r["controller"] for r in rows] == ["controller-0", "controller-1", "controller-2"]
    assert [r["instruction"] for r in rows] == ["2,0,1", "1,2,0", "0,1,2"]
    assert [r["state"] for r in rows] == ["hold", "hold", "refused"]
    assert [r["holds"] for r in rows] == [r.node.counters["holds"] for r in robots]
    assert rows[0]["holds"] >= 1 and rows[1]["holds"] >= 1 and rows[2]["holds"] == 0
    m = [r.cell.cell.metrics for r in robots]
    assert [r["objects"] for r in rows] == [(x.correct, x.wrong, x.missed) for x in m]
    assert rows[0]["objects"] != rows[1]["objects"]  # each cell's own counts
    report = mon.summary()["robots"]
    assert set(report) == {"controller-0", "controller-1"}  # cell-2 never ran a cycle
    for row, robot in zip(rows[:2], robots):
        own = (
            robot.node.reports.e2e.percentiles_us()
        )  # the controller's own apply - capture samples
        fig = report[row["controller"]]
        assert row["cycles"] == fig["cycles"] == own["count"] >= 5
        # (a chunk superseded within one tick by the next is accepted but never applied)
        assert robot.node.counters["chunks_accepted"] >= own["count"]
        for got, q in zip(row["e2e_ms"], ("p50", "p99", "max")):
            assert got == fig["e2e_ms"][q] == pytest.approx(own[q] / 1e3)
    assert rows[0]["misses"] == 0 and rows[1]["misses"] == rows[1]["cycles"]
    assert rows[0]["e2e_ms"][2] < MONITOR_DEADLINE_MS < AGE_MS[1] < rows[1]["e2e_ms"][0]
    assert rows[2]["cycles"] is rows[2]["misses"] is None and rows[2]["e2e_ms"] == (None,) * 3
    fleet_c = dash.latest["monitor"]["counters"]
    assert fleet_c["cycles"] == rows[0]["cycles"] + rows[1]["cycles"]
    assert fleet_c["misses"] == rows[1]["misses"]

    console = Console(width=200, record=True)
    console.print(dash.render())
    text = console.export_text()
    lines = {
        r["robot"]: next(ln for ln in text.splitlines() if ln.split()[:1] == [r["robot"]])
        for r in rows
    }
    assert "refused" in lines["cell-2"] and "refused" not in lines["cell-0"]
    assert f" 0/{rows[0]['cycles']} " in lines["cell-0"]
    assert f" {rows[1]['misses']}/{rows[1]['cycles']} " in lines["cell-1"]
    assert "/".join(f"{v:.1f}" for v in rows[1]["e2e_ms"]) in lines["cell-1"]
    assert "/".join(map(str, rows[1]["objects"])) in lines["cell-1"]
    assert "2,0,1" in lines["cell-0"] and "1,2,0" in lines["cell-1"]
    assert "cell-0: sorted" not in text  # the rows replace the summary's per-cell lines

    # the demo's report: each cell's entry carries the monitor's figures of its controller
    from rtinfer.cli.demo_report import collect_report

    (tmp_path / "monitor_report.json").write_text(json.dumps(mon.summary()))
    for r in robots:  # what controllers.run writes: the controller's report and the cell's
        (tmp_path / f"sim_report-{r.k}.json").write_text(
            json.dumps({"controller": dict(r.node.counters), **r.cell.report()})
        )
    entries = collect_report(tmp_path, dash.latest, 0)["robots"]
    assert [(e["robot"], e["cycles"], e["deadline_misses"]) for e in entries] == [
        (r["robot"], r["cycles"], r["misses"]) for r in rows
    ]
