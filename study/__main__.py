"""`python -m study` in a clone = `python -m linscale_jax.study` (its docstring gives the flags)."""
import runpy

runpy.run_module("linscale_jax.study", run_name="__main__", alter_sys=True)
