"""The fleet's decisions without Ray (rtinfer.fleet.placement, rtinfer.fleet.spec): where a
robot goes, when it stays, who is refused and why; FLEET.yaml problems, one line each."""

import pytest

from rtinfer.fleet.placement import Seat, place
from rtinfer.fleet.spec import FleetError, Robot, load


def robots(n: int, model: str = "m", host=None) -> dict:
    return {f"r{i}": Robot(f"r{i}", model, f"ipc:///tmp/obs-r{i}", host) for i in range(n)}


def seats(**caps) -> dict:
    """host -> its measured capacity (False: down)."""
    return {
        h: Seat(h, "m", cap is not False, None if cap is False else cap) for h, cap in caps.items()
    }


def declared(**caps) -> dict:
    """host -> its capacity, declared in FLEET.yaml and measured alike (False: down)."""
    out = seats(**caps)
    for s in out.values():
        s.declared = s.capacity
    return out


def test_robots_stay_where_they_are_while_their_host_has_room():
    placed, refused = place(robots(3), seats(a=4, b=4), {"r0": "a", "r1": "a", "r2": "a"})
    assert placed == {"r0": "a", "r1": "a", "r2": "a"} and refused == {}


def test_a_lost_hosts_robots_go_where_there_is_most_room_and_the_rest_are_refused():
    s = declared(a=False, b=2, c=3)  # a is down
    placed, refused = place(robots(5), s, {"r0": "a", "r1": "a", "r2": "a", "r3": "b", "r4": "c"})
    assert placed["r3"] == "b" and placed["r4"] == "c"  # the survivors' own stay
    assert sorted(placed.values()).count("b") <= 2 and sorted(placed.values()).count("c") <= 3
    assert len(placed) == 5 - len(refused) == 5  # 2 + 3 seats for 5 robots
    placed, refused = place(robots(6), s, placed)
    assert list(refused) == ["r5"]
    assert refused["r5"].startswith(
        "robot 'r5' refused: no host of model 'm' has room (a down, b full (2/2), c full (3/3))"
    )


def test_a_robot_goes_to_its_own_host_first_and_to_one_that_refused_it_last():
    rs = {"r0": Robot("r0", "m", "ipc:///tmp/obs-r0", "b")}
    assert place(rs, seats(a=8, b=1), {})[0] == {"r0": "b"}
    s = seats(a=8, b=1)
    s["b"].refused["r0"] = 0.0
    assert place(rs, s, {"r0": "b"})[0] == {"r0": "a"}
    s = seats(a=False, b=1)  # no other host has room: it waits on b, whose node retries it
    s["b"].refused["r0"] = 0.0
    assert place(rs, s, {"r0": "b"}) == ({"r0": "b"}, {})


def test_a_robot_its_node_refused_moves_to_a_host_whose_node_may_take_it():
    """Refused where it is, a robot is served by nobody there: it goes to a host that has
    not refused it even where that host's measured figure shows no room (its node decides,
    degrading first), but never past a declared capacity."""
    rs = {r: Robot(r, "m", f"ipc:///tmp/obs-{r}") for r in ("r1", "r2", "r9")}  # r9 last
    s = seats(a=1, b=1)  # both full by their measured figures
    s["b"].refused["r9"] = 0.0
    current = {"r9": "b", "r1": "a", "r2": "b"}
    placed, refused = place(rs, s, current)
    assert placed["r9"] == "a" and refused == {}
    s = declared(a=1, b=2)  # a's capacity declared: full, so r9 waits on b's node
    s["b"].refused["r9"] = 0.0
    placed, refused = place(rs, s, current)
    assert placed["r9"] == "b" and refused == {}


def test_a_robot_every_host_refused_stays_where_it_is_instead_of_bouncing():
    rs = {"r0": Robot("r0", "m", "ipc:///tmp/obs-r0")}
    s = seats(a=4, b=4)
    s["a"].refused["r0"] = s["b"].refused["r0"] = 0.0
    assert place(rs, s, {"r0": "b"})[0] == {"r0": "b"}
    assert place(rs, s, {"r0": "a"})[0] == {"r0": "a"}


def test_a_robot_of_a_model_no_host_serves_is_refused_with_the_fix():
    placed, refused = place(robots(1, model="other"), seats(a=4), {})
    assert placed == {} and "no host serves model 'other'" in refused["r0"]


