"""Benchmarks: each reports a ratio against a baseline measured in the same run."""
