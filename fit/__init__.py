"""`python -m fit` from a clone: scaling-law fitting lives in linscale_jax.fit (installed or not:
`python -m linscale_jax.fit`). This folder holds no code of its own, so a package of the same name
elsewhere on the path cannot hide the real one."""
