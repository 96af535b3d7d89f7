"""The robot loop's own steps and faults, in process on real (inproc) sockets and the test's
clock: the driver's observation published by the controller (checked against the policy's
observation spec), a driver's bug named, a capture from the robot's future refused, the
policy's out-of-range waypoints said, and the bus's drops counted in health."""

import time

import numpy as np
import pytest
import zmq
from test_controller_node import LINE, MS, Cell, Plant

from controllers.hardware import DriverError, Observation
from controllers.node import State
from rtinfer.model.obs_spec import ObsSpec
from rtinfer.transport.bus import Subscriber

SPEC = ObsSpec(
    {
        "format": "rtinfer-obs-spec",
        "version": 1,
        "inputs": [{"key": "pos", "dtype": "float32", "shape": [3]}],
    }
)
CAMERA_SPEC = ObsSpec(
    {
        **SPEC.doc,
        "inputs": [
            *SPEC.doc["inputs"],
            {
                "key": "overhead",
                "kind": "image",
                "dtype": "uint8",
                "shape": [224, 224, 3],
                "camera": "overhead",
            },
        ],
    }
)


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.term()


class ObservingPlant(Plant):
    def __init__(self, observe):
        super().__init__()
        self._observe = observe

    def observe(self, state, now_ns):
        return self._observe(state, now_ns)


def observing_cell(ctx, observe, **kw) -> Cell:
    """A Cell whose plant observes: observe(state, now_ns) -> Observation | None."""
    return Cell(ctx, plant=ObservingPlant(observe), **kw)


def joined(c: Cell, sub: Subscriber) -> None:
    """Tick until one observation arrives (the slow joiner)."""
    for _ in range(200):
        c.run(1)
        if sub.recv(timeout_ms=5) is not None:
            return
    pytest.fail("no observation arrived")


