"""The deadline monitor over real zmq sockets: synthetic trace/heartbeat messages in,
budget/command decisions out; the CLI as a real process; the robot outlives the monitor.
In-process, the monitor's clock is a ManualClock: a decision in time (a node's silence, the
startup grace, a hold's clear) comes when the test steps it, whatever the machine's load."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq
from conftest import gantry_control

from rtinfer.monitor.node import Monitor, load_config
from rtinfer.monitor.policy import MonitorConfig
from rtinfer.transport.action_chunk import waypoint_body
from rtinfer.transport.bus import Publisher, Subscriber
from rtinfer.transport.wire import Envelope, now_ns

MS = 1_000_000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ManualClock:
    """The monitor's clock= in a test: it stands still until the test steps it (ns)."""

    def __init__(self, t_ns: int = 1_000_000 * MS) -> None:
        self.t_ns = t_ns

    def __call__(self) -> int:
        return self.t_ns

    def step(self, ns: int) -> None:
        self.t_ns += ns


class Rig:
    """A robot publisher feeding a Monitor on a ManualClock; a subscriber on the monitor's
    control output."""

    def __init__(self, **cfg):
        self.ctx = zmq.Context()
        cfg = MonitorConfig(**{"ping_period_s": 0, "republish_s": 0.05, **cfg})
        self.robot = Publisher("inproc://robot", "sim", ctx=self.ctx)
        self.infer = Publisher("inproc://infer", "infer", ctx=self.ctx)
        self.clock = ManualClock()
        self.mon = Monitor(
            ["inproc://robot", "inproc://infer"],
            "inproc://control",
            cfg,
            ctx=self.ctx,
            clock=self.clock,
        )
        self.ctl = Subscriber("inproc://control", ["budget", "command"], ctx=self.ctx)
        self.cycle = 0
        self.captures = {}  # cycle -> the capture stamp fed
        for _ in range(500):  # until the monitor hears us and we hear its periodic budget
            self.robot.publish(
                "health", {"node": "sync", "state": "ok", "counters": {}, "gauges": {}}
            )
            self.clock.step(int(cfg.republish_s * 1e9))  # a budget goes out again
            self.mon.spin_once(5)
            if "sync" in self.mon.live and self.ctl.recv(5) is not None:
                break
        else:
            raise AssertionError("monitor never connected")

    def feed(self, e2e_ms, ttft_ms=None):
        """One controller trace record per value; returns once the monitor has counted them."""
        e2e_ms = np.atleast_1d(e2e_ms)
        want = self.mon.policy.counters["cycles"] + len(e2e_ms)
        for i, e in enumerate(e2e_ms):
            t, e2e = now_ns(), int(e * MS)
            st = {"capture": t - e2e, "apply": t}
            if ttft_ms is not None:
                st.update(obs_recv=t - e2e + MS, first_token=t - e2e + MS + int(ttft_ms[i] * MS))
            self.cycle += 1
            self.captures[self.cycle] = st["capture"]
            self.robot.publish(
                "trace", {"node": "controller", "cycle": self.cycle, "stamps": st, "fields": {}}
            )
            if i % 200 == 199:
                self.spin_until(
                    lambda i=i: self.mon.policy.counters["cycles"] >= want - len(e2e_ms) + i + 1
                )
        self.spin_until(lambda: self.mon.policy.counters["cycles"] >= want)

    def late(self, cycle, index, age_ms=130.0):
        """The controller's record of a late waypoint: the cycle's own capture stamp (a fed
        cycle's, else one age_ms ago) and no apply."""
        capture = self.captures.setdefault(cycle, now_ns() - int(age_ms * MS))
        self.robot.publish(
            "trace",
            {
                "node": "controller",
                "cycle": cycle,
                "fields": {"late_index": index},
                "stamps": {"capture": capture, "recv": capture + int(age_ms * MS)},
            },
        )

    def spin_until(self, cond, timeout_s=10.0):
        end = time.monotonic() + timeout_s
        while not cond():
            assert time.monotonic() < end, "condition not reached"
            self.mon.spin_once(5)

    def decisions(self):
        """budget/command messages from the monitor, excluding periodic budget repeats."""
        out = []
        while (env := self.ctl.recv(20)) is not None:
            if env.body["reason"] != "periodic":
                out.append((env.topic, env.body))
        return out

    def kinds(self):
        return [e.kind for e in self.mon.policy.events]

    def close(self):
        for s in (self.mon, self.robot, self.infer, self.ctl):
            s.close()
        self.ctx.term()


