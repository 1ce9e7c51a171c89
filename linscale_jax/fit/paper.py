"""The paper's Table 3 (Shen et al. 2024): approach-1 power laws per arch, C in PFLOP/s-days.

``y = coefficient * C**exponent`` for L(C) (nats), N_opt(C) (non-embedding parameters) and
D_opt(C) (tokens).
"""

from __future__ import annotations

from linscale_jax.fit.powerlaw import PowerLaw
from linscale_jax.fit.table import PF_DAY, FitError

COMPUTE_UNIT = "pf-days"

TABLE3: dict[str, dict[str, PowerLaw]] = {
    "llama": {"L_C": PowerLaw(3.7087, -0.0798), "N_opt_C": PowerLaw(1.82e8, 0.7118),
              "D_opt_C": PowerLaw(2.56e10, 0.5102)},
    "tnl": {"L_C": PowerLaw(3.5391, -0.0768), "N_opt_C": PowerLaw(2.74e8, 0.6470),
            "D_opt_C": PowerLaw(4.43e10, 0.4684)},
    "hgrn2": {"L_C": PowerLaw(3.4788, -0.0753), "N_opt_C": PowerLaw(2.66e8, 0.6427),
              "D_opt_C": PowerLaw(4.80e10, 0.4500)},
    "cosformer2": {"L_C": PowerLaw(3.5877, -0.0756), "N_opt_C": PowerLaw(2.65e8, 0.6516),
                   "D_opt_C": PowerLaw(4.23e10, 0.4529)},
}
ARCHS = tuple(TABLE3)  # the paper's four, in its order (data, not the model registry: fit/ is standalone)


def law(arch: str, quantity: str, compute_unit: str = COMPUTE_UNIT) -> PowerLaw:
    """Table 3's law for ``arch`` and ``quantity`` (L_C | N_opt_C | D_opt_C) in ``compute_unit``."""
    if arch not in TABLE3:
        raise FitError(f"the paper has no fit for arch {arch!r} (Table 3 covers {', '.join(ARCHS)}); "
                       "compare it with its own fitted laws instead.")
    out = TABLE3[arch][quantity]
    if compute_unit == "flops":  # C_pf = C_flops / PF_DAY
        out = out.scaled_input(1.0 / PF_DAY)
    return out
