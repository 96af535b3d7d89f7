"""`rtinfer fleet`: the fleet control plane from the command line (docs/fleet.md, "Across
hosts").

    rtinfer fleet up FLEET.yaml [--address ADDR]    start the controller (or join the one running)
    rtinfer fleet status [--json] [--address ADDR]  hosts, robots, capacity, placement, events
    rtinfer fleet down [--address ADDR]             stop every host's node and the controller
    rtinfer fleet demo [--hosts 3] [--robots 8] [--json] [--netns]   a whole fleet on this
                                                    machine, one host lost

up, status and down join the Ray cluster at --address (default: the one `ray start` left
on this machine). Exit status: 0; 2 for a FLEET.yaml or a cluster that cannot serve (one
line per problem, with the fix); 1 for a demo whose robots did not all get fresh chunks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import ray
from ray.exceptions import RayError

from rtinfer.fleet.controller import CONTROLLER, NAMESPACE, start_controller
from rtinfer.fleet.failover import robot_figures, summary
from rtinfer.fleet.local import LocalFleet
from rtinfer.fleet.spec import FleetError, FleetSpec, load
from rtinfer.model.zoo import zoo_model
from rtinfer.realtime.complaints import say


def absolute(spec: FleetSpec) -> FleetSpec:
    """Paths as the hosts will read them: relative ones against this working directory."""
    d = spec.to_dict()
    d["models"] = {m: str(Path(p).resolve()) for m, p in d["models"].items()}
    d["keys"] = str(Path(d["keys"]).resolve()) if d["keys"] else None
    d["run_dir"] = str(Path(d["run_dir"]).resolve())
    return FleetSpec.from_dict(d)


def _join(address: str | None) -> None:
    try:
        ray.init(address=address or "auto", namespace=NAMESPACE, log_to_driver=False)
    except ConnectionError as e:
        raise FleetError(
            f"no Ray cluster to join at {address or 'this machine'} ({e}); start "
            f"one: ray start --head (docs/fleet.md, 'A fleet on Ray')"
        ) from None


def _controller():
    try:
        return ray.get_actor(CONTROLLER, namespace=NAMESPACE)
    except ValueError:
        raise FleetError(
            "no fleet controller in this cluster: start one with `rtinfer fleet up FLEET.yaml`"
        ) from None


def _ask(ref, what: str, timeout_s: float):
    """ray.get, a failure as one FleetError line (the controller restarting, say)."""
    try:
        return ray.get(ref, timeout=timeout_s)
    except RayError as e:  # GetTimeoutError too
        raise FleetError(
            f"the fleet controller did not answer {what} ({type(e).__name__}); "
            f"it may be restarting: try again in a few seconds"
        ) from None


def render(st: dict, file=None) -> None:
    """The status as rich tables: hosts, robots (with why a robot is refused), then the
    last events (their age: the controller's stamps are monotonic) on `file` (stdout)."""
    from rich.console import Console
    from rich.table import Table

    hosts = Table(title=f"fleet {st['name']}: hosts ({st['moves']} moves)")
    for col in ("host", "state", "model", "capacity", "robots", "cycles", "actions"):
        hosts.add_column(col)
    for name, h in st["hosts"].items():
        hosts.add_row(
            name,
            h["state"],
            h["model"],
            "-" if h["capacity"] is None else str(h["capacity"]),
            ", ".join(h["robots"]) or "-",
            str(h["cycles"] or "-"),
            h["actions"],
        )
    robots = Table(title="robots")
    for col in ("robot", "host", "state", "why"):
        robots.add_column(col)
    for name, r in st["robots"].items():
        robots.add_row(name, r["host"] or "-", r["state"], r["why"] or "")
    events = Table(title="events")
    for col in ("age s", "event"):
        events.add_column(col)
    for age_s, text in st["events"][-10:]:
        events.add_row(f"{age_s:.1f}", text)
    console = Console(file=file)
    console.print(hosts)
    console.print(robots)
    console.print(events)


def _up(a) -> int:
    spec = absolute(load(a.fleet))
    _join(a.address)
    start_controller(spec)
    print(
        f"fleet {spec.name}: controller up ({len(spec.hosts)} hosts, {len(spec.robots)} "
        f"robots); `rtinfer fleet status` shows the placement",
        flush=True,
    )
    return 0


def _status(a) -> int:
    _join(a.address)
    st = _ask(_controller().status.remote(), "status", 30)
    if a.json:
        print(json.dumps(st))
    else:
        render(st)
    return 0


def _down(a) -> int:
    _join(a.address)
    ctl = _controller()
    _ask(ctl.down.remote(), "down", 120)
    ray.kill(ctl, no_restart=True)
    print("fleet: down (every host's node stopped, the controller ended)")
    return 0


def _demo(a) -> int:
    """A local fleet, one host lost mid-run. Ray prints notices on stdout from its threads
    (a raylet ended, say): stdout is stderr while the fleet runs, and the demo's own output
    goes to the real stdout (with --json, one JSON object and nothing else)."""
    out = sys.stdout
    show = (lambda st: None) if a.json else (lambda st: render(st, out))
    with (
        contextlib.redirect_stdout(sys.stderr),
        LocalFleet(
            a.model,
            hosts=a.hosts,
            robots=a.robots,
            quiet=True,
            deadline_ms=a.deadline_ms,
            netns=a.netns,
        ) as fleet,
    ):
        st = fleet.wait(
            lambda s: (
                all(h["state"] != "starting" for h in s["hosts"].values())
                and all(r["state"] != "waiting" for r in s["robots"].values())
            )
        )
        show(st)
        fleet.start_robots(a.seconds)
        time.sleep(a.seconds / 3)
        victim = max(st["hosts"], key=lambda h: len(st["hosts"][h]["robots"]))
        print(
            f"demo: host {victim} dies (its node, then its Ray node)",
            file=sys.stderr if a.json else out,
            flush=True,
        )
        kill_ns = fleet.kill_host(victim)
        moved = st["hosts"][victim]["robots"]
        fleet.wait(
            lambda s: all(
                s["robots"][r]["state"] == "refused" or s["robots"][r]["host"] not in (None, victim)
                for r in moved
            ),
            timeout_s=60,
            every_s=0.1,
        )
        time.sleep(1.0)
        after = fleet.status()
        show(after)
        records = fleet.records()
    figures = {
        r: robot_figures(rec, kill_ns, a.deadline_ms, 1e3 / 20.0) for r, rec in records.items()
    }
    placed = [r for r, x in after["robots"].items() if x["state"] == "placed"]
    print(
        json.dumps(
            {
                "host_lost": victim,
                "moved": moved,
                "robots": figures,
                "refused": sorted(r for r, x in after["robots"].items() if x["state"] == "refused"),
                "moved_summary": summary([figures[r] for r in moved]),
            },
            indent=None if a.json else 1,
        ),
        file=out,
        flush=True,
    )
    return 0 if all(figures[r]["first_fresh_ms"] is not None for r in placed) else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="rtinfer fleet",
        description="fleets across inference hosts on Ray: up, status, down, demo (docs/fleet.md)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the fleet controller (or join the running one)")
    up.add_argument("fleet", help="FLEET.yaml")
    st = sub.add_parser("status", help="hosts, robots, capacity and placement")
    st.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    down = sub.add_parser("down", help="stop every host's node and the controller")
    for q in (up, st, down):
        q.add_argument("--address", default=None, help="the Ray cluster (default: auto)")
    demo = sub.add_parser(
        "demo",
        help="a whole fleet on this machine (Ray nodes from "
        "ray.cluster_utils), one host lost mid-run",
    )
    demo.add_argument("--hosts", type=int, default=3)
    demo.add_argument("--robots", type=int, default=8)
    demo.add_argument("--seconds", type=float, default=20.0)
    demo.add_argument("--deadline-ms", type=float, default=100.0)
    demo.add_argument("--model", default=str(zoo_model()))
    demo.add_argument(
        "--netns",
        action="store_true",
        help="each host and the robots in a network namespace of their own (root)",
    )
    demo.add_argument(
        "--json", action="store_true", help="only one JSON object on stdout (the figures), for jq"
    )
    up.set_defaults(func=_up)
    st.set_defaults(func=_status)
    down.set_defaults(func=_down)
    demo.set_defaults(func=_demo)
    a = p.parse_args(argv)
    try:
        return a.func(a)
    except FleetError as e:
        say("rtinfer fleet", str(e), error=False)
        return 2
    finally:
        if ray.is_initialized():
            ray.shutdown()
