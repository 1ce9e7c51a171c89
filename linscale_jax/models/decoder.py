"""The common pre-norm decoder: tied embedding, l blocks, final norm, tied LM head.

    x = embed(tokens);  for each block: x = x + mixer(norm(x)); x = x + glu(norm(x))
    logits = norm(x) @ embedding.T   (float32)

Legend: b batch, t sequence, d width, v vocab, l layers.
Each architecture supplies a token mixer with the interface

    mixer(x [b,t,d], *, positions [b,t] int32, segment_ids [b,t] | None, cache, extra)
        -> (y [b,t,d], new_cache)      (cache None = parallel training forward; returns None)
    mixer.init_cache(batch_size, max_len) -> pytree

and, on its registry entry, model-level parameters of its layers and the per-layer inputs made from
them (`stack_params`, `stack_extras`: HGRN2's lower bounds, TNL's decays); a Decoder subclass
(`ArchSpec.model`) may override `embed_tokens(...)` (cosFormer2's TPE).

Hybrid stacks (model.layers, e.g. "tnl*3,llama"): layer j is a block of its own architecture a_j,
built from `cfg.pure(a_j)` (its mixer, its norms and GLU: LLaMA's RMSNorm scales and SwiGLU, the
linear archs' SimpleRMSNorm and identity GLU), and the i-th layer of an architecture gets that
architecture's i-th per-layer input, as in a model of its layers alone; the embedding stage, final
norm and LM head are model.arch's. Decoding caches are per layer: a KV cache for softmax layers, a
state for linear ones. Execution forms:

    model(tokens, segment_ids=None) -> logits [b,t,v]
    state = model.init_state(batch_size, max_len);  logits, state = model.extend(tokens, state)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.models import registry
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.layers import GLU, Embed, KeyGen, Linear, make_norm

_REMAT_POLICIES = {
    "block": None,  # save nothing inside a block
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def segment_starts(segment_ids):
    """Where each token's segment (its run of one id) starts: [b, t] int -> [b, t] int32."""
    b, t = segment_ids.shape
    idx = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None], (b, t))
    starts = jnp.concatenate(
        [jnp.ones((b, 1), bool), segment_ids[:, 1:] != segment_ids[:, :-1]], axis=1
    )
    return jax.lax.cummax(jnp.where(starts, idx, 0), axis=1)


def segment_positions(segment_ids):
    """Position of each token inside its segment: [b, t] int -> [b, t] int32 (0 at each start)."""
    return jnp.arange(segment_ids.shape[1], dtype=jnp.int32)[None] - segment_starts(segment_ids)


def check_tokens(tokens, max_len: int, what: str = "tokens"):
    """Validate tokens [b, t] integer with t <= max_len; return (b, t)."""
    shape = getattr(tokens, "shape", None)
    dtype = getattr(tokens, "dtype", None)
    if shape is None or len(shape) != 2:
        raise ValueError(
            f"{what} must be a 2-D integer array [batch, seq]; got shape {shape}. "
            "Add a batch axis (tokens[None]) or reshape to [batch, seq]."
        )
    if not jnp.issubdtype(dtype, jnp.integer):
        raise TypeError(
            f"{what} must hold integer token ids; got dtype {dtype}. "
            "Pass token ids, e.g. tokens.astype(jnp.int32)."
        )
    if shape[1] > max_len:
        raise ValueError(
            f"{what}: sequence length {shape[1]} exceeds model.max_seq_len={max_len}; "
            f"truncate or chunk the input, or raise --config.model.max_seq_len."
        )
    return shape


class Block(nnx.Module):
    """Pre-norm residual block of cfg.arch: x + mixer(norm(x)), then x + glu(norm(x)). x [b,t,d]."""

    def __init__(self, cfg: ModelConfig, mixer: nnx.Module, *, keys: KeyGen):
        self.norm1, self.norm2 = make_norm(cfg), make_norm(cfg)
        self.mixer = mixer
        self.mlp = GLU(cfg.d_model, cfg.ffn_dim, keys=keys, std=cfg.init_std,
                       activation=registry.get(cfg.arch).softmax_block or cfg.glu_act == "silu")

    def __call__(self, x, positions, segment_ids, cache, extra):
        y, cache = self.mixer(self.norm1(x), positions=positions, segment_ids=segment_ids,
                              cache=cache, extra=extra)
        x = x + y
        x = x + self.mlp(self.norm2(x))
        return x, cache


def _block_train(block, x, positions, segment_ids, extra):
    return block(x, positions, segment_ids, None, extra)[0]


def stack_modules(modules):
    """l identical modules -> one module whose parameters carry a leading [l] axis ('layers')."""
    graphdef, first = nnx.split(modules[0])
    states = [nnx.split(m)[1] for m in modules]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)

    def add_layer_axis(path, var):
        axes = var.get_metadata().get("axes")
        if axes is not None:
            var.set_metadata("axes", ("layers",) + tuple(axes))
        return var

    stacked = nnx.map_state(add_layer_axis, stacked)
    return nnx.merge(graphdef, stacked)


