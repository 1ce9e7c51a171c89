"""Roofline of a config's training step on a TPU generation, on paper (no TPU needed).

    python bench/tpu_roofline.py --config=configs/paper.py:tnl-1b --tpu=v5p [--json] [--chips=N]

Per kernel (the token mixer's Pallas kernels or the flash softmax-attention kernel, the dense
matmuls, the optimizer sweep) and per training step at the config's batch and sequence length:
FLOPs, HBM bytes, arithmetic intensity, roofline time (chip-seconds: divide by --chips), and the MFU
bound the step implies, with the row that takes the most time and the memory-bound row that costs
the most beyond its FLOPs. Then the same step side by side for the four architectures at the
config's size (llama's mixer is causal softmax attention). Chip figures and sources:
kernels_pallas/tpu.py; the model: linscale_jax/models/roofline.py.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from kernels_pallas import tpu  # noqa: E402
from linscale_jax.models import ModelConfig, registry, sizes  # noqa: E402
from linscale_jax.models.roofline import step_roofline  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Config file, e.g. configs/paper.py:tnl-1b.")
_TPU = flags.DEFINE_enum("tpu", "v5p", sorted(tpu.GENERATIONS), "TPU generation.")
_JSON = flags.DEFINE_bool("json", False, "Print JSON instead of tables.")
_CHIPS = flags.DEFINE_integer("chips", 1, "Chips sharing the step (times divided by it).")


def _fmt_rows(rows, chips):
    head = f"{'kernel':<26}{'FLOPs':>11}{'HBM bytes':>11}{'FLOP/B':>8}{'time s':>10}  bound"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['name']:<26}{r['flops']:>11.3e}{r['bytes']:>11.3e}{r['intensity']:>8.1f}"
                     f"{r['time_s'] / chips:>10.4g}  {r['bound']}")
    return "\n".join(lines)


def _fmt_steps(steps, chips):
    head = (f"{'arch':<11}{'useful FLOPs':>13}{'HBM bytes':>11}{'FLOP/B':>8}{'time s':>10}"
            f"{'MFU bound':>10}  largest row / memory-bound row costing most")
    lines = [head, "-" * len(head)]
    for s in steps:
        mem = s["memory_limited_by"] or "none"
        lines.append(f"{s['arch']:<11}{s['useful_flops']:>13.3e}{s['bytes']:>11.3e}"
                     f"{s['intensity']:>8.1f}{s['time_s'] / chips:>10.4g}{s['mfu_bound']:>10.1%}"
                     f"  {s['bound_by']} / {mem} (+{s['memory_excess_s'] / chips:.3g} s)")
    return "\n".join(lines)


def main(argv):
    del argv
    if _CONFIG.value is None:
        raise app.UsageError("pass --config=configs/<file>.py:<arch>-<size>, e.g. "
                             "configs/paper.py:tnl-1b.")
    config, gen, chips = _CONFIG.value, tpu.by_name(_TPU.value), _CHIPS.value
    batch, seq_len = config.train.batch_size, config.train.seq_len
    cfg = ModelConfig.from_config(config.model)
    main_run = step_roofline(cfg, gen, batch, seq_len)
    others = []
    for arch in registry.paper_archs():  # the archs roofline models (gdn's kernels: not yet)
        if arch == cfg.arch:
            others.append(main_run["step"])
        elif cfg.size in sizes.PAPER_SIZES:
            other = ModelConfig.from_config(sizes.paper_model(arch, cfg.size))
            others.append(step_roofline(other, gen, batch, seq_len)["step"])
    if _JSON.value:
        print(json.dumps({"config": config.get("name", cfg.arch), "tpu": gen.name, "chips": chips,
                          "peak_bf16_flops": gen.peak_bf16_flops, "hbm_bytes_per_s": gen.hbm_bytes_per_s,
                          "rows": main_run["rows"], "step": main_run["step"], "archs": others},
                         indent=1))
        return
    s = main_run["step"]
    print(f"{config.get('name', cfg.arch)} on TPU {gen.name} ({gen.peak_bf16_flops / 1e12:.0f} "
          f"TFLOP/s bf16, {gen.hbm_bytes_per_s / 1e9:,.0f} GB/s HBM, ridge {gen.ridge:.0f} FLOP/B), "
          f"batch {batch} x seq {seq_len}, chunk {s['chunk']}, times on {chips} chip(s):")
    print(_fmt_rows(main_run["rows"], chips))
    print(f"step: useful {s['useful_flops']:.3e} FLOPs (accounting), time {s['time_s'] / chips:.4g} s, "
          f"MFU bound {s['mfu_bound']:.1%}; largest row {s['bound_by']}; memory-bound row costing "
          f"most: {s['memory_limited_by'] or 'none'} (+{s['memory_excess_s'] / chips:.3g} s)\n")
    print(f"the four architectures at size {cfg.size}, same batch and sequence:")
    print(_fmt_steps(others, chips))


if __name__ == "__main__":
    app.run(main)
