"""Per-token decoding time after a prefill of each context length, per architecture.

    python bench/decode.py [--contexts=1024,16384] [--archs=llama,tnl,hgrn2,cosformer2]
                           [--size=d128] [--steps=32] [--json]

For every arch: build the ladder model, prefill `context` tokens through eval.generate.Generator
(chunked `extend`) for every context, then time `steps` one-token steps (greedy sampling included,
as in generation) round-robin over the contexts; ms_per_token is the median per context. The linear models carry an O(1) state, so
their step time should not grow with the context, and they decode past model.max_seq_len (the
ladder's is 2048). LLaMA's KV cache is sized to each context (its max_seq_len is raised for the bench); its step
attends over the cached positions, so its time grows with the context.
--json prints one JSON object per (arch, context): arch, context, ms_per_token (and prefill_s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if __name__ == "__main__":  # huge pages for XLA:CPU's step buffers (linscale_jax.parallel.host_memory)
    from linscale_jax.parallel import host_memory

    host_memory.use_huge_pages()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from linscale_jax.eval.generate import Generator  # noqa: E402
from linscale_jax.config import ARCHS  # noqa: E402
from linscale_jax.models import ModelConfig, build_model, sizes  # noqa: E402


def bench_arch(arch: str, size: str, contexts: list[int], steps: int) -> list[dict]:
    """Prefill one state per context, then time one-token steps round-robin over the contexts (so
    load from other processes hits every context alike); median per context."""
    values = sizes.ladder_model(arch, size)
    if arch == "llama":  # the KV cache must hold the whole context
        values["max_seq_len"] = max(values["max_seq_len"], max(contexts) + steps + 9)
    model = build_model(ModelConfig(**values), rngs=nnx.Rngs(0))
    gen = Generator(model, chunk_size=512)
    rng = np.random.default_rng(0)
    toks, states, prefill_s = [], [], []
    for c in contexts:
        prompt = rng.integers(0, values["vocab_size"], (1, c), np.int32)
        t0 = time.perf_counter()
        # LLaMA: a KV cache of the context (its step attends over all cache positions)
        logits, state = gen.prefill(prompt, max_len=c + steps + 9, return_logits=False)
        jax.block_until_ready(logits)
        prefill_s.append(time.perf_counter() - t0)
        toks.append(np.asarray(logits[:, -1].argmax(-1), np.int32))
        states.append(state)
    key = jax.random.PRNGKey(0)
    times = [[] for _ in contexts]
    for i in range(steps + 8):  # the first rounds compile / warm up
        for j in range(len(contexts)):
            t = time.perf_counter()
            tok, states[j] = gen.step_fn(gen.params, toks[j][:, None], states[j], key, 0.0, 0, 1.0)
            jax.block_until_ready(tok)
            toks[j] = np.asarray(tok)
            if i >= 8:
                times[j].append(time.perf_counter() - t)
    return [dict(arch=arch, context=c, ms_per_token=round(1e3 * float(np.median(ts)), 3),
                 prefill_s=round(p, 2), size=size)
            for c, ts, p in zip(contexts, times, prefill_s)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", default=",".join(ARCHS))
    p.add_argument("--contexts", default="1024,16384")
    p.add_argument("--size", default="d128")
    p.add_argument("--steps", type=int, default=32)
    p.add_argument("--json", action="store_true", help="one JSON object per (arch, context)")
    a = p.parse_args()
    contexts = [int(c) for c in a.contexts.split(",")]
    rows = []
    if not a.json:
        print(f"| arch | {' | '.join(f'{c} ms/token' for c in contexts)} | ratio last/first |")
        print("|---|" + "---|" * (len(contexts) + 1))
    for arch in a.archs.split(","):
        row = bench_arch(arch, a.size, contexts, a.steps)
        rows += row
        if a.json:
            for r in row:
                print(json.dumps(r), flush=True)
        else:
            ms = [r["ms_per_token"] for r in row]
            print(f"| {arch} | {' | '.join(f'{m:.2f}' for m in ms)} | {ms[-1] / ms[0]:.2f}x |",
                  flush=True)


if __name__ == "__main__":
    main()
