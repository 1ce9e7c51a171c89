"""cosFormer2's verdict with and without its TPE: the cpu preset (configs/study/cpu.py: same sizes,
token budget, optimiser and evaluation) for llama, cosformer2 (model.tpe=lightnet, the default: one
d×e projection used both ways, Table 1's d·e parameters) and cosformer2+tpe=none (no TPE).

    python -m study --config=configs/study/tpe.py --workdir=DIR_TPE

DIR_TPE/report.md's finding 2 gives cosformer2 − llama and cosformer2+tpe=none − llama at equal
compute, each with its verdict, so a reader sees whether cosFormer2's verdict depends on the TPE.
Cost: 3/4 of the main job's runs (12 of 16). The llama and cosformer2 runs are the main job's own
(same configs): copying them first (`mkdir -p DIR_TPE/runs && cp -r DIR/runs/llama-* DIR/runs/cosformer2-d*
DIR_TPE/runs/`) leaves the four cosformer2+tpe=none runs, 1/4 of the main job's training and
evaluation, about 6 CPU-minutes (4 minutes wall on 2 workers). Another TPE is one label away:
cosformer2+tpe=lightnet_untied (separate projections, 2·d·e) or cosformer2+tpe=xmixers.
"""

import importlib.util
import os


def get_config():
    path = os.path.join(os.path.dirname(__file__), "cpu.py")
    spec = importlib.util.spec_from_file_location("_cpu_preset", path)
    cpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu)
    c = cpu.get_config()
    c.archs = "llama,cosformer2,cosformer2+tpe=none"
    return c
