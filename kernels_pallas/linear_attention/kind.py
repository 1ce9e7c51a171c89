"""DecayKind: which decay a linear-attention call has, resolved once (in api.py) by name.

The kind's table (`per_token`, `expand`, `pick`) answers what callers would otherwise branch on,
so a fourth kind is one entry here plus its kernel terms (xla.py's `_chunked` and the Pallas
kernels), not a new branch at every caller.
"""

from __future__ import annotations

import enum


class DecayKind(str, enum.Enum):
    """none: log_decay None (cosFormer2); head: [h] (TNL); data: [b, t, h, k] (HGRN2)."""

    NONE = "none"
    HEAD = "head"
    DATA = "data"

    @classmethod
    def of(cls, log_decay) -> "DecayKind":
        if log_decay is None:
            return cls.NONE
        return cls.HEAD if log_decay.ndim == 1 else cls.DATA

    @property
    def per_token(self) -> bool:
        """The log decay has the tokens' [b, t] axes: it is sliced, chunked and sharded with them."""
        return self is DecayKind.DATA

    def pick(self, none, head, data):
        """The entry of (none, head, data) for this kind (e.g. the log decay's PartitionSpec)."""
        return {DecayKind.NONE: none, DecayKind.HEAD: head, DecayKind.DATA: data}[self]

    def expand(self, log_decay):
        """log_decay as an array broadcastable to [b, t, h, k]: None (no decay) | [1, 1, h, 1]
        (per head) | [b, t, h, k] (per token and key channel). Indexing only: any array type."""
        return log_decay[None, None, :, None] if self is DecayKind.HEAD else log_decay
