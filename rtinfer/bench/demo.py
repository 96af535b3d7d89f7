"""`rtinfer demo` until the conveyor demo lands: the transport and jitter benchmarks, printed."""
from __future__ import annotations

from rich.console import Console

from rtinfer.bench import jitter, transport
from rtinfer.bench.table import print_result


def run(seconds: float = 20.0) -> int:
    console = Console()
    console.print(f"[bold]rtinfer demo[/bold]: transport and 1 kHz loop benchmarks (~{seconds:.0f} s)")
    # Transport is paced at 1 kHz over 2 endpoint kinds x 2 paths, so messages ~ seconds * 1000 / 4.
    result = transport.run(messages=max(400, int(seconds * 1000 * 0.6 / 4)))
    print_result("transport", result, console)
    print_result("jitter", jitter.run(seconds=max(1.0, seconds * 0.2)), console)
    return 0