@pytest.fixture
def rig_factory():
    rigs = []

    def make(**cfg):
        rigs.append(Rig(**cfg))
        return rigs[-1]

    yield make
    for r in rigs:
        r.close()


BUDGET = dict(
    window=20,
    eval_every=10,
    min_samples=10,
    shed_margin_ms=20,
    restore_margin_ms=50,
    raise_patience=2,
    hold_after_misses=1000,
)


def test_budget_is_lowered_when_p99_slack_shrinks(rig_factory):
    rig = rig_factory(**BUDGET)
    rig.feed([40.0] * 20)  # slack 60 ms: nothing to do at level 0
    assert rig.mon.policy.level == 0 and rig.decisions() == []
    rig.feed([70.0] * 9 + [92.0])  # p99 of the window 92 ms: slack 8 ms < 20 ms margin
    assert rig.mon.policy.level == 1
    ((topic, body),) = rig.decisions()
    assert topic == "budget" and body["level"] == 1 and "slack" in body["reason"]
    ev = rig.mon.policy.events[-1]
    assert ev.kind == "budget" and ev.values["from"] == 0 and ev.values["to"] == 1
    assert ev.values["slack_p99_ms"] == pytest.approx(8.0)
    assert rig.mon.policy.counters["misses"] == 0  # slack shrank, no deadline was missed


def test_budget_is_raised_back_only_after_patience_above_the_hysteresis_band(rig_factory):
    rig = rig_factory(**BUDGET)
    rig.feed([90.0] * 10)
    assert rig.mon.policy.level == 1
    rig.feed([60.0] * 50)  # slack 40 ms: above the lower margin, inside the band: hold level
    assert rig.mon.policy.level == 1
    # slack 70 ms > 50 ms once the 20-cycle window holds only these: one evaluation
    # above the band so far, not yet enough (patience 2)
    rig.feed([30.0] * 20)
    assert rig.mon.policy.level == 1
    rig.feed([30.0] * 10)
    assert rig.mon.policy.level == 0
    got = rig.decisions()
    assert [b["level"] for _, b in got] == [1, 0]
    assert "for 2 evaluations" in got[-1][1]["reason"]
    assert rig.kinds() == ["budget", "budget"]


def test_late_waypoints_count_as_misses_and_cycles_count_once(rig_factory):
    rig = rig_factory(**BUDGET)
    rig.feed([10.0] * 3)  # three applied, on time
    # cycle 3 applied on time but its waypoint 2 came late; cycle 4 was late from waypoint 0
    rig.late(3, 2.0)
    rig.late(4, 0.0)
    rig.spin_until(lambda: rig.mon.counters["late_cycles"] == 2)
    c = rig.mon.policy.counters
    assert c["cycles"] == 4 and c["misses"] == 2
    assert rig.mon.hist["e2e"].percentiles_us()["count"] == 3  # late ones never applied


def test_a_cycle_counts_once_and_misses_once_whatever_order_its_records_come_in(rig_factory):
    rig = rig_factory(**BUDGET)
    rig.feed([10.0, 130.0])  # cycle 2 applied, but past the deadline: one miss
    rig.late(2, 1.0, age_ms=140)  # a late tail of the cycle already missed: no second miss
    rig.late(3, 1.0)  # waypoint 0 of cycle 3 never came: waypoint 1 late starts the cycle
    rig.late(3, 0.0)  # and waypoint 0 arriving after it adds nothing
    t = now_ns()  # a restarted publisher reusing cycle id 1 (a new capture): its own cycle
    rig.robot.publish(
        "trace",
        {
            "node": "controller",
            "cycle": 1,
            "fields": {"late_index": 0.0},
            "stamps": {"capture": t - 130 * MS, "recv": t},
        },
    )
    rig.spin_until(lambda: rig.mon.counters["late_cycles"] == 4)
    c = rig.mon.policy.counters
    assert (c["cycles"], c["misses"]) == (4, 3)


