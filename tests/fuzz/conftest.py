"""Fuzz tests run for a bounded time by default (about 20 s in all); RTINFER_LONG=1 runs
them longer (more hypothesis examples, minutes of atheris). See tests.faults.common.LONG."""
