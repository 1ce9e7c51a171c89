"""Per-token decoding time after a prefill of each context length, per architecture.

    python bench/decode.py [--contexts=1024,16384] [--archs=llama,tnl,hgrn2,cosformer2]
                           [--size=d128] [--steps=32] [--json]

For every (arch, context): build the ladder model, prefill `context` tokens through
eval.generate.Generator (chunked `extend`), then time `steps` one-token steps (greedy sampling
included, as in generation); ms_per_token is the median. The linear models carry an O(1) state, so
their step time should not grow with the context, and they decode past model.max_seq_len (the
ladder's is 2048). LLaMA's KV cache is sized to the context (its max_seq_len is raised for the
bench), so its step attends over all cached positions and grows with the context.
--json prints one JSON object per (arch, context): arch, context, ms_per_token (and prefill_s).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from eval.generate import Generator  # noqa: E402
from linscale_jax.config import ARCHS  # noqa: E402
from linscale_jax.models import ModelConfig, build_model, sizes  # noqa: E402


def bench_one(arch: str, size: str, context: int, steps: int) -> dict:
    values = sizes.ladder_model(arch, size)
    if arch == "llama":  # the KV cache must hold the whole context
        values["max_seq_len"] = max(values["max_seq_len"], context + steps + 1)
    model = build_model(ModelConfig(**values), rngs=nnx.Rngs(0))
    gen = Generator(model, chunk_size=512)
    prompt = np.random.default_rng(0).integers(0, values["vocab_size"], (1, context), np.int32)
    t0 = time.perf_counter()
    logits, state = gen.prefill(prompt, max_len=context + steps + 1, return_logits=False)
    jax.block_until_ready(logits)
    prefill_s = time.perf_counter() - t0
    tok = np.asarray(logits[:, -1].argmax(-1), np.int32)
    key = jax.random.PRNGKey(0)
    times = []
    for i in range(steps + 2):  # the first two compile / warm up
        t = time.perf_counter()
        tok, state = gen._step(gen.params, tok[:, None], state, key, 0.0, 0, 1.0)
        jax.block_until_ready(tok)
        if i >= 2:
            times.append(time.perf_counter() - t)
    return dict(arch=arch, context=context, ms_per_token=round(1e3 * float(np.median(times)), 3),
                prefill_s=round(prefill_s, 2), size=size)


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
        row = [bench_one(arch, a.size, c, a.steps) for c in contexts]
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