def test_a_late_tail_adds_no_budget_evaluation(rig_factory):
    rig = rig_factory(**BUDGET)
    rig.feed([40.0] * 10)  # one evaluation at cycle 10: level 0 stays
    evals = rig.mon.policy.counters["evaluations"]
    rig.late(10, 2.0)
    rig.spin_until(lambda: rig.mon.counters["late_cycles"] == 1)
    assert (
        rig.mon.policy.counters["evaluations"] == evals and rig.mon.policy.counters["cycles"] == 10
    )


def test_safe_hold_after_n_consecutive_misses_and_clear_after_recovery(rig_factory):
    rig = rig_factory(hold_after_misses=3, clear_after_s=0.3)
    rig.feed([120, 130, 50, 110, 101])  # misses, but never 3 in a row
    assert not rig.mon.policy.holding and rig.decisions() == []
    assert rig.mon.policy.counters["misses"] == 4
    rig.feed([150])
    assert rig.mon.policy.holding
    ((topic, body),) = rig.decisions()
    assert topic == "command" and body["cmd"] == "safe_hold"
    assert "3 consecutive deadline misses" in body["reason"]
    rig.feed([40] * 5)
    rig.clock.step(299 * MS)  # healthy for 0.299 s since the last miss: not yet
    rig.mon.spin_once(0)
    assert rig.mon.policy.holding and rig.decisions() == []
    rig.clock.step(100 * MS)  # the next check (every 100 ms), past the 0.3 s
    rig.mon.spin_once(0)
    assert not rig.mon.policy.holding
    assert rig.mon.policy.events[-1].values["healthy_s"] == pytest.approx(0.399)
    ((topic, body),) = rig.decisions()
    assert topic == "command" and body["cmd"] == "clear" and "healthy" in body["reason"]
    s = rig.mon.summary()
    assert s["holds"] == 1 and s["clears"] == 1 and s["misses"] == 5 and not s["holding"]


def test_dead_required_node_orders_safe_hold_and_its_return_clears(rig_factory):
    rig = rig_factory(
        required=("infer",),
        node_periods={"infer": 0.05},
        dead_after_periods=3,
        clear_after_s=0.2,
        startup_grace_s=3600,
    )  # not about the grace

    def beat():  # one heartbeat of infer, 50 ms (its period) after the last
        heard = rig.mon.live["infer"].count if "infer" in rig.mon.live else 0
        rig.clock.step(50 * MS)
        rig.infer.publish("heartbeat", {"node": "infer", "sent_ns": now_ns()})
        rig.spin_until(lambda: "infer" in rig.mon.live and rig.mon.live["infer"].count > heard)

    for _ in range(10):
        beat()
    assert rig.mon.live["infer"].alive and not rig.mon.policy.holding
    rig.clock.step(200 * MS)  # silent for 200 ms: dead after 3 periods (150 ms)
    rig.mon.spin_once(0)
    assert rig.mon.policy.holding  # infer went silent
    assert rig.kinds()[-2:] == ["node_dead", "safe_hold"]
    ((topic, body),) = rig.decisions()
    assert body == {"cmd": "safe_hold", "reason": "required node dead: infer"}
    assert not rig.mon.summary()["nodes"]["infer"]["alive"]
    for _ in range(3):  # back (alive at the next check), not yet healthy for 0.2 s
        beat()
        assert rig.mon.policy.holding
    beat()  # 200 ms after the check that found it dead
    assert not rig.mon.policy.holding
    assert rig.kinds()[-2:] == ["node_alive", "clear"]
    assert [b["cmd"] for _, b in rig.decisions()] == ["clear"]
    node = rig.mon.summary()["nodes"]["infer"]
    # its 250 ms gap: five periods, four of them missed
    assert node["alive"] and node["deaths"] == 1 and node["missed_periods"] == 4


