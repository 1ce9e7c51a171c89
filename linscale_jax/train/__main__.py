"""`python -m linscale_jax.train --config=... --workdir=DIR` (the command: linscale_jax.train.cli); a
bare --config name is a packaged config (linscale_jax.run.config_file)."""

from linscale_jax.parallel import cpu_codegen, host_memory

cpu_codegen.use_xla_fusions()  # XLA:CPU's own fusions, not YNNPACK's (before a backend starts)
host_memory.use_huge_pages()  # before jax is imported: XLA:CPU's step buffers on huge pages

from linscale_jax.parallel import supervise  # noqa: E402

supervise.maybe_supervise("train")  # several processes: one console, one line for a lost peer

from linscale_jax.run import signals  # noqa: E402

signals.install()  # from here any number of SIGTERM / Ctrl-C is one stop (before the heavy imports)

import sys  # noqa: E402

from linscale_jax.run import config_file  # noqa: E402

sys.argv[:] = config_file.command_argv(sys.argv)  # --config=tiny[:ARG]: the packaged configs/tiny.py

from linscale_jax.train import cli  # noqa: E402

cli.run()
