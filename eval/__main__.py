"""`python -m eval` in a clone = `python -m linscale_jax.eval` (its docstring gives the flags)."""
import runpy

runpy.run_module("linscale_jax.eval", run_name="__main__", alter_sys=True)