def test_required_node_never_heard_of_is_dead_after_the_startup_grace(rig_factory):
    ctx, clock = zmq.Context(), ManualClock()
    mon = Monitor(
        ["inproc://grace"],
        "inproc://grace-ctl",
        MonitorConfig(required=("infer",), startup_grace_s=0.2, ping_period_s=0),
        ctx=ctx,
        clock=clock,
    )
    try:
        for step_ms in (0, 199):  # checked at start and at 199 ms: within the grace
            clock.step(step_ms * MS)
            mon.spin_once(0)
            assert not mon.policy.holding
        clock.step(101 * MS)  # the next check (every 100 ms), past the grace
        mon.spin_once(0)
        assert mon.policy.holding and mon.policy.events[-1].kind == "safe_hold"
        assert "infer" in mon.policy.events[-1].reason
    finally:
        mon.close()
        ctx.term()


def test_every_event_carries_a_kind_a_reason_and_values(rig_factory):
    rig = rig_factory(**{**BUDGET, "hold_after_misses": 2})
    rig.feed([95.0] * 10 + [150.0, 150.0])
    events = rig.mon.summary()["events"]
    assert {e["kind"] for e in events} == {"budget", "safe_hold"}
    for e in events:
        assert e["reason"] and e["values"] and e["t_ns"] > 0
    json.dumps(events)  # report-ready


def test_summary_percentiles_match_numpy_within_hdr_precision(rig_factory):
    rig = rig_factory(hold_after_misses=10**6)
    rng = np.random.default_rng(7)
    e2e = np.round(rng.lognormal(np.log(40), 0.4, 1000), 3)
    ttft = np.round(rng.uniform(5, 25, 1000), 3)
    rig.feed(e2e, ttft)
    stages = rig.mon.summary()["stages_ms"]
    for name, vals in (("e2e", e2e), ("ttft", ttft)):
        got, v = stages[name], np.sort(vals)
        assert got["count"] == len(v)
        for key, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            k = int(np.ceil(q * len(v))) - 1  # numpy's order statistic, +- one rank
            assert (
                v[max(k - 1, 0)] * (1 - 2e-3) <= got[key] <= v[min(k + 1, len(v) - 1)] * (1 + 2e-3)
            )
        assert got["max"] == pytest.approx(v[-1], rel=2e-3)
    assert rig.mon.summary()["misses"] == int(np.sum(e2e > 100))


def test_config_loads_from_a_yaml_section_and_refuses_unknown_keys(tmp_path):
    path = tmp_path / "launch.yaml"
    path.write_text("monitor:\n  deadline_ms: 80\n  required: [infer, controller]\n")
    cfg = load_config(str(path), deadline_ms=None)
    assert cfg.deadline_ms == 80 and cfg.required == ("infer", "controller")
    assert load_config(str(path), deadline_ms=50).deadline_ms == 50
    with pytest.raises(ValueError, match="deadline"):
        MonitorConfig.from_dict({"deadline": 80})
    with pytest.raises(ValueError, match="hysteresis"):
        MonitorConfig.from_dict({"shed_margin_ms": 30, "restore_margin_ms": 20})
    with pytest.raises(ValueError, match="lower_margin_ms -> shed_margin_ms"):
        MonitorConfig.from_dict({"lower_margin_ms": 20})
    with pytest.raises(ValueError, match="max_events: the monitor keeps its newest 10000 events"):
        MonitorConfig.from_dict({"max_events": 500})
    # the margins follow the deadline, as the node's own budget does
    cfg = MonitorConfig.from_dict({"deadline_ms": 60})
    assert (cfg.shed_margin_ms, cfg.restore_margin_ms) == (12, 30)


def _start_monitor(tmp_path, *args):
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtinfer.monitor.node", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    line = proc.stdout.readline()
    assert "ready" in line, line + proc.stdout.read()
    return proc


def test_cli_writes_its_report_and_exits_0_on_sigterm(tmp_path):
    robot, ctl, report = f"ipc://{tmp_path}/robot", f"ipc://{tmp_path}/ctl", tmp_path / "r.json"
    proc = _start_monitor(
        tmp_path,
        "--listen",
        robot,
        "--control",
        ctl,
        "--deadline-ms",
        "50",
        "--report",
        str(report),
    )
    try:
        with Publisher(robot, "sim") as pub, Subscriber(ctl, ["heartbeat"]) as pings:
            assert pings.recv(10_000) is not None  # the monitor is up and pinging
            for i in range(200):
                t = now_ns()
                pub.publish(
                    "trace",
                    {
                        "node": "controller",
                        "cycle": i,
                        "fields": {},
                        "stamps": {"capture": t - 60 * MS, "apply": t},
                    },
                )
                time.sleep(0.002)
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
    rep = json.loads(report.read_text())
    assert rep["deadline_ms"] == 50 and rep["cycles"] > 0 and rep["misses"] == rep["cycles"]
    assert rep["holding"] and rep["nodes"]["controller"]["messages"] == rep["cycles"]
    assert rep["stages_ms"]["e2e"]["p50"] == pytest.approx(60, rel=0.01)


