"""Distribution over devices and hosts: the mesh and array shardings (sharding), multi-host start-up
and collective stop (distributed), peers that die or never come (peers) and the multi-process
supervisor (supervise), and the entry points' huge-page malloc (host_memory) and XLA:CPU fusions
(cpu_codegen)."""
