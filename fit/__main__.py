"""`python -m fit` in a clone = `python -m linscale_jax.fit` (its docstring gives the flags)."""
import runpy

runpy.run_module("linscale_jax.fit", run_name="__main__", alter_sys=True)
