"""Read the Mosaic kernels out of a module exported for TPU (jax.export ... .mlir_module()).

Each `stablehlo.custom_call @tpu_custom_call` carries a JSON backend config whose body is the
serialized Mosaic module (MLIR bytecode) and, when the pallas_call passed one, its cost estimate.
`tpu_kernels(mlir_text)` decodes every call with jaxlib's own Mosaic dialect (no TPU needed) and
returns, per kernel, its cost estimate and its matmuls as (lhs type, rhs type, result type, fp32
contract precision?) tuples, e.g. ("vector<16x128xbf16>", "vector<64x128xbf16>",
"vector<16x64xf32>", False).
"""

from __future__ import annotations

import base64
import json
import re

from jax._src.interpreters import mlir
from jax._src.lib import tpu
from jaxlib.mlir import ir
from jaxlib.mlir.passmanager import PassManager

_CALL = re.compile(r'stablehlo\.custom_call @tpu_custom_call\(.*?backend_config = "(.*?)"')
_MATMUL = re.compile(r"tpu\.matmul .*?: (vector<[^>]*>), (vector<[^>]*>), vector<[^>]*> -> (vector<[^>]*>)")


def _unescape(attr: str) -> str:
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), attr)


def _mosaic_text(body_b64: str) -> str:
    ctx = mlir.make_ir_context()
    tpu.register_dialect(ctx)
    with ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(base64.b64decode(body_b64))
        PassManager.parse("builtin.module(mosaic-serde{serialize=false})").run(module.operation)
        return str(module)


def tpu_kernels(mlir_text: str) -> list[dict]:
    """[{"cost_estimate": dict | None, "matmuls": [(lhs, rhs, out, fp32_precision), ...]}]."""
    out = []
    for attr in _CALL.findall(mlir_text):
        cfg = json.loads(_unescape(attr))["custom_call_config"]
        text = _mosaic_text(cfg["body"])
        matmuls = [(*_MATMUL.search(line).groups(), "contract_precision<fp32>" in line)
                   for line in text.splitlines() if "tpu.matmul" in line]
        out.append({"cost_estimate": cfg.get("cost_estimate"), "matmuls": matmuls})
    return out


def is_bf16(mm) -> bool:
    """bf16 x bf16 operands accumulated in f32."""
    lhs, rhs, res, _ = mm
    return lhs.endswith("xbf16>") and rhs.endswith("xbf16>") and res.endswith("xf32>")
