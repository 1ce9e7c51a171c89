"""``python -m linscale_jax.fit``: see linscale_jax/fit/cli.py."""

import sys

from linscale_jax.fit.cli import main

sys.exit(main())
