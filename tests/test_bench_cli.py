"""Each benchmark owns its command-line options: `rtinfer bench NAME --help` lists that
benchmark's options and no other's."""

import subprocess
import sys

import pytest

OWN = {
    "transport": ["--messages"],
    "jitter": ["--seconds", "--hz"],
    "decode": ["--model", "--cycles", "--backend", "--run-length", "--stream", "--pace-ms"],
    "ttft": ["--model", "--cycles", "--backend"],
    "backend": ["--model", "--steps", "--sizes"],
    "peers": ["--model", "--skip-bench-size", "--bench-model"],
    "camera": ["--frames", "--blocks", "--quick", "--paths"],
}
ALL = {flag for flags in OWN.values() for flag in flags}


def help_of(name: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "bench", name, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("name", sorted(OWN))
def test_a_benchmark_lists_its_own_options_only(name):
    text = help_of(name)
    assert all(flag in text for flag in OWN[name] + ["--json"])
    assert sorted(f for f in ALL - set(OWN[name]) if f" {f} " in text or f"{f}\n" in text) == []


def test_backend_sizes_name_each_size_once():
    text = help_of("backend")
    assert "{demo,bench}" in text and "demo,bench}" not in text.replace("{demo,bench}", "")


def test_an_unknown_benchmark_is_refused_with_the_list():
    r = subprocess.run(
        [sys.executable, "-m", "rtinfer.cli", "bench", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "transport" in r.stderr and "peers" in r.stderr