def test_robot_keeps_tracking_chunks_after_the_monitor_is_killed(tmp_path):
    from controllers.hardware import Command, RobotState
    from controllers.node import ControllerConfig, ControllerNode
    from rtinfer.model.action_tokens import ActionTokenizer, TokenizerConfig
    from rtinfer.transport.heartbeat import HeartbeatResponder

    class Plant:
        state = RobotState(0, np.array([0.0, 0.0, 0.2]), np.zeros(3))

        def read(self):
            return self.state

        def write(self, cmd: Command):
            pass

    eps = {k: f"ipc://{tmp_path}/{k}" for k in ("robot", "act", "ctl")}
    proc = _start_monitor(tmp_path, "--listen", eps["robot"], "--control", eps["ctl"])
    tok = TokenizerConfig(low=(-0.5, -0.5, 0.0, 0.0), high=(0.5, 0.5, 0.5, 1.0))
    enc = ActionTokenizer(tok)
    policy = Publisher(eps["act"], "policy")
    pub = Publisher(eps["robot"], "sim")
    sub = Subscriber([eps["act"], eps["ctl"]], ["action_chunk", "command"])
    pings = Subscriber(eps["ctl"], ["heartbeat"])
    hb = HeartbeatResponder(pub, "controller")
    node = ControllerNode(
        Plant(), ControllerConfig(gantry_control(), tokenizer=tok, deadline_ns=500 * MS), sub, pub
    )
    sent = 0

    def drive(seconds):
        nonlocal sent
        end, next_chunk = time.monotonic() + seconds, 0.0
        while time.monotonic() < end:
            if time.monotonic() >= next_chunk:  # a 20 Hz policy
                next_chunk, sent = time.monotonic() + 0.05, sent + 1
                toks = enc.encode(np.array([[0.01 * sent % 0.3, 0.0, 0.2, 0.0]] * 2))
                capture = now_ns() - 5 * MS
                for i in range(2):
                    policy.publish(
                        "action_chunk",
                        waypoint_body(
                            sent,
                            i,
                            2,
                            enc.decode(toks[i]),
                            spec=tok.hash,
                            period_ns=50 * MS,
                            start_ns=50 * MS,
                            dest=node.robot,
                            tokens=toks[i],
                        ),
                        stamps={"capture": capture},
                    )
            node.tick()
            if node.counters["ticks"] % 10 == 0:
                hb.poll(pings)
            time.sleep(0.001)

    try:
        for _ in range(200):  # the policy's endpoint is connected before counting
            drive(0.05)
            if node.counters["chunks_accepted"]:
                break
        drive(1.0)
        assert hb.counters["echoes"] > 0  # the monitor was alive and pinging
        proc.kill()
        proc.wait(10)
        before = (sent, node.counters["chunks_accepted"])
        drive(1.0)
        c = node.counters
        assert sent - before[0] > 5
        assert c["chunks_accepted"] - before[1] == sent - before[0]  # every one, none lost
        assert node.state == "run" and c["holds"] == 0 and c["commands"] == 0
        assert not any(c[k] for k in c if k.startswith("rejected_"))
    finally:
        proc.kill()
        for s in (policy, pub, sub, pings):
            s.close()