class Decoder(nnx.Module):
    """Base model; builds the registered mixer of each layer's arch (subclasses add model-level
    parameters and hooks).

    model.scan_layers=False: `layers` is an nnx.List of l Blocks (parameters layers/<j>/...).
    model.scan_layers=True: `layers` is one Block whose parameters are stacked [l, ...] (logical
    axis 'layers'), applied with `lax.scan` (compile time independent of depth); decoding caches
    are stacked the same way. Each arch's stack parameters (ArchSpec.stack_params) are attributes:
    `<name>`, or `<arch>_<name>` in a hybrid stack.
    """

    def __init__(self, cfg: ModelConfig, *, keys: KeyGen):
        self.cfg = cfg
        self.embed = Embed(cfg.vocab_size, cfg.d_model, keys=keys, std=cfg.init_std)
        pure = {a: cfg.pure(a) for a in cfg.archs}
        blocks = [Block(pure[a], self.make_mixer(pure[a], keys), keys=keys) for a in cfg.layer_archs]
        self.layers = stack_modules(blocks) if cfg.scan_layers else nnx.List(blocks)
        self.final_norm = make_norm(pure[cfg.arch])
        self.lm_head = None if cfg.tie_embeddings else Linear(
            cfg.d_model, cfg.vocab_size, keys=keys, std=cfg.init_std, axes=("embed", "vocab"))
        stacks = []
        for a in cfg.archs:
            params = registry.get(a).stack_params(pure[a], cfg.layer_archs.count(a), keys)
            for name, param in params.items():
                setattr(self, self._stack_name(a, name), param)
            stacks.append((a, tuple(params)))
        self.stacks = tuple(stacks)  # ((arch, stack parameter names), ...)

    # --- hooks -------------------------------------------------------------------------------
    def make_mixer(self, cfg: ModelConfig, keys: KeyGen) -> nnx.Module:
        """The registered architecture's mixer (registry.get(cfg.arch).mixer; cfg: the layer's
        pure config). model.short_conv > 0 needs a mixer built on linscale_jax.models.linear_common
        .project (its `conv`)."""
        mixer = registry.get(cfg.arch).mixer(cfg, keys=keys)
        if cfg.short_conv and getattr(mixer, "conv", None) is None:
            raise ValueError(f"model.short_conv={cfg.short_conv}: the {cfg.arch} mixer has no short "
                             "convolution (build its projections with linear_common.project); set "
                             "--config.model.short_conv=0.")
        return mixer

    def _stack_name(self, arch: str, name: str) -> str:
        return f"{arch}_{name}" if self.cfg.hybrid else name

    def layer_extras(self):
        """{arch: its layers' extra mixer inputs stacked [n_arch, ...] or None} (ArchSpec.stack_extras
        from its stack parameters)."""
        out = {}
        for a, names in self.stacks:
            params = {n: getattr(self, self._stack_name(a, n))[...] for n in names}
            out[a] = registry.get(a).stack_extras(self.cfg.pure(a), self.cfg.layer_archs.count(a),
                                                  params)
        return out

    def embed_tokens(self, tokens, positions, segment_ids, cache):
        """tokens [b,t] -> (x [b,t,d] in compute dtype, new embedding-stage cache)."""
        return self.lookup(tokens), cache

    def lookup(self, tokens):
        """Embedding lookup in the compute dtype (times sqrt(d) with model.embed_scale=sqrt_d)."""
        x = self.embed(tokens, jnp.dtype(self.cfg.dtype))
        if self.cfg.embed_scale == "sqrt_d":
            x = x * jnp.asarray(self.cfg.d_model**0.5, x.dtype)
        return x

    def logits(self, x):
        """x [b,t,d] -> float32 logits [b,t,v] (tied embedding, or lm_head)."""
        if self.lm_head is None:
            return self.embed.attend(x)
        w = self.lm_head.kernel[...].astype(x.dtype)
        return jnp.einsum("btd,dv->btv", x, w, preferred_element_type=jnp.float32)

    def init_embed_cache(self, batch_size: int):
        return None

    # --- forward -----------------------------------------------------------------------------
    def _layers_loop(self, x, positions, segment_ids, extras, caches):
        cfg = self.cfg
        new_caches = []
        seen = dict.fromkeys(cfg.archs, 0)  # layers of each arch so far: the index of its extras
        for j, (block, arch) in enumerate(zip(self.layers, cfg.layer_archs)):
            extra = jax.tree.map(lambda a, i=seen[arch]: a[i], extras[arch])
            seen[arch] += 1
            if caches is not None:
                x, c = block(x, positions, None, caches[j], extra)
                new_caches.append(c)
            elif cfg.remat == "none":
                x = _block_train(block, x, positions, segment_ids, extra)
            else:
                fn = nnx.remat(_block_train, policy=_REMAT_POLICIES[cfg.remat])
                x = fn(block, x, positions, segment_ids, extra)
        return x, (new_caches if caches is not None else None)

    def _layers_scan(self, x, positions, segment_ids, extras, caches):
        graphdef, params = nnx.split(self.layers)

        def body(x, xs):
            layer_params, extra, cache = xs
            block = nnx.merge(graphdef, layer_params)
            return block(x, positions, segment_ids, cache, extra)

        if caches is None and self.cfg.remat != "none":
            body = jax.checkpoint(body, policy=_REMAT_POLICIES[self.cfg.remat])
        x, new_caches = jax.lax.scan(body, x, (params, extras[self.cfg.arch], caches))
        return x, (new_caches if caches is not None else None)

    def _run(self, tokens, positions, segment_ids, state):
        extras = self.layer_extras()
        emb_cache = None if state is None else state["embed"]
        caches = None if state is None else state["layers"]
        x, emb_cache = self.embed_tokens(tokens, positions, segment_ids, emb_cache)
        run_layers = self._layers_scan if self.cfg.scan_layers else self._layers_loop
        x, caches = run_layers(x, positions, segment_ids, extras, caches)
        logits = self.logits(self.final_norm(x))
        new_state = None
        if state is not None:
            new_state = {"pos": state["pos"] + tokens.shape[1], "embed": emb_cache, "layers": caches}
        return logits, new_state

    def __call__(self, tokens, segment_ids=None):
        """tokens [b,t] int -> logits [b,t,v] float32. segment_ids [b,t] int marks packed documents
        (attention / state never crosses a change of id; positions restart at each document)."""
        b, t = check_tokens(tokens, self.cfg.max_seq_len)
        if segment_ids is None:
            positions = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None], (b, t))
        else:
            if tuple(segment_ids.shape) != (b, t) or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
                raise ValueError(
                    f"segment_ids must be an integer array shaped like tokens {(b, t)}; got "
                    f"{segment_ids.shape} {segment_ids.dtype}. Pass batch['segment_ids'] or None."
                )
            positions = segment_positions(segment_ids)
        logits, _ = self._run(tokens, positions, segment_ids, None)
        return logits

    @property
    def has_kv_cache(self) -> bool:
        """Any softmax layer: its KV cache bounds decoding by max_len."""
        return any(registry.get(a).softmax_block for a in self.cfg.archs)

    def init_state(self, batch_size: int, max_len: int | None = None):
        """Decoding state for `extend`: {'pos': int32 [], 'embed': ..., 'layers': per-layer caches
        (a list, or one pytree stacked [l, ...] with scan_layers)}.
        max_len (default model.max_seq_len) sizes the softmax layers' KV caches, which bound the
        tokens fed through `extend`; a model of linear layers only keeps an O(1) state and decodes
        without a length limit (max_len is ignored there)."""
        if not self.has_kv_cache:  # a recurrent state: no length to size
            max_len = 1
        else:
            max_len = self.cfg.max_seq_len if max_len is None else int(max_len)
            if not 1 <= max_len <= self.cfg.max_seq_len:
                raise ValueError(
                    f"init_state: max_len={max_len} must be in [1, model.max_seq_len="
                    f"{self.cfg.max_seq_len}] (the softmax layers' KV cache); raise "
                    "--config.model.max_seq_len for longer decoding.")
        if self.cfg.scan_layers:  # one cache with a leading [l] axis
            one = self.layers.mixer.init_cache(batch_size, max_len)
            layers = jax.tree.map(lambda a: jnp.broadcast_to(a, (self.cfg.n_layers,) + a.shape), one)
        else:
            layers = [blk.mixer.init_cache(batch_size, max_len) for blk in self.layers]
        return {"pos": jnp.zeros((), jnp.int32), "embed": self.init_embed_cache(batch_size),
                "layers": layers}

    def _kv_capacity(self, state) -> int:
        """Tokens the state's KV caches hold (the first softmax layer's cache length)."""
        if self.cfg.scan_layers:
            return state["layers"]["k"].shape[-3]
        j = next(j for j, a in enumerate(self.cfg.layer_archs) if registry.get(a).softmax_block)
        return state["layers"][j]["k"].shape[-3]

    def extend(self, tokens, state):
        """Continue from `state` with tokens [b,t] (prefill t>1 or one step t=1).
        Returns (logits [b,t,v] float32, new state). A model of linear layers only continues past
        model.max_seq_len (positions are int32; LRPE angles are formed in float32)."""
        if not self.has_kv_cache:  # O(1) recurrent state
            b, t = check_tokens(tokens, np.iinfo(np.int32).max)
        else:
            pos, t = state["pos"], tokens.shape[-1]
            if not isinstance(pos, jax.core.Tracer):
                cap = self._kv_capacity(state)
                if int(np.asarray(pos)) + t > cap:  # cap <= model.max_seq_len (init_state)
                    raise ValueError(
                        f"extend: the KV cache holds {cap} tokens but position {int(pos)} + {t} new "
                        "tokens exceeds it; call init_state with a larger max_len (at most "
                        "model.max_seq_len) or start a new state.")
            b, t = check_tokens(tokens, self.cfg.max_seq_len)
        positions = state["pos"] + jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32)[None], (b, t))
        return self._run(tokens, positions, None, state)
