"""What every benchmark's command line shares: the model it defaults to, `--json`, and how a
result is printed. Each benchmark module owns the rest of its options (`main(argv)`)."""

from __future__ import annotations

import argparse
import json

from rtinfer.model.zoo import zoo_model

DEFAULT_MODEL = str(zoo_model())  # the shipped policy, found from any working directory


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of `rtinfer bench NAME`, with --json; the caller adds its own options."""
    p = argparse.ArgumentParser(
        prog=f"rtinfer bench {name}", description=(doc or "").strip().split("\n")[0]
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def emit(name: str, result: dict, as_json: bool, table: bool = False) -> int:
    """Print the result: a rich table where the bench has one (`table`) and --json is not
    given, JSON otherwise. Returns the exit status (0)."""
    if table and not as_json:
        from rtinfer.bench.table import print_result

        print_result(name, result)
    else:
        print(json.dumps(result, indent=2))
    return 0