def test_inference_node_echoes_pings_and_follows_the_monitors_budget(tiny_model_dir, tmp_path):
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl", "robot")}
    robot = Publisher(eps["robot"], "sim")
    mon = Monitor(
        [eps["act"], eps["robot"]], eps["ctl"], MonitorConfig(ping_period_s=0.02, **BUDGET)
    )
    node = InferenceNode(
        tiny_model_dir,
        eps["obs"],
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(name="infer", health_hz=20.0),
    )
    try:
        end = time.monotonic() + 20
        while not (mon.clocks.get("infer") and mon.clocks["infer"].count >= 5):
            assert time.monotonic() < end, "no round trips with the inference node"
            node.spin_once(5)
            mon.spin_once(5)
        est = mon.clocks["infer"]
        assert abs(est.offset_ns) <= est.uncertainty_ns  # one host: one monotonic clock
        assert mon.live["infer"].alive and mon.state_of("infer") == "run"
        assert node.control.heartbeat.counters["echoes"] >= 5
        cycle = 0
        while mon.policy.level == 0:  # slack 5 ms: the monitor lowers the budget
            assert time.monotonic() < end, "budget never lowered"
            t, cycle = now_ns(), cycle + 1
            robot.publish(
                "trace",
                {
                    "node": "controller",
                    "cycle": cycle,
                    "fields": {},
                    "stamps": {"capture": t - 95 * MS, "apply": t},
                },
            )
            mon.spin_once(5)
        while node.budget.monitor_level != 1:
            assert time.monotonic() < end, "the node never heard the budget"
            node.spin_once(5)
            mon.spin_once(5)
    finally:
        for s in (node, mon, robot):
            s.close()


def test_node_liveliness_report_counts_missed_periods_deaths_and_alive():
    # Arrival stamps are passed in, on the monitor's clock (the test sets it too, for the
    # report's ages): the report's numbers follow from them exactly.
    ctx, clock = zmq.Context(), ManualClock()
    cfg = MonitorConfig(node_periods={"infer": 0.05}, dead_after_periods=3, ping_period_s=0)
    mon = Monitor(["inproc://liveliness"], "inproc://liveliness-ctl", cfg, ctx=ctx, clock=clock)
    t0 = clock()

    def arrive(ms, topic="heartbeat", **body):
        body = (
            {"node": "infer", "sent_ns": 0} if topic == "heartbeat" else {"node": "infer", **body}
        )
        clock.t_ns = t0 + ms * MS
        mon._on_message(Envelope(1, topic, 0, "infer", {"recv": clock()}, body))

    try:
        for ms in (0, 50, 100):
            arrive(ms)
        arrive(300)  # 200 ms of silence: four periods, three of them missed
        mon._check_liveliness(t0 + 449 * MS)
        assert mon.summary()["nodes"]["infer"]["alive"]
        mon._check_liveliness(t0 + 450 * MS)  # three periods silent: dead
        clock.t_ns = t0 + 900 * MS
        mon._check_liveliness(clock())  # still dead: one death
        dead = mon.summary()["nodes"]["infer"]
        assert dead.pop("silent_s") == pytest.approx(0.6)  # on the monitor's clock
        assert set(dead) == {"alive", "state", "messages", "missed_periods", "deaths"}
        assert (
            dead["alive"],
            dead["state"],
            dead["messages"],
            dead["missed_periods"],
            dead["deaths"],
        ) == (False, "", 4, 3, 1)
        assert mon.health()["counters"]["nodes_alive"] == 0
        arrive(950, "health", state="run", counters={}, gauges={})  # 650 ms: 12 missed
        mon._check_liveliness(t0 + 960 * MS)
        back = mon.summary()["nodes"]["infer"]
        assert (
            back["alive"],
            back["state"],
            back["messages"],
            back["missed_periods"],
            back["deaths"],
        ) == (True, "run", 5, 15, 1)
        assert [e.kind for e in mon.policy.events] == ["node_dead", "node_alive"]
        assert mon.health()["counters"]["nodes_alive"] == 1
    finally:
        mon.close()
        ctx.term()


