"""Fixtures of the kernel tests."""

import pytest


@pytest.fixture
def xla_chunk_sizes(monkeypatch):
    """The chunk_size of every call of the xla form (`linear_attention(impl="xla")` reaches it
    through `xla.linear_attention_xla`) during the test, in call order."""
    from kernels_pallas.linear_attention import xla

    used, real = [], xla.linear_attention_xla

    def spy(*args, chunk_size, **kw):
        used.append(chunk_size)
        return real(*args, chunk_size=chunk_size, **kw)

    monkeypatch.setattr(xla, "linear_attention_xla", spy)
    return used
