"""fits.json entries and the printed summary for each approach.

Per arch, every law is ``{"coefficient", "exponent", "ci95": {"coefficient": [lo, hi],
"exponent": [lo, hi]}}`` (plus ``"irreducible"`` in both places for L(C) with a floor); intervals
are null without a bootstrap.

- approach 1: ``{"L_C", "N_opt_C", "D_opt_C", "excluded", "info"}``
- approach 2: ``{"L_C", "N_opt_C", "D_opt_C", "optima", "excluded", "info"}``
- approach 3: ``{"E", "A", "B", "alpha", "beta", "a", "ci95", "huber_loss", "L_C", "N_opt_C",
  "D_opt_C", "info"}`` where ci95 has E, A, B, alpha, beta, a and the laws are the implied
  compute-optimal allocation (``info.flops_per_param_token`` is the k in C = k N D).
"""

from __future__ import annotations

from linscale_jax.fit import approach1, approach2, approach3
from linscale_jax.fit.bootstrap import Bootstrap


def _ci(boot: Bootstrap | None, key: str):
    if boot is None or key not in boot.samples:
        return None
    return boot.ci95()[key]


def law_json(name: str, law, boot: Bootstrap | None) -> dict:
    params = law.params()
    out = dict(params)
    out["ci95"] = {p: _ci(boot, f"{name}.{p}") for p in params}
    return out


def info(result, unit: str, boot: Bootstrap | None, seed: int, approach: int) -> dict:
    return {"approach": approach, "compute_unit": unit,
            "bootstrap": {"resamples": boot.n_requested if boot else 0,
                          "failed": boot.n_failed if boot else 0, "seed": seed,
                          "unit": "whole runs"}}


def entry(result, unit: str, boot: Bootstrap | None, seed: int) -> dict:
    """The fits.json value for one arch."""
    laws = {k: law_json(k, law, boot) for k, law in result.laws.items()}
    if isinstance(result, approach1.Result):
        return {**laws, "excluded": result.excluded, "info": info(result, unit, boot, seed, 1)}
    if isinstance(result, approach2.Result):
        optima = [{"compute": b.compute, "n_opt": b.n_opt, "d_opt": b.d_opt, "l_opt": b.l_opt}
                  for b in result.budgets if b.status == "ok"]
        return {**laws, "optima": optima, "excluded": result.excluded,
                "info": info(result, unit, boot, seed, 2)}
    assert isinstance(result, approach3.Result)
    p = result.params()
    keys = (*approach3.PARAMS, "a")
    return {**{k: p[k] for k in keys}, "ci95": {k: _ci(boot, k) for k in keys},
            "huber_loss": result.objective, **laws,
            "info": {**info(result, unit, boot, seed, 3), "n_points": result.n_points,
                     "n_runs": result.n_runs,
                     "flops_per_param_token": result.flops_per_param_token}}


def _fmt_ci(ci) -> str:
    return "" if ci is None else f"  [{ci[0]:.4g}, {ci[1]:.4g}]"


def summary(fits: dict) -> str:
    """Readable text of a fits.json dict."""
    lines = []
    for arch, e in fits.items():
        i = e["info"]
        lines.append(f"== {arch} (approach {i['approach']}, C in {i['compute_unit']}, "
                     f"bootstrap {i['bootstrap']['resamples']} resamples of whole runs)")
        if "alpha" in e:
            for k in (*approach3.PARAMS, "a"):
                lines.append(f"  {k:<6}= {e[k]:.5g}{_fmt_ci(e['ci95'][k])}")
            lines.append(f"  summed Huber loss {e['huber_loss']:.6g} over {e['info']['n_points']} "
                         "points")
        for k in ("L_C", "N_opt_C", "D_opt_C"):
            law = e[k]
            floor = f"{law['irreducible']:.4g} + " if "irreducible" in law else ""
            lines.append(f"  {k:<8} = {floor}{law['coefficient']:.4g} · C^{law['exponent']:+.4f}"
                         f"   exponent 95%{_fmt_ci(law['ci95']['exponent']) or ' n/a'}")
        ex = e.get("excluded")
        if ex and "ranges" in ex:
            label = "excluded" if ex["applied"] else "clamped (kept)"
            for r in ex["ranges"]:
                lines.append(f"  {label} C in [{r['compute'][0]:.3g}, {r['compute'][1]:.3g}]: "
                             f"run {r['run']} (N={r['n_params']:.3g}) {r['reason']}")
        elif ex:
            for d in ex["dropped"]:
                lines.append(f"  dropped budget C={d['compute']:.3g}: {d['reason']}")
    return "\n".join(lines)
