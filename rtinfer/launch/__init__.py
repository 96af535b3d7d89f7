"""rtinfer.launch: YAML launch files and the supervisor that runs them.

yaml_lines (YAML with line numbers), spec (the launch file as data), file (schema,
validation, substitution), runs (run directories, socket paths, the records that keep
two live runs apart), process (one supervised node process), child (the first code a
node runs) and supervisor (the launcher). May import rtinfer.transport, rtinfer.realtime
and pyyaml.
"""
