"""profile(): what a policy's cycle costs before any real cycle was timed.

Per batch size, `rounds` runs on one observation's inputs, timed (ns, on the node's clock)
after WARM_UP untimed ones (a session's first runs are slow), at a budget level, with no
previous chunk and publishing nothing: what admission plans with until real cycles are timed.
"""

from __future__ import annotations

from collections.abc import Callable

from rtinfer.inference.cycle import Cycle

WARM_UP = 3  # cycles not timed (allocations and caches of the first runs)


def profile(
    policy, clock: Callable[[], int], inputs, sizes: list[int], rounds: int, level
) -> dict[int, list[int]]:
    """{batch size: its `rounds` run times (ns)}."""
    times: dict[int, list[int]] = {}
    for b in sizes:
        times[b] = []
        for _ in range(WARM_UP + rounds):
            jobs = [(Cycle(0, {}, None, level, level.chunk), inputs) for _ in range(b)]
            t0 = clock()
            policy.run(jobs)
            times[b].append(clock() - t0)
        del times[b][:WARM_UP]
    return times
