"""DecayKind: which decay a linear-attention call has, resolved once (in api.py) by name."""

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
