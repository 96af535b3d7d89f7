"""A robot process's report at the end of a run: printed and written, and the lines it
prompts (the bus dropped messages; no chunk was ever followed, and why)."""

from __future__ import annotations

import json

from rtinfer.realtime.complaints import say
from rtinfer.realtime.report_file import write_report


def bus_drops(report: dict, who: str = "robot") -> None:
    """One line on stderr when the sockets dropped messages before the controller saw them."""
    drops = {k: v for k, v in report["bus"].items() if v}
    if drops:
        say(
            who,
            f"warning: the bus dropped messages: {drops} (sub.rejected: malformed or "
            "not of the wire's schema; sub.oversize: over the size limit; pub.dropped: "
            "not sent); see docs/robots.md section 6",
            error=False,
        )


def never_followed(report: dict, who: str = "robot") -> int:
    """1, with one error line saying why, when a run ended without a single chunk followed
    (the robot stood still throughout); else 0. The line names the counters that explain
    it: the controller's rejections, else its observations (none sent, and why), else the
    driver's own counters (its report's sections)."""
    counters = report["controller"]
    if counters["chunks_accepted"]:
        return 0
    why = {k: v for k, v in counters.items() if k.startswith("rejected_") and v}
    say(
        who,
        "no action chunk was accepted in the whole run; "
        + (
            f"rejected: {why} (the controller's error lines above say why)"
            if why
            else none_arrived(report)
        ),
    )
    return 1


def none_arrived(report: dict) -> str:
    """Why no chunk came, as far as this robot can tell (never_followed)."""
    c = report["controller"]
    if not c["obs_sent"]:
        if c["obs_bad"] or c["obs_dropped"]:
            return (
                f"none arrived, and the robot sent no observation: obs_bad: {c['obs_bad']} "
                "(not what the policy's spec names: the line above says why; fix the "
                f"driver's observe()), obs_dropped: {c['obs_dropped']} (the bus refused "
                "them)"
            )
        return (
            "none arrived, and the robot sent no observation: the driver's observe() "
            "returned none, or it has no observe() (docs/robots.md section 2)"
        )
    counted = driver_counters(report)
    return (
        f"none arrived for the {c['obs_sent']} observations sent: is the policy running "
        "and connected to this robot's endpoints, and are the observations' stamps on "
        "this host's clock (the policy drops one older than the deadline: obs_stale in "
        "its health)?" + (f" The driver counted: {counted}" if counted else "")
    )


def driver_counters(report: dict, most: int = 12) -> str:
    """The driver's non-zero counters (its report()'s sections, SECTION.KEY=N), for a line."""
    out = []
    for section, d in report.items():
        if section in ("controller", "stack", "bus", "e2e_ms") or not isinstance(d, dict):
            continue
        for k, v in d.items():
            for kk, vv in v.items() if isinstance(v, dict) else [("", v)]:
                if isinstance(vv, int) and not isinstance(vv, bool) and vv:
                    out.append(f"{section}.{k}{'.' + kk if kk else ''}={vv}")
    return ", ".join(out[:most]) + (", ..." if len(out) > most else "")


def emit_report(report: dict, path: str | None) -> None:
    """Print the report as JSON, and write it to `path` when given."""
    text = json.dumps(report, indent=1)
    why = write_report(path, text) if path else None  # whole or not at all (a full disk)
    if why:
        say(None, f"report {path} not written: {why}")
    print(text)
