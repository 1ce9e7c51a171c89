"""The one exception type of the data package: bad input, with a message that names the fix."""

from linscale_jax.errors import UserError


class DataError(UserError, ValueError):
    """Raised for unusable data configuration or input (missing files, empty or non-UTF-8 text, ...)."""
