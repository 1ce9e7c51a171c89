"""The report's "Memory at decode": what decoding one sequence holds, for every arch of the study
at its largest size, from findings.json's runs (each run's decode_memory, study.scaling.results).

    lines = section(doc)     # [] unless the study has a hybrid, or a linear arch beside llama

A row per arch: its softmax layers of all layers, the KV-cache bytes its softmax layers add per
token (linscale_jax.models.accounting.kv_cache_bytes_per_token) and that figure as a ratio of
llama's at the same size, and the decoding state in floats per layer at the trained context
(accounting.state_floats_per_layer: a linear layer's fixed state, a softmax layer's KV cache at
that length, the mean over the layers). Computed from the model configs: exact, no interval.
"""

from __future__ import annotations

from linscale_jax.contract import BASELINE_ARCH

KEYS = ("kv_bytes_per_token", "state_floats_per_layer", "softmax_layers", "layers")


def largest(runs: list[dict]) -> dict:
    """{arch: its largest seed-0 run's row}, in the runs' order of archs."""
    out = {}
    for r in runs:
        if not r.get("seed") and (r["arch"] not in out or r["n_params"] > out[r["arch"]]["n_params"]):
            out[r["arch"]] = r
    return out


def shown(rows: dict) -> bool:
    """A hybrid among the archs (some softmax layers, not all), or a linear arch (no softmax layer)
    beside the llama baseline."""
    hybrid = any(0 < r["softmax_layers"] < r["layers"] for r in rows.values())
    linear = any(r["softmax_layers"] == 0 for r in rows.values())
    return hybrid or (linear and BASELINE_ARCH in rows)


def section(doc) -> list[str]:
    runs = [r for r in doc.found.get("runs", []) if all(k in r for k in KEYS)]
    rows = largest(runs)
    if not rows or not shown(rows):
        return []
    base = {r["size"]: r["kv_bytes_per_token"] for r in runs if r["arch"] == BASELINE_ARCH and not r.get("seed")}
    seq = doc.found["design"]["seq_len"]
    L = ["## Memory at decode", "",
         "What decoding one sequence holds, from each arch's largest model config "
         "(linscale_jax.models.accounting; exact, no interval): the KV caches of the softmax layers grow by "
         "the bytes per token below (in the model's dtype), a linear layer's state does not grow. "
         f"The ratio is to {BASELINE_ARCH}'s model of the same size. State floats per layer: the mean "
         f"over the layers at the trained context of {seq} tokens (a softmax layer's KV cache at that length).", "",
         f"| arch | size | softmax layers | KV-cache bytes per token | KV bytes / {BASELINE_ARCH}'s | "
         f"state floats per layer at {seq} tokens |", "|---|---|---|---|---|---|"]
    for a, r in rows.items():
        ref = base.get(r["size"])
        ratio = f"{r['kv_bytes_per_token'] / ref:.3g}" if ref else "—"
        L.append(f"| {a} | {r['size']} | {r['softmax_layers']} of {r['layers']} | {r['kv_bytes_per_token']:,} | "
                 f"{ratio} | {r['state_floats_per_layer']:,.0f} |")
    return L + [""]
