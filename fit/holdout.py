"""Held-out validation of fitted laws: fit without the largest size, predict it, compare.

    p = predict(table, n_boot=200, seed=0, extra_sd=0.0)   # one arch's table
    p.final()  -> {"arch", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual", "inside"}
    write_csv(predictions, path); plot(predictions, tables, path)

The law is approach 3, ``L(N, D) = E + A/N^alpha + B/D^beta`` (fit.approach3), fitted to every run
except those of the largest size N_max (seed replicates of N_max are all held out); it predicts
the held-out size's loss at each of its checkpoints (its loss-vs-compute curve) and at its final
checkpoint. The 95% interval is for the *observed* value, so it combines

  - the fit's uncertainty: refits on tables whose runs are resampled with replacement (the
    bootstrap of fit.bootstrap, each resample starting from the point estimate; when more than
    half of the resamples fail, there is no interval: NaN bounds, n_boot_ok = 0), and
  - observation noise, as a log-normal factor with standard deviation
    ``sd = sqrt(resid_sd**2 + extra_sd**2)`` in ln loss: ``resid_sd`` is the RMS of the fit's own
    ln residuals (checkpoint-to-checkpoint evaluation and optimisation noise, and lack of fit), and
    ``extra_sd`` is what the residuals cannot see, e.g. the seed-to-seed spread of a run's loss
    when every size was trained with one seed (measured by study.noise).

An actual value outside the interval flags the law (or the held-out run) as not predictive.
"""

from __future__ import annotations

import csv
import dataclasses

import numpy as np

from fit import approach3
from fit.bootstrap import bootstrap
from fit.table import FitError, Table
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN

