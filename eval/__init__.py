"""`python -m eval` from a clone: evaluation lives in linscale_jax.eval (installed or not:
`python -m linscale_jax.eval`). This folder holds no code of its own, so a package of the same name
elsewhere on the path cannot hide the real one."""