def test_the_drivers_observation_goes_out_as_obs_with_its_capture_stamp(ctx):
    every, observed = 50, []

    def observe(state, now):
        if (now // MS) % every:
            return None
        observed.append(now)
        return Observation(now - 3 * MS, {"pos": state.pos.astype(np.float32)}, {"k": 7})

    c = observing_cell(ctx, observe)
    sub = Subscriber("inproc://ctl", ["obs"], ctx=ctx)
    try:
        joined(c, sub)
        sent = c.node.counters["obs_sent"]
        c.run(500)
        got = [e for e in iter(lambda: sub.recv(timeout_ms=50), None)]
        assert len(got) == c.node.counters["obs_sent"] - sent == 10
        env = got[-1]
        assert env.src == c.node.robot and env.body["ints"] == {"k": 7}
        assert env.body["values"]["pos"].dtype == np.float32
        assert env.stamps["capture"] == observed[-1] - 3 * MS  # the driver's own stamp
    finally:
        sub.close()
        c.close()


def test_an_observation_the_policys_spec_does_not_name_is_counted_said_and_not_sent(ctx, capfd):
    def observe(state, now):
        return Observation(now, {"pos": state.pos})  # float64: the spec wants float32

    c = observing_cell(ctx, observe, obs_spec=SPEC)
    try:
        c.run(100)
        assert c.node.counters["obs_bad"] == 100 and c.node.counters["obs_sent"] == 0
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "values['pos'] is float64 [3]" in err[0]
    finally:
        c.close()


def test_observations_laid_out_as_the_spec_names_are_sent_checked_in_full_once(ctx):
    calls = []

    class Spy(ObsSpec):
        def feeds(self, body):
            calls.append(1)
            return super().feeds(body)

    def observe(state, now):
        return Observation(now, {"pos": state.pos.astype(np.float32)})

    c = observing_cell(ctx, observe, obs_spec=Spy(SPEC.doc))
    try:
        c.run(50)
        assert c.node.counters["obs_sent"] == 50 and c.node.counters["obs_bad"] == 0
        assert len(calls) == 1  # the layout did not change
    finally:
        c.close()


def test_an_observation_the_wire_cannot_carry_is_counted_and_the_loop_goes_on(ctx, capfd):
    def observe(state, now):
        return Observation(now, {"pos": np.array([np.nan, 0.0, 0.0], np.float32)})

    c = observing_cell(ctx, observe)
    try:
        c.run(20)
        n = c.node.counters
        assert (n["obs_bad"], n["obs_sent"], n["ticks"]) == (20, 0, 20)
        assert "not a valid obs body" in capfd.readouterr().err
    finally:
        c.close()


def test_a_drivers_frames_go_out_with_the_obs_each_with_its_camera_and_capture_stamp(ctx):
    images = []

    def observe(state, now):
        if (now // MS) % 50:
            return None
        images.append(np.full((224, 224, 3), len(images) % 256, np.uint8))  # a new one a frame
        return Observation(
            now,
            {"pos": state.pos.astype(np.float32)},
            frames={"overhead": (images[-1], now - 7 * MS)},
        )

    c = observing_cell(ctx, observe, obs_spec=CAMERA_SPEC)
    sub = Subscriber("inproc://ctl", ["obs"], ctx=ctx)
    try:
        joined(c, sub)
        c.run(200)
        got = [e for e in iter(lambda: sub.recv(timeout_ms=50), None)]
        assert len(got) == 4 and c.node.counters["obs_bad"] == 0
        for env in got:
            frame = env.body["frames"]["overhead"]
            assert frame["capture_ns"] == env.stamps["capture"] - 7 * MS  # its own stamp
            assert np.array_equal(frame["image"], images[frame["image"][0, 0, 0]])
    finally:
        sub.close()
        c.close()


def test_a_frame_the_policys_spec_does_not_take_is_counted_said_and_not_sent(ctx, capfd):
    def observe(state, now):
        return Observation(
            now,
            {"pos": state.pos.astype(np.float32)},
            frames={"overhead": (np.zeros((224, 224, 4), np.uint8), now)},
        )

    c = observing_cell(ctx, observe, obs_spec=CAMERA_SPEC)
    try:
        c.run(10)
        assert c.node.counters["obs_bad"] == 10 and c.node.counters["obs_sent"] == 0
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "camera 'overhead' is uint8 [224, 224, 4]" in err[0]
    finally:
        c.close()


@pytest.mark.parametrize("method", ["read", "observe", "write"])
def test_a_drivers_bug_ends_the_loop_naming_its_method(ctx, method):
    c = observing_cell(ctx, lambda state, now: None)
    try:
        c.run(5)

        def broken(*args):
            raise RuntimeError("encoder gone")

        if method == "observe":
            c.plant._observe = broken
        else:
            setattr(c.plant, method, broken)
        with pytest.raises(DriverError, match=f"Plant.{method} raised RuntimeError: encoder gone"):
            c.run(1)
        assert c.node.counters["ticks"] == 5  # the counters up to the bug are kept
    finally:
        c.close()


def test_a_chunk_captured_in_the_robots_future_is_bad_and_the_next_honest_one_is_followed(ctx):
    c = Cell(ctx)
    try:
        c.send_chunk(LINE, age_ms=-5)  # captured 5 ms ahead of the robot's clock
        c.deliver(4)
        n = c.node.counters
        assert (n["rejected_bad"], n["chunks_accepted"]) == (4, 0) and c.node.state == "idle"
        c.run(2)
        c.send_chunk(LINE, age_ms=10)
        c.deliver(4)
        c.run(1)
        assert (n["chunks_accepted"], n["waypoints_accepted"], n["rejected_stale"]) == (1, 4, 0)
        assert c.node.state is State.RUN and 10 * MS <= c.node.reports.e2e_last_ns <= 100 * MS
    finally:
        c.close()


def test_policy_waypoints_past_the_axes_are_clipped_counted_and_said_once_a_second(ctx, capfd):
    c = Cell(ctx)
    t0 = time.monotonic()
    try:
        far = [[50.0, -50.0, 20.0]] * 4  # 100x past the gantry's axes
        for _ in range(5):
            c.send_chunk(far, age_ms=1, continuous=True)
            c.deliver(4)
            c.run(50)
        c.run(100)  # a health message after the last chunk
        health = [
            e.body for e in iter(lambda: c.watch.recv(timeout_ms=50), None) if e.topic == "health"
        ]
        counters = health[-1]["counters"]
        assert counters["waypoint_clamps"] >= 5 * 4 * 3  # every value of every waypoint
        assert counters["waypoint_clamps"] == c.node.stack.counters["waypoint_clamps"]
        err = capfd.readouterr().err.strip().splitlines()
        seconds = time.monotonic() - t0
        assert 1 <= len(err) <= 1 + seconds and len(err) < len(health)  # at most one a second
        assert all("the policy's chunks go past the axis limits" in e for e in err)
        assert (
            f"{counters['waypoint_clamps']} waypoint values clipped" in "".join(err)
            or len(err) == 1
        )  # the totals, as health has them when the line was said
    finally:
        c.close()


def test_malformed_chunks_dropped_by_the_bus_are_in_the_controllers_health(ctx):
    c = Cell(ctx)
    try:
        for k in range(15):  # on the policy's real socket: not a wire message
            c.policy._sock.send_multipart([b"action_chunk", b"not msgpack %d" % k])
        c.run(150)
        health = [
            e.body for e in iter(lambda: c.watch.recv(timeout_ms=50), None) if e.topic == "health"
        ]
        counters = health[-1]["counters"]
        assert counters["sub.rejected"] == 15 and counters["sub.oversize"] == 0
        assert counters["pub.dropped"] == 0 and counters["sub.sessions_ended"] == 0
        assert c.node.counters["rejected_bad"] == 0  # never reached the controller
    finally:
        c.close()
