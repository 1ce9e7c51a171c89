"""cosFormer2's verdict with and without its TPE: the cpu preset (configs/study/cpu.py) for llama,
cosformer2 (model.tpe=lightnet, the default) and cosformer2+tpe=none.

    python -m linscale_jax.study --config=tpe --workdir=DIR_TPE
DIR_TPE/report.md's finding 2 gives cosformer2 - llama and cosformer2+tpe=none - llama at equal
compute, each with its verdict. The llama and cosformer2 runs are the main job's own: copying them
first (`mkdir -p DIR_TPE/runs && cp -r DIR/runs/llama-* DIR/runs/cosformer2-d* DIR_TPE/runs/`)
leaves the cosformer2+tpe=none runs. Another TPE is one label away (cosformer2+tpe=lightnet_untied,
cosformer2+tpe=xmixers). Cost and verdicts: docs/results.md, "Study results (the `cpu` preset)".
"""

from linscale_jax.study.presets import preset


def get_config():
    c = preset("cpu")
    c.archs = "llama,cosformer2,cosformer2+tpe=none"
    return c
