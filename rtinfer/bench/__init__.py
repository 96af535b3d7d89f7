"""rtinfer.bench: rtinfer's own benchmarks, each a ratio against a baseline of the same run.

May import anything in rtinfer, and models (to build a model to measure). Comparisons
with other projects live apart, in the top-level peers package (the `bench` extra).
"""
