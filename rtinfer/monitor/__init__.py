"""rtinfer.monitor: the deadline monitor, its decisions and its reports.

node (the monitor process), policy (budget and safe-hold decisions, no clock, no
socket), stages (the one list of latency stages), report
(tables from trace files) and dashboard (the live rich table). May import
rtinfer.transport and rtinfer.realtime, and rich.
"""
