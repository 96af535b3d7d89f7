"""Driver hooks an earlier docs/robots.md named, and what replaced them.

A driver class written against an earlier contract still runs, but a hook the controller no
longer calls would be dead code that fails silently: controllers.run says, once at start-up,
for each such hook the class defines, what replaced it, when, and where the contract is
(docs/robots.md section 2, "Hooks renamed"). The same for a driver without observe() whose
policy takes observations (it has an observation spec): its robot would never be answered.
"""

from __future__ import annotations

CONTRACT = "docs/robots.md section 2"
# hook -> (its old signature, the date it was replaced, what replaced it)
RENAMED = {
    "on_tick": (
        "on_tick(node, state, now_ns)",
        "2026-12-02",
        "return what the policy sees from observe(state, now_ns) -> Observation (the "
        "controller publishes it), and step a simulator in advance(now_ns, following)",
    ),
    "on_stop": (
        "on_stop(node)",
        "2026-12-02",
        "a simulator's last words go in health(robot, state), which the process "
        'publishes twice a second and once at the end (state "stopped")',
    ),
}


def old_hook_lines(cls: type, takes_observations: bool) -> list[str]:
    """One line per renamed hook `cls` defines, and one if it has no observe() while the
    policy takes observations; [] for a driver of today's contract."""
    name = cls.__name__
    lines = [
        f"{name}.{old} is no longer called (replaced on {when}): {instead}; see {CONTRACT}"
        for hook, (old, when, instead) in RENAMED.items()
        if callable(getattr(cls, hook, None))
    ]
    if takes_observations and not callable(getattr(cls, "observe", None)):
        lines.append(
            f"{name} has no observe(), and the policy takes observations (its "
            "observation spec): without one this robot sends none and is never "
            f"answered; add observe(state, now_ns) -> Observation, see {CONTRACT}"
        )
    return lines
