"""The MQAR attention diagnostic (study.recall.attention): the recorded weights are the model's own
(the logits with and without recording agree, every row a causal distribution), the circuit scores
read a previous-token head and a binding head off known weights."""

import numpy as np

from linscale_jax.data import mqar
from linscale_jax.models import ModelConfig
from linscale_jax.models.build import build_model
from linscale_jax.study.recall import attention


def test_recorded_weights_are_the_models_own():
    """< 5 s. A 2-layer llama: both layers recorded, the logits unchanged."""
    import jax.numpy as jnp

    cfg = ModelConfig(arch="llama", n_layers=2, d_model=16, n_heads=2, ffn_dim=48,
                      vocab_size=33, max_seq_len=16)
    model = build_model(cfg, seed=0)
    b = mqar.batch(np.random.default_rng(0), 3, 16, 2, 16, 16)
    x = jnp.asarray(b["inputs"])
    plain = np.asarray(model(x))
    with attention.recorded_attention() as weights:
        recorded = np.asarray(model(x))
    np.testing.assert_allclose(recorded, plain, rtol=1e-5, atol=1e-5)
    assert len(weights) == 2 and weights[1].shape == (3, 2, 16, 16)
    np.testing.assert_allclose(weights[1].sum(-1), 1, rtol=1e-5)
    assert np.all(np.triu(weights[1], 1) == 0)


def test_circuit_scores_read_known_heads():
    """< 1 s. Head 0 looks one token back everywhere; head 1 sends each query key to its pair's
    value; head 2 attends evenly to the prefix."""
    p, t = 2, 8
    inputs = np.array([[5, 9, 6, 10, 5, 0, 6, 0]])
    query = np.zeros((1, t), bool)
    query[0, [4, 6]] = True
    w = np.zeros((1, 3, t, t))
    for i in range(t):
        w[0, 0, i, max(i - 1, 0)] = 1
        w[0, 2, i, :i + 1] = 1 / (i + 1)
    w[0, 1] = w[0, 0]
    w[0, 1, 4], w[0, 1, 6] = np.eye(t)[1], np.eye(t)[3]  # key 5 -> value 9 at 1; key 6 -> value 10 at 3
    s = attention.circuit_scores(w, inputs, query, p)
    np.testing.assert_allclose(s["prev"], [1, 1, attention.even_prev(p)])
    np.testing.assert_allclose(s["val"], [0, 1, (1 / 5 + 1 / 7) / 2])
    np.testing.assert_allclose(s["key"], [0, 0, (1 / 5 + 1 / 7) / 2])
    assert abs(attention.even_prev(4) - (1 / 2 + 1 / 4 + 1 / 6 + 1 / 8) / 4) < 1e-12
