"""rtinfer.realtime: the real-time kit for loops and their records.

rate (a drift-free RateKeeper), os_setup (CPU pinning, SCHED_FIFO, GC, mlockall), hist
(HdrHistogram latency histograms) and trace (per-cycle msgpack trace files). Robot-safe:
imports numpy, msgpack, hdrhistogram and the standard library only, and nothing else of rtinfer.
"""