@pytest.mark.parametrize("auto_budget", [True, False], ids=["budget", "no-budget"])
def test_budget_changes_are_those_the_node_applied_beside_the_requests(
    tiny_model_dir, tmp_path, auto_budget
):
    """The monitor's `requests` are its own; `changes` are what the policy node says it applied:
    a --no-budget node hears the request and applies none."""
    from rtinfer.inference.node import InferenceNode, InferenceNodeConfig

    eps = {n: f"ipc://{tmp_path}/{n}" for n in ("obs", "act", "ctl", "robot")}
    robot = Publisher(eps["robot"], "sim")
    mon = Monitor(
        [eps["act"], eps["robot"]],
        eps["ctl"],
        MonitorConfig(ping_period_s=0.02, policy_node="infer", **BUDGET),
    )
    node = InferenceNode(
        tiny_model_dir,
        eps["obs"],
        eps["act"],
        control_endpoint=eps["ctl"],
        cfg=InferenceNodeConfig(name="infer", health_hz=20.0, auto_budget=auto_budget),
    )
    try:
        end = time.monotonic() + 20
        while "infer" not in mon.applied:  # the node's health has come
            assert time.monotonic() < end, "no health from the inference node"
            node.spin_once(5)
            mon.spin_once(5)
        cycle = 0
        while mon.policy.level == 0:  # slack 5 ms: the monitor asks for a lower budget
            assert time.monotonic() < end, "budget never lowered"
            t, cycle = now_ns(), cycle + 1
            robot.publish(
                "trace",
                {
                    "node": "controller",
                    "cycle": cycle,
                    "fields": {},
                    "stamps": {"capture": t - 95 * MS, "apply": t},
                },
            )
            mon.spin_once(5)
        heard = node.control.ctl_sub.counters.get("received.budget", 0)
        while (
            node.control.ctl_sub.counters.get("received.budget", 0) == heard
            or mon.applied["infer"][0] != node.budget.switches
        ):
            assert time.monotonic() < end, "the node never heard the budget, or never said so"
            node.spin_once(5)
            mon.spin_once(5)
        b = mon.summary()["budget"]
        assert b["level"] == 1 and b["requests"] == 1
        assert b["changes"] == (1 if auto_budget else 0)
        assert b["applied_level"] == (1 if auto_budget else 0)
        c = mon.health()["counters"]
        assert (c["budget_requests"], c["budget_changes"]) == (b["requests"], b["changes"])
    finally:
        for s in (node, mon, robot):
            s.close()


