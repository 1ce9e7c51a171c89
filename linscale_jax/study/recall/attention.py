"""Where a trained MQAR run's softmax heads look: the two-step recall circuit, head by head.

    python -m linscale_jax.study.recall.attention DIR/runs/<run> [--step=N] [--sequences=64]

Recall by attention takes two heads in two layers: a previous-token head writes each pair's key
into its value's position, and a later head at a query key attends to the value whose previous
key matches. Per softmax layer and head this prints, on test sequences of the run's task (4 pairs:
the first of its study.n_pairs):
  prev  the weight a pair's value position (1, 3, ..., 2P−1) puts on its own key just before it;
        a causal head spread evenly over those prefixes puts (1/2 + 1/4 + ... + 1/2P)/P there;
  val   the weight a query key puts on the value position of its pair (evenly over the P stored
        values, a head copying without binding, 1/P at most);
  key   the weight a query key puts on its own earlier occurrence.
The weights are the model's own: each llama layer's attention is recomputed from its q, k and v
by the plain causal softmax (equal to the trained form's output) while the model runs eagerly, and the run's test accuracy on these sequences is printed beside them.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np


@contextlib.contextmanager
def recorded_attention():
    """Inside: every llama layer's causal attention goes through softmax_attention and appends its
    weights [b, h, t, s] (numpy) to the yielded list, in layer order. The model must run eagerly."""
    import jax
    import jax.numpy as jnp

    from linscale_jax.models import llama

    weights, trained = [], llama.causal_attention

    def plain(q, k, v, segment_ids, block=None, groups=None):  # q, k, v [b, t, h, e]
        t = q.shape[1]
        mask = jnp.broadcast_to(jnp.tril(jnp.ones((t, t), bool)), (q.shape[0], t, t))
        if segment_ids is not None:
            mask = mask & (segment_ids[:, :, None] == segment_ids[:, None, :])
        logits = jnp.einsum("bthe,bshe->bhts", q, k) * q.shape[-1] ** -0.5
        p = jax.nn.softmax(jnp.where(mask[:, None], logits, -jnp.inf), axis=-1)
        weights.append(np.asarray(p))
        return jnp.einsum("bhts,bshe->bthe", p, v)

    llama.causal_attention = plain
    try:
        yield weights
    finally:
        llama.causal_attention = trained


def circuit_scores(weights: np.ndarray, inputs: np.ndarray, query: np.ndarray, n_pairs: int) -> dict:
    """weights [b, h, t, s] of one layer, inputs [b, t] (keys at 0, 2, ..., values at 1, 3, ...),
    query [b, t] bool (query keys) -> {prev, val, key}: [h] mean weights (module docstring)."""
    b, h = weights.shape[:2]
    odd = np.arange(1, 2 * n_pairs, 2)
    prev = weights[:, :, odd, odd - 1].mean(axis=(0, 2))
    val, key, n = np.zeros(h), np.zeros(h), 0
    for row, pos in zip(*np.nonzero(query)):
        k = int(np.nonzero(inputs[row, :2 * n_pairs:2] == inputs[row, pos])[0][0]) * 2
        val, key, n = val + weights[row, :, pos, k + 1], key + weights[row, :, pos, k], n + 1
    return dict(prev=prev, val=val / max(n, 1), key=key / max(n, 1))


def even_prev(n_pairs: int) -> float:
    """`prev` of a head spread evenly over each value position's prefix."""
    return float(np.mean([1 / (i + 1) for i in range(1, 2 * n_pairs, 2)]))


def measure(workdir: str, step: int | None = None, sequences: int = 64, seed: int = 7) -> dict:
    """{step, accuracy, n_pairs, layers: [{layer, prev, val, key}]} of the run in `workdir`
    (softmax layers only, in depth order; a hybrid's linear layers are skipped)."""
    import jax.numpy as jnp

    from linscale_jax.data import mqar
    from linscale_jax.run import checkpoint as ckpt

    model, config, meta = ckpt.load_model(workdir, step)
    opts = mqar.options(config.data)
    p = opts["n_pairs"][0]
    x, query = mqar.sequences(np.random.default_rng([seed, mqar.SPLITS["test"], p]), sequences,
                              int(config.train.seq_len), p, opts["n_keys"], opts["n_values"],
                              opts["placement"], opts["power_a"])
    batch = mqar.to_batch(x, query)
    with recorded_attention() as weights:
        logits = np.asarray(model(jnp.asarray(batch["inputs"])))
    hit = (logits.argmax(-1) == batch["targets"])[batch["weights"] > 0]
    layers = [i for i, a in enumerate(model.cfg.layer_archs) if a == "llama"]
    return dict(step=int(meta.get("step", step or 0)), accuracy=float(hit.mean()), n_pairs=p,
                layers=[dict(layer=i, **circuit_scores(w, batch["inputs"], query[:, :-1], p))
                        for i, w in zip(layers, weights)])


def lines(result: dict) -> list[str]:
    p = result["n_pairs"]
    out = [f"step {result['step']}: test accuracy {result['accuracy']:.3f} ({p} pairs); per head: prev "
           f"(evenly {even_prev(p):.2f}), val (evenly {1 / p:.2f}), key"]
    for r in result["layers"]:
        out.append(f"layer {r['layer']}: prev " + " ".join(f"{v:.2f}" for v in r["prev"]) + " | val "
                   + " ".join(f"{v:.2f}" for v in r["val"]) + " | key " + " ".join(f"{v:.2f}" for v in r["key"]))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workdir")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--sequences", type=int, default=64)
    a = ap.parse_args(argv)
    print("\n".join(lines(measure(a.workdir, a.step, a.sequences))))


if __name__ == "__main__":
    main()
