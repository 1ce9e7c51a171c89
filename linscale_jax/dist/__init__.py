"""Distribution over devices and hosts: the mesh and array shardings (sharding), multi-host start-up
and collective stop (distributed), and the entry points' huge-page malloc (host_memory)."""
