"""Relieving an overloaded host (rtinfer.fleet.relief) on an injected clock, without Ray:
the steady capacity, the hysteresis, which robot moves where, and once a minute at most."""

from rtinfer.fleet.placement import Seat, place
from rtinfer.fleet.relief import Relief
from rtinfer.fleet.spec import Robot


def robots(n: int) -> dict:
    return {f"r{i}": Robot(f"r{i}", "m", f"ipc:///tmp/obs-r{i}") for i in range(n)}


def seats(*names: str) -> dict:
    return {h: Seat(h, "m", True) for h in names}


def feed(relief: Relief, t0: float, t1: float, caps: dict, every: float = 0.2) -> float:
    """Polls every `every` s from t0 to t1 (excluded): host -> its figure (or a function of
    the poll's index); the time after the last."""
    t, i = t0, 0
    while t < t1 - 1e-9:
        for h, c in caps.items():
            relief.note(h, t, c(i) if callable(c) else c)
        t, i = t + every, i + 1
    return t


def test_the_steady_capacity_is_a_median_that_ignores_a_busy_second():
    relief = Relief(window_s=3.0)
    # 2x swings from second to second, as the node's figure does on a loaded machine
    feed(relief, 0.0, 10.0, {"a": lambda i: 4 if (i // 5) % 4 else 2})
    assert relief.steady("a") == 4
    feed(relief, 10.0, 14.0, {"a": 2})  # a lasting change is followed within the window
    assert relief.steady("a") == 2
    relief.forget("a")
    assert relief.steady("a") is None


def drive(
    relief: Relief,
    t0: float,
    t1: float,
    caps: dict,
    rs: dict,
    s: dict,
    placed: dict,
    every: float = 0.2,
) -> tuple[float, dict]:
    """As the controller does: a poll of every host each `every` s from t0 until t1, then
    the moves asked for; (when, moves) at the first moves, else (t1, {}). caps: host -> its
    figure, or a function of the poll's index."""
    t, i = t0, 0
    while t < t1 - 1e-9:
        for h, c in caps.items():
            relief.note(h, t, c(i) if callable(c) else c)
        moves = relief.moves(t, rs, s, placed)
        if moves:
            return t, moves
        t, i = t + every, i + 1
    return t, {}


def test_a_host_overloaded_past_the_hysteresis_sheds_to_the_host_with_most_room():
    relief = Relief(window_s=3.0, over_share=0.75)
    rs, s = robots(4), seats("a", "b", "c")
    placed = {"r0": "a", "r1": "a", "r2": "a", "r3": "b"}
    assert drive(relief, 0.0, 5.0, {"a": 4, "b": 4, "c": 6}, rs, s, placed)[1] == {}
    t, moves = drive(relief, 5.0, 20.0, {"a": 1, "b": 4, "c": 6}, rs, s, placed)
    # three quarters of a 3 s window below its load: 2.25 s after the figure fell
    assert 5.0 + 2.2 - 1e-6 <= t <= 5.0 + 2.25 + 0.4
    assert moves == {"r2": "c", "r1": "c"}  # a keeps its steady 1; c had the most room
    placed.update(moves)
    assert drive(relief, t, t + 10.0, {"a": 1, "b": 4, "c": 6}, rs, s, placed)[1] == {}


def test_swings_of_the_figure_relieve_nothing_a_lasting_fall_does_within_a_window():
    relief = Relief(window_s=3.0, over_share=0.75)
    rs, s, placed = robots(3), seats("a", "b"), {"r0": "a", "r1": "a", "r2": "b"}
    # 2x swings around a's load of 2, a second each way, and a busy second in three
    swings = {"a": lambda i: 1 if (i // 5) % 2 else 3, "b": 4}
    assert drive(relief, 0.0, 60.0, swings, rs, s, placed)[1] == {}
    two_in_three = {"a": lambda i: 3 if (i // 5) % 3 == 0 else 1, "b": 4}
    assert drive(relief, 60.0, 120.0, two_in_three, rs, s, placed)[1] == {}
    t, moves = drive(relief, 120.0, 140.0, {"a": 1, "b": 4}, rs, s, placed)
    assert moves == {"r1": "b"} and t <= 120.0 + 3.0


def test_a_host_relieved_measures_a_whole_window_before_anything_more_moves():
    relief = Relief(window_s=1.0, over_share=0.75)
    rs, s = robots(4), seats("a", "b")
    placed = {"r0": "a", "r1": "a", "r2": "a", "r3": "b"}
    t, moves = drive(relief, 0.0, 5.0, {"a": 2, "b": 3}, rs, s, placed)
    assert moves == {"r2": "b"} and relief.steady("a") == 2  # status still shows it
    placed.update(moves)
    # a's figure falls again at once: its window starts again from the relief
    t2, moves = drive(relief, t + 0.2, t + 5.0, {"a": 1, "b": 3}, rs, s, placed)
    assert moves == {"r1": "b"} and t2 - t >= 1.0


def test_no_robot_moves_twice_in_a_minute_and_none_goes_to_a_node_that_refused_it():
    relief = Relief(window_s=1.0, move_every_s=60.0)
    rs, s, placed = robots(2), seats("a", "b"), {"r0": "a", "r1": "a"}
    t, moves = drive(relief, 0.0, 5.0, {"a": 1, "b": 1}, rs, s, placed)
    assert moves == {"r1": "b"}
    relief.moved("r1", t)
    placed.update(moves)
    # now b is the one over and a has room: r1 waits out its minute
    t2, moves = drive(relief, t + 0.2, t + 120.0, {"a": 4, "b": 0}, rs, s, placed)
    assert moves == {"r1": "a"} and t2 - t >= 60.0
    s = seats("a", "b")
    s["b"].refused["r1"] = 0.0  # b's node refused r1: it is never relieved onto b
    relief = Relief(window_s=1.0)
    assert drive(relief, 0.0, 5.0, {"a": 1, "b": 8}, rs, s, {"r0": "a", "r1": "a"})[1] == {
        "r0": "b"
    }
    s = seats("a", "b")  # no host with room: nothing moves, the node degrades
    assert (
        drive(
            Relief(1.0, 1.0),
            0.0,
            5.0,
            {"a": 1, "b": 1},
            robots(3),
            s,
            {"r0": "a", "r1": "a", "r2": "b"},
        )[1]
        == {}
    )


def test_balance_waits_for_a_robot_that_moved_in_the_last_minute_and_moves_no_other():
    current = {f"r{i}": "a" for i in range(4)}
    s = {"a": Seat("a", "m", True, 8), "b": Seat("b", "m", True, 8)}
    placed, _ = place(robots(4), s, current, balance=True, settled=frozenset({"r3"}))
    assert placed == current  # r3 would go first: nothing moves until its minute is over
    placed, _ = place(robots(4), s, current, balance=True, settled=frozenset({"r2"}))
    assert placed == {**current, "r3": "b"}  # r3 went; r2, next, waits
    placed, _ = place(robots(4), s, current, balance=True, settled=frozenset({"r0"}))
    assert placed == {**current, "r3": "b", "r2": "b"}


def test_the_failover_bench_counts_a_robots_moves_within_a_minute():
    from rtinfer.fleet.failover import most_moves_in_a_minute

    st = {
        "monotonic_s": 100.0,
        "events": [
            [90, "robot r1: new -> h0"],
            [50, "robot r1: h0 -> h1 (host lost)"],
            [20, "robot r1: h1 -> h0 (balance)"],
            [5, "robot r2: h0 -> h1 (relief)"],
            [1, "host h0 up (node pid 7)"],
        ],
    }
    assert most_moves_in_a_minute(st) == 2  # r1 at 50 and 80 s; its first placement is none
    assert most_moves_in_a_minute(st, losses=False) == 1  # its move off a lost host is forced
    st["events"][2][0] = -15.0  # 65 s after its move
    assert most_moves_in_a_minute(st) == 1
