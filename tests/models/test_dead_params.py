"""No dead parameters: on a random batch after init, every parameter leaf of every architecture
(ladder d32, the cpu preset's smallest size) gets a gradient norm within 4 orders of magnitude of
the largest leaf's. Checked with the norms' eps at 1e-12 (the default is 1e-6), so that no leaf is
alive only through an epsilon; the xmixers TPE (whose per-head norm cancels its q·k gain) is the
negative control the check must catch."""

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import nnx

from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, build_model, sizes

MIN_RATIO = 1e-4


def grad_norms(arch: str, **overrides) -> dict[str, float]:
    cfg = ModelConfig.from_config({**sizes.ladder_model(arch, "d32"), **overrides})
    graphdef, params, rest = nnx.split(build_model(cfg, nnx.Rngs(0)), nnx.Param, ...)
    toks = jax.random.randint(jax.random.key(1), (2, 65), 3, cfg.vocab_size)

    def loss(p):
        logits = nnx.merge(graphdef, p, rest)(toks[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, toks[:, 1:]).mean()

    grads = jax.jit(jax.grad(loss))(params)
    return {jax.tree_util.keystr(k): float(jnp.linalg.norm(v))
            for k, v in jax.tree_util.tree_flatten_with_path(grads)[0]}


def dead(norms: dict[str, float]) -> dict[str, float]:
    top = max(norms.values())
    return {k: v / top for k, v in norms.items() if not v >= MIN_RATIO * top}


@pytest.mark.parametrize("arch", ARCHS)
def test_every_parameter_gets_gradient(arch):
    norms = grad_norms(arch, norm_eps=1e-12)
    assert len(norms) >= 10
    assert not dead(norms), f"{arch}: leaves with gradient < {MIN_RATIO} x the largest: {dead(norms)}"


def test_check_catches_the_xmixers_tpe_gain():
    bad = dead(grad_norms("cosformer2", cosformer2=dict(tpe="xmixers"), norm_eps=1e-12))
    assert {k for k in bad if "tpe" in k} >= {"['tpe']['q'].value", "['tpe']['k'].value"}, bad
