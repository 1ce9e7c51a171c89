"""The WY / UT-transform pieces of the chunked delta rule shared by the `xla` form: the inverse of
a unit lower-triangular matrix with an exact custom VJP, and the pairwise log-decay range sums.

    unit_lower_inverse(l)     (I + l)^{-1}, l [..., c, c] strictly lower triangular
    range_sums(g)             R [..., c, c], R_ij = Σ_{j<r<=i} g_r for j <= i, else 0 (a 0/1
                              mask times the log decays: a direct sum, no difference)

Inverse: block-recursive doubling, exact and made of matmuls only. X_p, the inverse of the
block-diagonal part of I + l in blocks of p, merges pairs of blocks into blocks of 2p as
[[X11, 0], [−X22 l21 X11, X22]] (l21: l's block below the diagonal), p = 1, 2, 4, …; c is padded
to a power of two with an identity. Over all levels it costs about 2c³/3 FLOPs per matrix (the
batched small matmuls), against c³/3 for forward substitution, and it is the stable form of
triangular inversion (every level multiplies by already-inverted diagonal blocks).
Its VJP is the exact dl = −(Xᵀ dX Xᵀ) restricted to l's strictly lower entries.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def _diag_blocks(x, size):
    """[..., c, c] -> [..., c / size, size, size]: the blocks on the diagonal."""
    *lead, c, _ = x.shape
    nb = c // size
    x = x.reshape(*lead, nb, size, nb, size)
    return jnp.moveaxis(jnp.diagonal(x, axis1=-4, axis2=-2), -1, -3)


def _inverse(l):
    *lead, c, _ = l.shape
    c2 = 1 << max(0, (c - 1).bit_length())
    if c2 != c:  # identity padding: the inverse's leading [c, c] block is unchanged
        l = jnp.pad(l, [(0, 0)] * len(lead) + [(0, c2 - c), (0, c2 - c)])
    x = jnp.ones((*lead, c2, 1, 1), l.dtype)  # 1x1 blocks of I + l: 1
    p = 1
    while p < c2:
        nb = c2 // (2 * p)
        l21 = _diag_blocks(l, 2 * p)[..., p:, :p]  # [..., nb, p, p]
        pairs = x.reshape(*lead, nb, 2, p, p)
        x11, x22 = pairs[..., 0, :, :], pairs[..., 1, :, :]
        x21 = -jnp.einsum("...ij,...jk,...kl->...il", x22, l21, x11)
        top = jnp.concatenate([x11, jnp.zeros_like(x11)], axis=-1)
        low = jnp.concatenate([x21, x22], axis=-1)
        x = jnp.concatenate([top, low], axis=-2)  # [..., nb, 2p, 2p]
        p *= 2
    return x.reshape(*lead, c2, c2)[..., :c, :c]


@jax.custom_vjp
def unit_lower_inverse(l):
    """(I + l)^{-1} for l [..., c, c] strictly lower triangular (float32)."""
    return _inverse(l)


def _inverse_fwd(l):
    x = _inverse(l)
    return x, x


def _inverse_bwd(x, dx):
    c = x.shape[-1]
    xt = jnp.swapaxes(x, -1, -2)
    dl = -jnp.einsum("...ij,...jk,...kl->...il", xt, dx, xt)
    return (jnp.where(np.tril(np.ones((c, c), bool), -1), dl, 0.0),)


unit_lower_inverse.defvjp(_inverse_fwd, _inverse_bwd)


def range_sums(g):
    """g [..., c] -> R [..., c, c] with R_ij = Σ_{j<r<=i} g_r for j <= i, 0 for j > i: a direct sum
    over the range (the 0/1 mask [r <= i] times g_r [r > j], a matmul at HIGHEST precision; adding
    the masked zeros is exact), never a difference of prefix sums."""
    c = g.shape[-1]
    upto = np.tril(np.ones((c, c), np.float32))  # [i, r]: r <= i
    after = np.arange(c)[:, None] > np.arange(c)[None, :]  # [r, j]: r > j
    return jnp.einsum("ir,...rj->...ij", upto, jnp.where(after, g[..., :, None], 0.0),
                      precision=jax.lax.Precision.HIGHEST)
