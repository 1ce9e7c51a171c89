"""Decoding: chunked prefill, then one `model.extend` step per new token (KV cache for LLaMA,
recurrent state for the linear models). The prefix is never run again.

    gen = Generator(model)
    tokens = gen.generate(prompt [b, t] int, max_new_tokens=32, temperature=0.0)   # [b, n] int
    logits, state = gen.prefill(prompt, max_len)        # logits [b, t, v] of every prompt position

The linear models (TNL, HGRN2, cosFormer2) carry an O(1) state and decode past model.max_seq_len;
LLaMA's KV cache holds at most max_seq_len positions (clear error beyond).
Sampling: temperature 0 is greedy (argmax); otherwise logits / temperature, then top-k (0 = off),
then top-p nucleus (1.0 = off), then a categorical draw with jax.random (seeded).
Prefill chunks have `chunk_size` tokens; the remainder is split into powers of two down to 16 tokens
and then single tokens (see chunk_sizes), so a sweep over many prompt lengths compiles few shapes.

CLI:  python -m linscale_jax.eval.generate --workdir=DIR --prompt="Once upon" [--step=S] [--max_new_tokens=64]
      [--temperature=0.8 --top_k=40 --top_p=0.95 --seed=0]
"""

from __future__ import annotations

import functools
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.models import registry


