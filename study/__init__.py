"""`python -m study` from a clone: the study command lives in linscale_jax.study (installed or not:
`python -m linscale_jax.study`). This folder holds no code of its own, so a package of the same name
elsewhere on the path cannot hide the real one."""
