"""The exception types of the data package: bad input, with a message that names the fix."""

from linscale_jax.errors import Refusal, UserError


class DataError(UserError, ValueError):
    """Raised for unusable data configuration or input (missing files, empty or non-UTF-8 text, ...)."""


class DataRefusal(DataError, Refusal):
    """A resume refused because the run's data changed (other records, seed or batch size); raised
    before the run touches its workdir."""