def sample_logits(logits, key, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0):
    """logits [b, v] float -> token ids [b] int32 (see the module docstring for the order)."""
    if temperature <= 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits.astype(jnp.float32) / temperature
    if top_k > 0:
        kth = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        srt = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(srt, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each sorted token
        keep = before < top_p  # the most likely token is always kept
        cutoff = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def chunk_sizes(t: int, chunk_size: int, min_chunk: int = 16) -> list[int]:
    """Split t prefill tokens: full chunks, then halving powers of two >= min_chunk, then single
    tokens (< min_chunk of them). A sweep over many prompt lengths thus compiles at most
    log2(chunk_size / min_chunk) + 2 prefill shapes."""
    sizes = [chunk_size] * (t // chunk_size)
    rest, p = t % chunk_size, chunk_size // 2
    while rest and p >= min_chunk:
        if rest >= p:
            sizes.append(p)
            rest -= p
        p //= 2
    return sizes + [1] * rest


@functools.lru_cache(maxsize=16)
def _compiled(graphdef):
    """Jitted (extend, step) for one model structure: checkpoints of a run share the compilations."""

    def extend(params, tokens, state):
        return nnx.merge(graphdef, params).extend(tokens, state)

    def step(params, tokens, state, key, temperature, top_k, top_p):
        logits, state = extend(params, tokens, state)
        return sample_logits(logits[:, -1], key, temperature, top_k, top_p), state

    return jax.jit(extend), jax.jit(step, static_argnums=(4, 5, 6))


_sample = jax.jit(sample_logits, static_argnums=(2, 3, 4))


class Generator:
    """Jitted prefill / step functions around one model (parameters passed as arguments)."""

    def __init__(self, model: nnx.Module, chunk_size: int = 256, min_chunk: int = 16):
        self.model = model
        self.cfg = model.cfg
        self.chunk_size, self.min_chunk = int(chunk_size), min(int(min_chunk), int(chunk_size))
        graphdef, self.params = nnx.split(model)
        # step_fn(params, tok [b, 1], state, key, temperature, top_k, top_p) -> (next tok [b], state)
        self._extend, self.step_fn = _compiled(graphdef)
        self._sample = _sample

    def _check_len(self, total: int, max_len: int):
        if not registry.get(self.cfg.arch).softmax_block:  # O(1) recurrent state: no length limit
            return
        if total > max_len or max_len > self.cfg.max_seq_len:
            raise ValueError(f"decoding needs {total} positions but the state holds {max_len} (model "
                             f"max_seq_len {self.cfg.max_seq_len}); shorten the prompt, lower "
                             "--max_new_tokens, or evaluate a model trained with a longer "
                             "model.max_seq_len")

    def prefill(self, prompt, max_len: int | None = None, state=None, return_logits: bool = True):
        """prompt [b, t] int -> (logits [b, t, v] (or [b, 1, v] of the last position), state).

        Continues from `state` when given (e.g. the next window of a long document)."""
        prompt = jnp.asarray(prompt, jnp.int32)
        b, t = prompt.shape
        if t == 0:
            raise ValueError("prefill needs at least one prompt token (use the EOS id for an empty prompt)")
        if state is None:
            max_len = t if max_len is None else max_len
            self._check_len(t, max_len)
            state = self.model.init_state(b, max_len)
        outs, start = [], 0
        for n in chunk_sizes(t, self.chunk_size, self.min_chunk):
            logits, state = self._extend(self.params, prompt[:, start:start + n], state)
            outs.append(logits if return_logits else logits[:, -1:])
            start += n
        logits = jnp.concatenate(outs, axis=1) if return_logits else outs[-1]
        return logits, state

    def generate(self, prompt, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int = 0, stop_id: int | None = None,
                 stop_fn=None, max_len: int | None = None) -> np.ndarray:
        """prompt [b, t] int (rows of equal length) -> new tokens [b, n] int32, n <= max_new_tokens.

        Stops early when every row has produced `stop_id`, or when stop_fn(tokens [b, i]) is True.
        max_len: positions of the decoding state (default: just enough); fix it across calls of
        different prompt lengths to keep one KV-cache shape (one compile) for LLaMA."""
        prompt = np.asarray(prompt, np.int32)
        if prompt.ndim != 2:
            raise ValueError(f"prompt must be [batch, seq] token ids, got shape {prompt.shape}")
        if max_new_tokens < 1:
            return np.zeros((prompt.shape[0], 0), np.int32)
        total = prompt.shape[1] + max_new_tokens - 1  # the last sampled token is never fed back
        self._check_len(total, total if max_len is None else max_len)
        logits, state = self.prefill(prompt, max_len=max_len or total, return_logits=False)
        key = jax.random.PRNGKey(seed)
        key, sub = jax.random.split(key)
        tok = self._sample(logits[:, -1], sub, float(temperature), int(top_k), float(top_p))
        out = [np.asarray(tok)]
        done = out[0] == stop_id if stop_id is not None else np.zeros(len(out[0]), bool)
        for _ in range(max_new_tokens - 1):
            if done.all() or (stop_fn is not None and stop_fn(np.stack(out, 1))):
                break
            key, sub = jax.random.split(key)
            tok, state = self.step_fn(self.params, tok[:, None], state, sub, float(temperature),
                                    int(top_k), float(top_p))
            out.append(np.asarray(tok))
            if stop_id is not None:
                done |= out[-1] == stop_id
        return np.stack(out, axis=1)


def main(argv=None) -> int:
    """The command: one line on an error (rc 1, traceback to a log), rc 2 on a bad command line."""
    from linscale_jax.run import command

    return command.run(lambda: _main(argv), command="generate")


def _main(argv) -> int:
    from linscale_jax.errors import ArgumentParser

    p = ArgumentParser(prog="python -m linscale_jax.eval.generate", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", required=True)
    p.add_argument("--prompt", required=True)
    p.add_argument("--step", type=int, default=None, help="checkpoint step (default: the latest)")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    from linscale_jax.eval.loading import load_run

    run = load_run(a.workdir, a.step)
    print(f"[{a.workdir} step {run.metadata['step']}]", file=sys.stderr, flush=True)
    ids = [run.bos_id] + run.encode(a.prompt)
    new = Generator(run.model).generate(np.array([ids]), a.max_new_tokens, a.temperature, a.top_k,
                                        a.top_p, a.seed, stop_id=run.eos_id)[0].tolist()
    if run.eos_id in new:
        new = new[:new.index(run.eos_id)]
    sys.stdout.write(a.prompt + run.decode(new) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