CSV_COLUMNS = ("arch", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual")


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One arch's held-out size: arrays [p] over its checkpoints (mean over held-out seeds)."""

    arch: str
    n_params: float
    tokens: np.ndarray
    flops: np.ndarray
    predicted: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    actual: np.ndarray
    law: dict  # the approach-3 fit without the held-out size: E, A, B, alpha, beta
    resid_sd: float  # RMS ln residual of that fit
    extra_sd: float
    n_boot_ok: int  # 0: the fit's uncertainty could not be bootstrapped (too few runs)
    n_runs_fit: int

    @property
    def inside(self) -> np.ndarray:
        return (self.actual >= self.ci_low) & (self.actual <= self.ci_high)

    def final(self) -> dict:
        return {"arch": self.arch, "n_params": self.n_params, "tokens": float(self.tokens[-1]),
                "predicted": float(self.predicted[-1]), "ci_low": float(self.ci_low[-1]),
                "ci_high": float(self.ci_high[-1]), "actual": float(self.actual[-1]),
                "inside": bool(self.inside[-1])}


def split_largest(table: Table) -> tuple[Table, Table]:
    """(the runs below the largest size, the runs of the largest size) of one arch."""
    n_max = float(table.n_params.max())
    held = table.n_params >= n_max * (1 - 1e-9)
    if held.all():
        raise FitError(f"{table.arch[0]}: every run has the same size; a held-out prediction needs "
                       "smaller sizes to fit on")
    return table.take(~held), table.take(held)


def _held_curve(held: Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, flops, loss) [p] of the held-out size; seeds of that size averaged per step."""
    steps = np.unique(held.step)
    common = [s for s in steps if len(set(held.run[held.step == s].tolist()))
              == len(set(held.run.tolist()))]
    pick = [held.step == s for s in common]
    return tuple(np.array([getattr(held, c)[m].mean() for m in pick])
                 for c in ("tokens", "flops", "loss"))


def predict(table: Table, *, n_boot: int = 200, seed: int = 0, extra_sd: float = 0.0,
            flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN, level: float = 0.95) -> Prediction:
    """Fit approach 3 on one arch's runs below its largest size; predict the largest (see module)."""
    rest, held = split_largest(table)
    arch = str(table.arch[0])
    point = approach3.fit(rest, flops_per_param_token=flops_per_param_token)
    tokens, flops, actual = _held_curve(held)
    n_max = float(held.n_params[0])
    pred = point.predict(n_max, tokens)
    resid = np.log(rest.loss) - np.log(point.predict(rest.n_params, rest.tokens))
    resid_sd = float(np.sqrt(np.mean(resid**2)))
    sd = float(np.hypot(resid_sd, extra_sd))

    def refit(t):
        r = approach3.fit(t, flops_per_param_token=flops_per_param_token, init=point.theta)
        return {f"p{i}": float(v) for i, v in enumerate(r.predict(n_max, tokens))}

    draws = np.tile(pred, (1, 1))
    n_ok = 0
    if n_boot:
        try:  # more than half of the resamples failing leaves a biased subset: no interval
            boot = bootstrap(rest, refit, n_boot, seed=seed, max_failed=0.5)
            ok = np.stack([boot.samples[f"p{i}"] for i in range(len(tokens))], axis=1)  # [b, p]
            ok = ok[np.isfinite(ok).all(axis=1)]  # a degenerate refit (E, A or B overflowing)
            if len(ok) >= n_boot / 2:
                draws, n_ok = ok, len(ok)
        except FitError:  # too few runs (e.g. 2 sizes): most resamples hold one size only
            pass
        if not n_ok:  # n_boot_ok = 0: "no interval" (NaN bounds, never inside)
            nan = np.full(len(tokens), np.nan)
            return Prediction(arch=arch, n_params=n_max, tokens=tokens, flops=flops, predicted=pred,
                              ci_low=nan, ci_high=nan, actual=actual,
                              law={p: float(getattr(point, p)) for p in approach3.PARAMS},
                              resid_sd=resid_sd, extra_sd=float(extra_sd), n_boot_ok=0,
                              n_runs_fit=len(set(rest.run.tolist())))
    rng = np.random.default_rng([seed, 1])
    reps = max(1, 4000 // len(draws))  # noise draws per fit draw
    noisy = np.repeat(draws, reps, axis=0) * np.exp(sd * rng.standard_normal((len(draws) * reps, 1)))
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(noisy, [tail, 100 - tail], axis=0)
    return Prediction(arch=arch, n_params=n_max, tokens=tokens, flops=flops, predicted=pred,
                      ci_low=lo, ci_high=hi, actual=actual,
                      law={p: float(getattr(point, p)) for p in approach3.PARAMS},
                      resid_sd=resid_sd, extra_sd=float(extra_sd), n_boot_ok=n_ok,
                      n_runs_fit=len(set(rest.run.tolist())))


def write_csv(predictions: list[Prediction], path) -> None:
    """holdout.csv: one row per arch, the held-out size's final checkpoint."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for p in predictions:
            f = p.final()
            w.writerow([f["arch"], f"{f['n_params']:.6g}", f"{f['tokens']:.6g}",
                        *(f"{f[c]:.5f}" for c in CSV_COLUMNS[3:])])


def write_curves_csv(predictions: list[Prediction], path) -> None:
    """Every checkpoint of every held-out size: arch, n_params, tokens, flops, predicted, ci, actual."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(("arch", "n_params", "tokens", "flops", "predicted", "ci_low", "ci_high", "actual"))
        for p in predictions:
            for i in range(len(p.tokens)):
                w.writerow([p.arch, f"{p.n_params:.6g}", f"{p.tokens[i]:.6g}", f"{p.flops[i]:.6g}",
                            *(f"{getattr(p, c)[i]:.5f}" for c in ("predicted", "ci_low", "ci_high",
                                                                  "actual"))])


def plot(predictions: list[Prediction], tables: dict, path, compute_label: str = "C") -> None:
    """One panel per arch: the fitted runs (grey), the held-out size's actual curve (dots) and its
    predicted curve with the 95% band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = max(len(predictions), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    for ax, p in zip(axes[0], predictions):
        rest, _ = split_largest(tables[p.arch])
        for _, r in rest.runs():
            ax.plot(r.flops, r.loss, color="0.7", lw=0.8)
        ax.fill_between(p.flops, p.ci_low, p.ci_high, color="C0", alpha=0.25, label="95% interval")
        ax.plot(p.flops, p.predicted, color="C0", lw=1.5, label="predicted")
        ax.plot(p.flops, p.actual, "o", ms=3, color="C3", label=f"actual (N={p.n_params:.3g})")
        verdict = "inside" if p.final()["inside"] else "OUTSIDE"
        ax.set(xscale="log", yscale="log", xlabel=compute_label, ylabel="loss",
               title=f"{p.arch}: final {verdict}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