def test_each_robot_has_its_own_cycles_misses_and_e2e_and_the_fleets_are_their_sums(rig_factory):
    """Trace records of two controllers (a fleet): each one's figures from its own records,
    by the fleet's rules (a late waypoint is a miss and a cycle, a late tail counts nothing
    new); the fleet's cycles and misses are the sums, in health and in the report."""
    rig = rig_factory(hold_after_misses=10**6)
    e2e_ms = {"controller-0": [10.0, 20.0, 30.0, 40.0], "controller-1": [50.0, 130.0, 150.0]}
    t = now_ns()
    for node, values in e2e_ms.items():
        for cycle, e in enumerate(values, 1):
            rig.robot.publish(
                "trace",
                {
                    "node": node,
                    "cycle": cycle,
                    "fields": {},
                    "stamps": {"capture": t - int(e * MS), "apply": t},
                },
            )
    late = {"capture": t - 140 * MS, "recv": t}
    rig.robot.publish(
        "trace", {"node": "controller-1", "cycle": 9, "stamps": late, "fields": {"late_index": 0.0}}
    )  # a late cycle of its own
    rig.robot.publish(
        "trace",
        {
            "node": "controller-1",
            "cycle": 3,
            "fields": {"late_index": 1.0},
            "stamps": {"capture": t - 150 * MS, "recv": t},
        },
    )  # a late tail
    rig.spin_until(lambda: rig.mon.counters["traces"] == 9)
    robots = rig.mon.summary()["robots"]
    assert {n: (r["cycles"], r["misses"]) for n, r in robots.items()} == {
        "controller-0": (4, 0),
        "controller-1": (4, 3),
    }
    for node, values in e2e_ms.items():
        got = robots[node]["e2e_ms"]
        assert got["count"] == len(values)  # applied chunks only
        assert got["max"] == pytest.approx(max(values), rel=1e-3)
        assert got["p50"] == pytest.approx(np.sort(values)[(len(values) + 1) // 2 - 1], rel=1e-3)
    c = rig.mon.policy.counters
    assert (c["cycles"], c["misses"]) == (8, 3)
    h = rig.mon.health()
    assert h["counters"]["cycles.controller-1"] == 4 and h["counters"]["misses.controller-1"] == 3
    assert h["gauges"]["e2e_max_ms.controller-0"] == robots["controller-0"]["e2e_ms"]["max"]
    assert h["gauges"]["e2e_p99_ms.controller-1"] == robots["controller-1"]["e2e_ms"]["p99"]
    assert sum(h["counters"][f"cycles.{n}"] for n in e2e_ms) == h["counters"]["cycles"]


def _late(node, cycle, capture, recv, index):
    return {
        "node": node,
        "cycle": cycle,
        "fields": {"late_index": float(index)},
        "stamps": {"capture": capture, "recv": recv},
    }


def test_the_monitor_and_rtinfer_report_count_the_same_misses_a_chunk_dropped_at_apply_too(
    tmp_path,
):
    """One definition of a miss (rtinfer.monitor.stages.DEFINITIONS): a cycle with a late
    record, whatever its age (the controller drops a chunk that came in time but whose first
    setpoint would go out past the deadline: late_applies, recv - capture < deadline), or an
    applied cycle above the deadline. The real monitor process and `rtinfer report` on the
    same records give the same cycles and misses (the monitor left the first kind out)."""
    from rtinfer.realtime.trace import TraceWriter

    robot, ctl, report = f"ipc://{tmp_path}/robot", f"ipc://{tmp_path}/ctl", tmp_path / "r.json"
    t = now_ns()
    records = [
        {
            "node": "controller",
            "cycle": 1,
            "fields": {},
            "stamps": {"capture": t, "apply": t + 10 * MS},
        },  # on time
        _late("controller", 2, t + 1, t + 1 + 20 * MS, 0),  # dropped at apply
        _late("controller", 3, t + 2, t + 2 + 150 * MS, 0),  # arrived late
        {
            "node": "controller",
            "cycle": 4,
            "fields": {},
            "stamps": {"capture": t + 3, "apply": t + 3 + 150 * MS},
        },  # applied past it
        _late("controller", 5, t + 4, t + 4 + 30 * MS, 1),  # two late waypoints
        _late("controller", 5, t + 4, t + 4 + 40 * MS, 2),  # of one cycle
    ]
    with TraceWriter(tmp_path / "controller.trace") as w:
        for r in records:
            w.write(r)
    proc = _start_monitor(
        tmp_path,
        "--listen",
        robot,
        "--control",
        ctl,
        "--deadline-ms",
        "100",
        "--report",
        str(report),
    )
    try:
        with Publisher(robot, "sim") as pub, Subscriber(ctl, ["health"]) as health:

            def heard(cond, what, timeout_s=30.0):
                end = time.monotonic() + timeout_s
                while time.monotonic() < end:
                    env = health.recv(50)
                    if env is not None and cond(env.body["counters"]):
                        return env.body["counters"]
                    if what == "warm-up":
                        t0 = now_ns()
                        pub.publish(
                            "trace",
                            {
                                "node": "warmup",
                                "cycle": 0,
                                "fields": {},
                                "stamps": {"capture": t0 - MS, "apply": t0},
                            },
                        )
                raise AssertionError(
                    f"waited {timeout_s:g} s for the monitor's health to show the {what}"
                )

            heard(lambda c: c.get("cycles.warmup"), "warm-up")  # it hears this publisher
            for r in records:
                pub.publish("trace", r)
            c = heard(
                lambda c: c.get("cycles.controller") == 5 and c["late_cycles"] == 4,
                "5 cycles and 4 late records of 'controller'",
            )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        proc.kill()
    assert c["misses.controller"] == 4, c  # cycles 2, 3, 4 and 5; the old count was 3
    rep = json.loads(report.read_text())
    assert rep["robots"]["controller"]["misses"] == 4 and rep["late_cycles"] == 4
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtinfer.cli",
            "report",
            str(tmp_path / "controller.trace"),
            "--deadline-ms",
            "100",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, COLUMNS="300"),
    )
    assert out.returncode == 0 and "cycles 5, misses 4" in out.stdout, out.stdout


def test_the_dashboards_title_gives_the_runs_age_on_its_clock(tmp_path):
    from rtinfer.monitor.dashboard import Dashboard

    clock = ManualClock()
    dash = Dashboard([f"ipc://{tmp_path}/health"], "cell", clock=clock)
    try:
        clock.step(12_400 * MS)
        assert dash.render().title == "cell  (12 s)"
    finally:
        dash.close()