FLEET = """\
version: 1
models: {conveyor: models/zoo/conveyor-v1}
hosts:
  gpu-1: {model: conveyor, actions: "tcp://10.10.0.1:5556"}
robots:
  cell-1: {model: convyor, obs: "tcp://10.10.0.11:5555"}
  cell-2: {model: conveyor, obs: "tcp://10.10.0.12:5555", hots: gpu-1}
"""


def test_a_fleet_file_says_each_problem_in_one_line_with_its_line_and_fix(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    with pytest.raises(FleetError) as e:
        load(path)
    lines = str(e.value).splitlines()
    assert lines == [
        f"{path}:6: robots.cell-1.model: unknown model 'convyor'; did you mean 'conveyor'? "
        "(declared under models: conveyor; add it there)",
        f"{path}:7: robots.cell-2.hots: unknown key 'hots'; did you mean 'host'?",
    ]
    path.write_text(FLEET.replace("convyor", "conveyor").replace("hots", "host"))
    spec = load(path)
    assert spec.robots["cell-2"].host == "gpu-1" and spec.hosts["gpu-1"].capacity is None


def test_a_dip_in_a_hosts_measured_capacity_moves_none_of_its_robots():
    # a: 3 robots, its node now measures room for 1 (a busy second); b has room
    placed, refused = place(robots(3), seats(a=1, b=4), {"r0": "a", "r1": "a", "r2": "a"})
    assert placed == {"r0": "a", "r1": "a", "r2": "a"} and refused == {}


def test_a_host_not_measured_yet_is_taken_to_fit_what_its_least_measured_peer_fits():
    s = declared(a=False, b=2, c=None)  # c: a node just started, serving nobody
    placed, refused = place(
        robots(6), s, {"r0": "a", "r1": "a", "r2": "a", "r3": "a", "r4": "b", "r5": "b"}
    )
    # c is given what b fits first; b is at its declared capacity, c has none declared:
    # the rest go to c too, where its node decides (it degrades, admits or refuses)
    assert refused == {} and sorted(placed.values()).count("c") == 4
    s = seats(a=False, b=2, c=None)  # measured only: the rest go where the least is over
    placed, refused = place(
        robots(6), s, {"r0": "a", "r1": "a", "r2": "a", "r3": "a", "r4": "b", "r5": "b"}
    )
    assert refused == {} and sorted(placed.values()).count("c") >= 2


def test_a_host_that_joins_takes_the_refused_robots_then_balances_the_rest():
    current = {f"r{i}": "a" for i in range(6)}
    s = seats(a=6, b=8)
    placed, _ = place(robots(6), s, current)  # no balance: nothing moves
    assert placed == current
    placed, refused = place(robots(6), s, current, balance=True)
    assert refused == {} and sorted(placed.values()) == ["a"] * 3 + ["b"] * 3
    assert all(placed[r] == "a" for r in ("r0", "r1", "r2"))  # the rest stay
    over = seats(a=2, b=3)  # a full, r2..r4 refused; b joins: takes them, then balances
    placed, refused = place(robots(5), over, {"r0": "a", "r1": "a"}, balance=True)
    assert refused == {} and sorted(placed.values()).count("b") == 3
    placed2, _ = place(robots(5), over, placed, balance=True)
    assert placed2 == placed  # balanced: a second look moves nothing


def test_where_no_host_has_room_now_one_with_room_at_its_recent_best_is_tried():
    s = seats(a=1, b=False)  # a's node measures room for 1 now, 3 at its best of late
    s["a"].recent = 3
    assert place(robots(2), s, {"r0": "a", "r1": "b"}) == ({"r0": "a", "r1": "a"}, {})
    s["a"].recent = 1  # no room even then: a's node decides (it degrades, admits or refuses)
    assert place(robots(2), s, {"r0": "a", "r1": "b"}) == ({"r0": "a", "r1": "a"}, {})
    s["a"].declared = 1  # its declared capacity is the operator's: refused, said with why
    placed, refused = place(robots(2), s, {"r0": "a", "r1": "b"})
    assert placed == {"r0": "a"} and list(refused) == ["r1"]


def test_a_lost_hosts_robots_are_never_refused_for_a_measured_figure_alone():
    # the survivors measure room for 1 each (a loaded second), 4 and 1 robots on them: the
    # lost host's robots go to the least loaded one, whose node degrades and decides
    s = seats(a=False, b=1, c=1)
    current = {"r0": "a", "r1": "a", "r2": "b", "r3": "b", "r4": "b", "r5": "b", "r6": "c"}
    placed, refused = place(robots(7), s, current)
    assert refused == {} and placed["r0"] == placed["r1"] == "c"
