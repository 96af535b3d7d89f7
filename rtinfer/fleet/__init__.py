"""Fleets past one inference host: a control plane on Ray Core (the `fleet` extra), with
ZeroMQ kept as the data path (docs/fleet.md, "Across hosts").

spec (FLEET.yaml), placement (which host serves which robot: pure decisions), host (the Ray
actor owning one host's inference node), controller (the detached actor holding the table,
placing and moving robots), local (a whole fleet on one machine: ray.cluster_utils), cli
(`rtinfer fleet up | status | down | demo`), failover (the failover figures and bench).
Robots never import any of it: they follow the chunks addressed to them from the nodes'
action endpoints, and the nodes learn their robots from files (--robots-file).
"""
