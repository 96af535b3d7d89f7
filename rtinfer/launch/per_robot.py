"""`robots: N` in a launch file: its per-robot endpoints and nodes copied once per robot,
before the file is validated (rtinfer.launch.file.load), so that each copy is checked, and
reported at its block's lines, like any other."""

from __future__ import annotations

import re

from rtinfer.launch.yaml_lines import Report, is_type, section


def expand_robots(r: Report, data: dict) -> dict[str, int]:
    """`robots: N`: each `per_robot: true` endpoint becomes NAME-0 .. NAME-(N-1) and each
    `per_robot: true` node NAME-0 .. NAME-(N-1), in place. In robot k's node, ${robot} is k
    and ${endpoints.E} of a per-robot E is E-k; in any other node, an argument that is
    exactly ${endpoints.E} becomes N arguments, one address per robot. The line marks follow
    the copies, so problems in them point at the block they came from. Returns the robot of
    each per-robot node copy, {node name: k}."""
    robot_of: dict[str, int] = {}
    eps, nodes = section(data, "endpoints", dict), section(data, "nodes", list)
    per_eps = [e for e, b in eps.items() if isinstance(b, dict) and b.get("per_robot")]
    per_nodes = [
        b["name"]
        for b in nodes
        if isinstance(b, dict) and b.get("per_robot") and isinstance(b.get("name"), str)
    ]
    n = data.get("robots")
    if n is None:
        if per_eps or per_nodes:
            r.err(
                ("robots",),
                f"per_robot: is used ({', '.join(per_eps + per_nodes)}) but no "
                "top-level robots: N says how many robots",
            )
        return robot_of
    if not is_type(n, int) or n < 1:
        r.err(("robots",), f"robots must be a whole number >= 1, got {n!r}")
        return robot_of
    marks, orig = r.marks, dict(r.marks)
    for path in [p for p in marks if len(p) > 1 and p[0] == "nodes"]:
        del marks[path]  # re-marked below, from `orig`, at each node's new index

    def copy_marks(old: tuple, new: tuple) -> None:
        for path, line in orig.items():
            if path[: len(old)] == old:
                marks[new + path[len(old) :]] = line

    out_eps = {}
    for name, body in eps.items():
        if name not in per_eps:
            out_eps[name] = body
            continue
        if body.get("url") != "ipc":
            r.err(
                ("endpoints", name, "url"),
                "a per-robot endpoint is url: ipc (one socket per robot in the run directory)",
            )
        for k in range(n):
            out_eps[f"{name}-{k}"] = {x: v for x, v in body.items() if x != "per_robot"}
            copy_marks(("endpoints", name), ("endpoints", f"{name}-{k}"))
    data["endpoints"] = out_eps
    own = (
        re.compile(r"\$\{\s*endpoints\.(" + "|".join(map(re.escape, per_eps)) + r")\s*\}")
        if per_eps
        else None
    )
    out_nodes = []
    for i, body in enumerate(nodes):
        if not isinstance(body, dict):
            out_nodes.append(body)
            continue
        after = [
            x
            for a in body.get("after") or []
            for x in ([f"{a}-{k}" for k in range(n)] if a in per_nodes else [a])
        ]
        args = [str(a) if isinstance(a, (int, float)) else a for a in body.get("args") or []]
        if not body.get("per_robot"):
            spliced = []
            for j, a in enumerate(args):
                m = own.fullmatch(a.strip()) if own and isinstance(a, str) else None
                if m:
                    spliced += [f"${{endpoints.{m.group(1)}-{k}}}" for k in range(n)]
                elif own and isinstance(a, str) and own.search(a):
                    r.err(
                        ("nodes", i, "args", j),
                        "a per-robot endpoint stands alone as an "
                        "argument here (it becomes one argument per robot)",
                    )
                    spliced.append(a)
                else:
                    spliced.append(a)
            new = dict(body, args=spliced) if "args" in body else dict(body)
            if "after" in body:
                new["after"] = after
            copy_marks(("nodes", i), ("nodes", len(out_nodes)))
            out_nodes.append(new)
            continue
        for k in range(n):

            def mine(a: str, k=k) -> str:
                a = re.sub(r"\$\{\s*robot\s*\}", str(k), a)
                return own.sub(lambda ref: f"${{endpoints.{ref.group(1)}-{k}}}", a) if own else a

            new = {x: v for x, v in body.items() if x != "per_robot"}
            new["name"] = f"{body['name']}-{k}"
            robot_of[new["name"]] = k
            if "args" in body:
                new["args"] = [mine(a) if isinstance(a, str) else a for a in args]
            if "after" in body:
                new["after"] = after
            copy_marks(("nodes", i), ("nodes", len(out_nodes)))
            out_nodes.append(new)
    data["nodes"] = out_nodes
    return robot_of
