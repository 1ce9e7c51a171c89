"""The architecture registry: a fifth architecture defined in this one file -- a plain causal linear
attention (no gate, no decay, no positional encoding) -- registers, and describe, the trainer and
eval accept it with no other file changed. Also: the paper's four are the registry's keys in the
paper's order, and an unknown arch is a clear error everywhere it is named.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from train_helpers import tiny_config

from eval import runner
from fit import paper
from fit.table import FitError
from linscale_jax.models import accounting
from linscale_jax.models import describe
from linscale_jax.train import loop as trainer
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.config import ARCHS
from linscale_jax.models import ModelConfig, build_model, registry, sizes
from linscale_jax.models.layers import KeyGen, Linear, make_norm, merge_heads, split_heads
from linscale_jax.models.linear_common import linear_attention_flops, run_linear_attention, zero_state

# ---------------------------------------------------------------------------------------------------
# The fifth architecture: everything it needs is below (mixer + registry entry).


class PlainLinearAttention(nnx.Module):
    """Q = elu(X̄ W_q) + 1, K = elu(X̄ W_k) + 1, V = X̄ W_v; S_t = S_{t-1} + k_tᵀ v_t, o_t = q_t S_t
    (per head, no decay); output SimpleRMSNorm(concat_heads(o)) W_o. x [b,t,d] -> [b,t,d]."""

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        d, std = cfg.d_model, cfg.init_std
        self.wq = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wk = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wv = Linear(d, d, keys=keys, std=std, axes=("embed", "heads"))
        self.wo = Linear(d, d, keys=keys, std=std, axes=("heads", "embed"))
        self.out_norm = make_norm(cfg, cfg.out_norm_eps)
        self.cfg = cfg

    def __call__(self, x, *, positions, segment_ids, cache, extra):
        h = self.cfg.n_heads
        q = jax.nn.elu(split_heads(self.wq(x), h)) + 1
        k = jax.nn.elu(split_heads(self.wk(x), h)) + 1
        v = split_heads(self.wv(x), h)
        o, cache = run_linear_attention(self.cfg, q, k, v, None, segment_ids, cache)  # no decay
        return self.wo(self.out_norm(merge_heads(o))), cache

    def init_cache(self, batch_size: int, max_len: int):
        e = self.cfg.head_dim
        return zero_state(batch_size, self.cfg.n_heads, e, e)


PLAIN = registry.ArchSpec(
    name="plainlin",
    mixer=PlainLinearAttention,  # model=None: the plain Decoder builds this mixer in every block
    # Table 1: q, k, v, o and the GLU are the 12·l·d² (nothing else); x: HGRN2's k = e state term
    # 1/(3h) with the llama/TNL subleading 5/(18d).
    paper_params_extra=lambda l, d, h: 0,
    paper_flops_x=lambda d, h, n: 1 / (3 * h) + 5 / (18 * d),
    layer_flops=lambda cfg, n, chunk: linear_attention_flops(cfg.n_heads, cfg.head_dim,
                                                             cfg.head_dim, chunk),
)

# ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def plain():
    registry.register(PLAIN)
    yield PLAIN
    registry.unregister(PLAIN.name)


def test_paper_four_are_the_registry_keys_in_order():
    assert tuple(ARCHS) == ("llama", "tnl", "hgrn2", "cosformer2")
    assert ARCHS == ("llama", "tnl", "hgrn2", "cosformer2") and "plainlin" not in ARCHS
    for name in ARCHS:
        spec = registry.get(name)
        assert spec.name == name and build_model(ModelConfig(arch=name, d_model=16, n_heads=2,
                                                             ffn_dim=32, n_layers=1, vocab_size=8)
                                                 ).layers[0].mixer.__class__ is spec.mixer


def test_unknown_arch_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown architecture 'gpt'.*register"):
        registry.get("gpt")
    with pytest.raises(ValueError, match=r"model.arch='gpt' is not supported; choose one of"):
        ModelConfig(arch="gpt")
    with pytest.raises(ValueError, match="unknown architecture 'gpt'"):
        sizes.paper_model("gpt", "70m")
    with pytest.raises(ValueError, match="'<arch>-<size>'"):
        sizes.parse_name("gpt-d64")
    with pytest.raises(FitError, match=r"no fit for arch 'plainlin' \(Table 3 covers llama, tnl"):
        paper.law("plainlin", "L_C")  # fit/ holds the paper's published fits: data keyed by name
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.ArchSpec(name="tnl", mixer=PlainLinearAttention,
                                            paper_params_extra=PLAIN.paper_params_extra,
                                            paper_flops_x=PLAIN.paper_flops_x,
                                            layer_flops=PLAIN.layer_flops))


def test_fifth_arch_registers_and_describe_accepts_it(plain):
    assert ARCHS[-1] == "plainlin" and "plainlin" in ARCHS and len(ARCHS) == 5  # live keys
    model_cfg = ModelConfig.from_config(sizes.ladder_model("plainlin", "d64"))
    row = describe.describe_row(model_cfg, 512)
    l, d, h, e, g, v = 3, 64, 8, 8, model_cfg.ffn_dim, 264
    assert (row["arch"], row["n_layers"], row["d_model"], row["n_heads"]) == ("plainlin", l, d, h)
    # the real parameter tree is the registered mixer's: q, k, v, o and the GLU, parameter-free norms
    assert row["params_non_embedding"] == l * (4 * d * d + 3 * d * g)
    assert row["params_embedding"] == v * d
    assert row["paper_params"] == 12 * l * d * d
    assert row["paper_flops_per_token"] == pytest.approx(72 * l * d * d * (1 + 1 / (3 * h) + 5 / (18 * d)))
    c = min(model_cfg.resolved_chunk_size, 512)
    per_layer = 8 * d * d + 6 * d * g + h * (2 * c * 2 * e + 4 * e * e)
    assert row["flops_per_token_exact"] == pytest.approx(3 * (l * per_layer + 2 * d * v))
    assert "decay_per_layer" not in row  # TNL's extra only
    table = describe.format_table([row])
    assert "plainlin" in table.splitlines()[2]
    paper = describe.paper_rows(2048)
    assert [r["arch"] for r in paper].count("plainlin") == len(sizes.PAPER_SIZES)


def test_fifth_arch_mixer_is_plain_causal_linear_attention(plain):
    """The registered mixer inside the built model equals, by hand with its own weights,
    o_t = Σ_{s<=t} (φ(q_t)·φ(k_s)) v_s per head, φ = elu + 1, then SimpleRMSNorm and W_o."""
    cfg = ModelConfig(arch="plainlin", d_model=16, n_heads=2, ffn_dim=32, n_layers=1, vocab_size=8,
                      chunk_size=4, impl="xla")
    mixer = build_model(cfg, seed=1).layers[0].mixer
    assert isinstance(mixer, PlainLinearAttention)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 12, 16)), jnp.float32)
    pos = jnp.broadcast_to(jnp.arange(12), (2, 12))
    y, _ = mixer(x, positions=pos, segment_ids=None, cache=None, extra=None)

    w = {n: np.asarray(getattr(mixer, n).kernel[...], np.float64) for n in ("wq", "wk", "wv", "wo")}
    xs = np.asarray(x, np.float64)
    phi = lambda a: np.where(a > 0, a, np.expm1(a)) + 1  # noqa: E731
    q, k = (phi(xs @ w[n]).reshape(2, 12, 2, 8) for n in ("wq", "wk"))
    v = (xs @ w["wv"]).reshape(2, 12, 2, 8)
    scores = np.einsum("bthe,bshe->bhts", q, k) * np.tril(np.ones((12, 12)))
    o = np.einsum("bhts,bshf->bthf", scores, v).reshape(2, 12, 16)
    o = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + cfg.out_norm_eps)
    np.testing.assert_allclose(np.asarray(y), o @ w["wo"], rtol=2e-4, atol=2e-5)


def test_fifth_arch_trains_and_evaluates(plain, tmp_path):
    c = tiny_config("plainlin", steps=4)
    c.checkpoint.update(every_steps=4)
    s = trainer.train(c, tmp_path)
    losses = [s["losses"][k] for k in range(1, 5)]
    assert all(math.isfinite(x) for x in losses) and losses[-1] < losses[0], losses
    meta = ckpt.load_metadata(tmp_path, 4)
    assert meta["arch"] == "plainlin" and meta["config"]["model"]["arch"] == "plainlin"
    model_cfg = ModelConfig.from_config(c.model)
    assert meta["flops_exact"] == pytest.approx(
        accounting.flops_per_token_exact(model_cfg, c.train.seq_len) * 4 * 4 * 32)
    model, _, _ = ckpt.load_model(str(tmp_path), 4)
    assert isinstance(model.layers[0].mixer, PlainLinearAttention)
    rows = runner.evaluate(str(tmp_path), tasks="val_loss", ctx_kwargs=dict(val_batches=1),
                           log=lambda *_: None)
    assert [r["step"] for r in rows] == [4]
    assert rows[0]["arch"] == "plainlin" and math.isfinite(rows[0]["val_loss"])
    assert rows[0]["n_params"] == meta["n_params"]


def test_fifth_arch_decodes_from_its_recurrent_state(plain):
    """Prefill + one-token steps through the registered mixer's cache equal the parallel forward."""
    cfg = ModelConfig(arch="plainlin", d_model=16, n_heads=2, ffn_dim=32, n_layers=2, vocab_size=11,
                      chunk_size=4, max_seq_len=16)
    model = build_model(cfg, seed=2)
    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 11, (2, 10)), jnp.int32)
    full = nnx.jit(lambda m, x: m(x))(model, tokens)
    extend = nnx.jit(lambda m, x, s: m.extend(x, s))  # compiled once per length: 6, then 1
    state = model.init_state(2)
    first, state = extend(model, tokens[:, :6], state)
    steps = [first]
    for t in range(6, 10):
        out, state = extend(model, tokens[:, t:t + 1], state)
        steps.append(out)
    np.testing.assert_allclose(np.asarray(jnp.concatenate(steps, 1)), np.asarray(full),
                               rtol=1e-4, atol=1e-4)


def test_linear_archs_come_from_the_registry_and_a_fifth_is_judged_by_the_study(plain):
    """registry.linear_archs() (softmax_block=False) decides which archs the study judges against
    the baseline: the fifth architecture above appears in study.verdicts' finding 2."""
    from fit.synthetic_study import study_table
    from linscale_jax.contract import BASELINE_ARCH
    from study import verdicts

    assert registry.linear_archs() == ("tnl", "hgrn2", "cosformer2", PLAIN.name)
    t = study_table({BASELINE_ARCH: 0.0, PLAIN.name: 0.3}, ckpt_sd=0.005, run_sd=0.01, points=4, seed=0)
    res = verdicts.judge_all({"val_loss": t}, n_boot=20, holdout=False)
    row = res["findings"]["equal_compute"]["archs"][PLAIN.name]
    assert row["verdict"] == "worse" and row["diff"] == pytest.approx(0.3, abs=0.05)
    assert res["findings"]["equal_compute"]["verdict"] == "not reproduced"
