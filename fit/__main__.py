"""``python -m fit``: see fit/cli.py."""

import sys

from fit.cli import main

sys.exit(main())
