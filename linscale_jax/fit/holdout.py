"""Held-out validation of fitted laws, and their lack of fit: can a law describe runs it has not seen?

    preds = predict(table, n_boot=200, seed=0, seed_sd=SeedSd(...))   # one arch; one Prediction per
    p.final() -> {"arch", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual", "inside"}
    law = full_law(table, seed_sd)          # approach 3 on every size, with its lack of fit
    write_csv(preds, path); write_curves_csv(preds, path)

Approach 3 (`L(N, D) = E + A/N^alpha + B/D^beta`, bounded) is fitted to every size but the held-out
ones (`held_out_sizes`: the largest, the two largest from 5 sizes on) and predicts each held-out
checkpoint. The 95% interval is for the observed value: refits on draws of the point law with the
sizes fixed (fit.bootstrap.draw_curves; a parametric bootstrap, each refit also started with E off
its bound) plus the held-out run's own noise (the drawn seed sd over the root of its replicates,
and the fitted sizes' residual sd). More than 10% failed refits: no interval
(`failed` says how many). `lack_of_fit` is the F statistic of the laws' per-size mean residuals
against the seed sd. Method: docs/study.md "Held-out prediction" and "Estimators and verdicts".
"""

from __future__ import annotations

import csv
import dataclasses
import functools

import numpy as np

from linscale_jax.fit import approach1, approach3, kaplan, pool
from linscale_jax.fit import bootstrap as bs
from linscale_jax.fit.table import FitError, Table, from_columns
from linscale_jax.contract import FLOPS_PER_PARAM_TOKEN, TABLE_COLUMNS

CSV_COLUMNS = ("arch", "n_params", "tokens", "predicted", "ci_low", "ci_high", "actual")
ALPHA_BOUNDS = (0.01, 2.5)  # alpha, beta: Hoffmann et al.'s initialisation grid spans 0..2
E_LOG_MIN = -10.0  # ln E >= -10: an irreducible loss of 5e-5 nats is none
MAX_FAILED = 0.10  # more failed refits than this share: no interval
FORMS = {"additive": approach3, "kaplan": kaplan}  # L(N, D): E + A/N^α + B/D^β, or E + ((A/N)^(α/β) + B/D)^β


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One held-out size of one arch: arrays [p] over its checkpoints (mean over its seeds)."""

    arch: str
    n_params: float
    tokens: np.ndarray
    flops: np.ndarray
    predicted: np.ndarray
    ci_low: np.ndarray | None  # None: no interval (more than MAX_FAILED of the refits failed)
    ci_high: np.ndarray | None
    actual: np.ndarray
    law: dict  # the approach-3 fit without the held-out size(s): E, A, B, alpha, beta
    resid_sd: float  # RMS residual (nats) of that fit
    seed_sd: dict  # the seed sd the interval used (SeedSd.json)
    failed: float  # share of refits that failed
    n_sizes_fit: int

    @property
    def inside(self) -> np.ndarray:
        if self.ci_low is None:
            return np.zeros(len(self.actual), bool)
        return (self.actual >= self.ci_low) & (self.actual <= self.ci_high)

    def final(self) -> dict:
        no = self.ci_low is None
        return {"arch": self.arch, "n_params": self.n_params, "tokens": float(self.tokens[-1]),
                "predicted": float(self.predicted[-1]), "ci_low": None if no else float(self.ci_low[-1]),
                "ci_high": None if no else float(self.ci_high[-1]), "actual": float(self.actual[-1]),
                "inside": bool(self.inside[-1])}


def held_out_sizes(n_sizes: int) -> int:
    """How many of the largest sizes a held-out check leaves out: 2 from 5 sizes on, else 1."""
    return 2 if n_sizes >= 5 else 1


def bounds(loss_min: float) -> list:
    """L-BFGS-B box of approach 3's theta (a, b, e, alpha, beta)."""
    return [(None, None), (None, None), (E_LOG_MIN, float(np.log(loss_min)) - 1e-6), ALPHA_BOUNDS, ALPHA_BOUNDS]


def _table(arch: str, curves: list[bs.Curve], loss: list[np.ndarray] | None = None) -> Table:
    """A table with one run per curve (its replicate mean, or `loss` [k] per curve)."""
    cols = {c: [] for c in TABLE_COLUMNS}
    for i, c in enumerate(curves):
        y = c.mean if loss is None else loss[i]
        cols["arch"] += [arch] * len(y)
        cols["run"] += [f"{arch}-{i}"] * len(y)
        cols["step"] += list(range(len(y)))
        cols["n_params"] += [c.n_params] * len(y)
        cols["tokens"] += list(c.tokens)
        cols["flops"] += list(c.flops)
        cols["loss"] += list(y)
    return from_columns(f"{arch} curves", **cols)


def _fit(t: Table, k: float, init=None, form: str = "additive") -> approach3.Result:
    if float(t.loss.min()) <= np.exp(E_LOG_MIN):
        raise FitError(f"{t.arch[0]}: a loss below {np.exp(E_LOG_MIN):.2g} nats; no law to fit")
    return FORMS[form].fit(t, flops_per_param_token=k, init=init, bounds=bounds(float(t.loss.min())))


def _refit(t: Table, k: float, init: np.ndarray, form: str = "additive") -> np.ndarray | None:
    """theta [5] of one bootstrap refit from `init`, None when it fails (a worker of law_draws)."""
    try:
        theta = _fit(t, k, init=init, form=form).theta
    except FitError:
        return None
    return theta if np.all(np.isfinite(theta)) else None


def _law(r: approach3.Result, loss_min: float) -> dict:
    """E, A, B, alpha, beta of a fit, and at_bound: those of E, alpha, beta that sit on their bound."""
    out = {p: float(getattr(r, p)) for p in approach3.PARAMS}
    out["form"] = r.form
    box = dict(zip(("E", "alpha", "beta"), bounds(loss_min)[2:]))
    lo = {"E": np.exp(box["E"][0]), "alpha": box["alpha"][0], "beta": box["beta"][0]}
    hi = {"E": loss_min, "alpha": box["alpha"][1], "beta": box["beta"][1]}
    out["at_bound"] = [k for k in ("E", "alpha", "beta")
                       if out[k] <= lo[k] * (1 + 1e-3) or out[k] >= hi[k] * (1 - 1e-3)]
    return out


def central(x: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """(low [k], high [k]): the central `level` of draws x [m, k]."""
    tail = 100 * (1 - level) / 2
    return tuple(np.percentile(x, [tail, 100 - tail], axis=0))


@dataclasses.dataclass(frozen=True)
class LawDraws:
    """Approach 3 fitted on one arch's curves (`point`) and refitted on draws of them with the
    sizes fixed (`thetas`, the refits that succeeded, with their seed-sd draws `sigma`): what a
    prediction's interval for an observed loss is made of (law_draws)."""

    point: approach3.Result
    thetas: np.ndarray  # [b, 5] (a, b, e, alpha, beta) of the successful refits
    sigma: np.ndarray  # [b] the seed-sd draw of each of them
    ckpt_sd: float  # one run's checkpoint noise: RMS of each run's residuals around the law plus its own offset
    resid_sd: float  # RMS residual of the point fit (nats)
    failed: float  # share of refits that failed
    loss_min: float  # the fitted curves' lowest loss (the bound of E)
    n_sizes: int
    form: str = "additive"  # FORMS

    @property
    def law(self) -> dict:
        """E, A, B, alpha, beta of the point fit, and at_bound (those of E, alpha, beta on their bound)."""
        return _law(self.point, self.loss_min)

    def values(self, n, d) -> np.ndarray:
        """[b, k]: every refit's L(n, d) at k points (n, d broadcast to [k])."""
        a, b, e, al, be = (self.thetas[:, j][:, None] for j in range(5))
        n, d = np.broadcast_arrays(np.atleast_1d(np.asarray(n, float)), np.atleast_1d(np.asarray(d, float)))
        return FORMS[self.form].loss(np.exp(e), np.exp(a), np.exp(b), al, be, n[None], d[None])

    def observed(self, n, d, rng: np.random.Generator, replicates: int = 1) -> np.ndarray | None:
        """[m, k] draws of the observed loss at (n, d) [k] of a run averaged over `replicates` seeds:
        the refits' values plus the mean's seed offset (sd drawn with each refit, over √replicates)
        and its checkpoint noise (ckpt_sd over √replicates: each seed's run fluctuates on its own);
        None when more than MAX_FAILED of the refits failed."""
        if self.failed > MAX_FAILED or not len(self.thetas):
            return None
        reps = max(1, 4000 // len(self.thetas))
        s = np.repeat(self.sigma, reps)
        x = np.repeat(self.values(n, d), reps, axis=0)  # [b·reps, k]
        x = x + ((s / np.sqrt(replicates)) * rng.standard_normal(len(s)))[:, None]
        return x + (self.ckpt_sd / np.sqrt(replicates)) * rng.standard_normal(x.shape)

    def interval(self, n, d, rng: np.random.Generator, replicates: int = 1, level: float = 0.95):
        """(low [k], high [k]): the central `level` of observed's draws; None as there."""
        x = self.observed(n, d, rng, replicates)
        return None if x is None else central(x, level)


def refit_starts(theta: np.ndarray, curves: list[bs.Curve]) -> np.ndarray:
    """[2, 5] starts of a refit: the point fit's theta, and the same with E at half the curves' lowest
    loss. With E on its lower bound the gradient in ln E is ~E/L, so a refit started there alone
    stays there: every refit would be a two-parameter power law and the interval too narrow."""
    inner = np.array(theta, float)
    inner[2] = np.log(0.5 * min(float(c.mean.min()) for c in curves))
    return np.stack([np.asarray(theta, float), inner])


def late_rms(r: approach3.Result, curves: list[bs.Curve]) -> float:
    """RMS over sizes of a fit's mean residual (actual − law) over the second half of each size's points:
    how far the law misses the sizes it was fitted to (the quantity of the lack-of-fit test)."""
    return float(np.sqrt(np.mean([np.mean((c.mean - r.predict(c.n_params, c.tokens))[len(c.mean) // 2:]) ** 2
                                  for c in curves])))


def choose_form(curves: list[bs.Curve], arch: str, form: str = "auto",
                flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> tuple[str, dict]:
    """(form, {form: late_rms}): `form` itself when it is one of FORMS; "auto": each of FORMS fitted to
    `curves`, the one that misses them least (both have five parameters); a form whose fit fails
    is left out."""
    if form != "auto":
        if form not in FORMS:
            raise FitError(f"law form {form!r}: pass auto or one of {', '.join(FORMS)}")
        return form, {}
    rms = {}
    for f in FORMS:
        try:
            rms[f] = late_rms(_fit(_table(arch, curves), flops_per_param_token, form=f), curves)
        except FitError:
            continue
    if not rms:
        raise FitError(f"{arch}: no law form fits its sizes ({', '.join(FORMS)} failed)")
    return min(rms, key=rms.get), rms


def law_draws(curves: list[bs.Curve], arch: str, rng: np.random.Generator, *, n_boot: int, seed_sd: bs.SeedSd,
              flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN, form: str = "additive") -> LawDraws:
    """Approach 3 (bounded; `form`: another of FORMS) on `curves` (one arch's sizes, replicate means),
    and `n_boot` refits on draws of them: a parametric bootstrap (fit.bootstrap.draw_curves with the
    point law as every size's trend, the residuals around the size's mean offset in blocks, a seed
    offset whose sd is drawn from seed_sd), each refit from refit_starts, on every core (fit.pool)."""
    point = _fit(_table(arch, curves), flops_per_param_token, form=form)
    trends = []  # per fitted size: the law, and the residuals around the law plus the size's mean offset
    for c in curves:
        law = point.predict(c.n_params, c.tokens)
        u = c.mean - law
        trends.append((law, (u - u.mean()) * np.sqrt(len(u) / max(len(u) - 1, 1))))
    resid_sd = float(np.sqrt(np.mean(np.concatenate([c.mean - point.predict(c.n_params, c.tokens)
                                                      for c in curves]) ** 2)))
    runs = []  # every run's residuals around the law plus its own offset: one run's checkpoint noise
    for c in curves:
        for u in c.loss - point.predict(c.n_params, c.tokens)[None]:
            runs.append((u - u.mean()) * np.sqrt(len(u) / max(len(u) - 1, 1)))
    ckpt_sd = bs.ar1(runs)[0]
    rho = bs.ar1([r for _, r in trends])[1]  # the block length of the draws of the mean curves
    thetas, sig, failed = np.zeros((0, 5)), np.zeros(0), 1.0 if n_boot else 0.0
    if n_boot:
        sigma = seed_sd.draws(rng, n_boot)
        draws = bs.draw_curves({arch: curves}, {arch: sigma}, n_boot, rng,
                               bs.block_length(rho, max(len(c.flops) for c in curves)), {arch: trends})[arch]
        refit = functools.partial(_refit, k=flops_per_param_token, init=refit_starts(point.theta, curves), form=form)
        fits = pool.map_ordered(refit, [_table(arch, curves, [d[b] for d in draws]) for b in range(n_boot)])
        ok = [b for b, theta in enumerate(fits) if theta is not None]
        th = [fits[b] for b in ok]
        failed = 1 - len(ok) / n_boot
        thetas, sig = (np.array(th) if th else thetas), sigma[ok]
    return LawDraws(point=point, thetas=thetas, sigma=sig, ckpt_sd=ckpt_sd, resid_sd=resid_sd, failed=float(failed),
                    loss_min=float(min(c.mean.min() for c in curves)), n_sizes=len(curves), form=form)


def predict(table: Table, *, n_boot: int = 200, seed: int = 0, seed_sd: bs.SeedSd | None = None,
            n_held: int | None = None, flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN,
            level: float = 0.95) -> list[Prediction]:
    """Fit approach 3 on one arch's sizes below the held-out ones; predict those (module docstring).
    seed_sd: the seed-to-seed sd with its df (default: measured from the table's replicates)."""
    curves = bs.curves_of(table)
    arch = str(table.arch[0])
    n_held = held_out_sizes(len(curves)) if n_held is None else n_held
    rest, held = curves[:-n_held], curves[-n_held:]
    if len(rest) < 2:
        raise FitError(f"{arch}: {len(curves)} size(s); a held-out prediction of {n_held} size(s) needs "
                       "at least 2 smaller sizes to fit on")
    seed_sd = bs.seed_sd_of(curves) if seed_sd is None else seed_sd
    rng = np.random.default_rng(seed)
    ld = law_draws(rest, arch, rng, n_boot=n_boot, seed_sd=seed_sd, flops_per_param_token=flops_per_param_token)
    out = []
    for c in held:
        ci = ld.interval(c.n_params, c.tokens, rng, c.replicates, level) or (None, None)
        out.append(Prediction(arch=arch, n_params=c.n_params, tokens=c.tokens, flops=c.flops,
                              predicted=ld.point.predict(c.n_params, c.tokens), ci_low=ci[0], ci_high=ci[1],
                              actual=c.mean, law=ld.law, resid_sd=ld.resid_sd, seed_sd=seed_sd.json(),
                              failed=ld.failed, n_sizes_fit=len(rest)))
    return out


def lack_of_fit(residual_means, replicates, n_law_params: int, seed_sd: bs.SeedSd) -> dict:
    """{"rms", "F", "df1", "df2", "p"} of per-size mean residuals against the seed sd (module
    docstring); F and p are None where m − p < 1 or no seed sd was measured."""
    from scipy import stats

    u = np.asarray(residual_means, float)
    r = np.asarray(replicates, float)
    df1 = len(u) - n_law_params
    out = dict(rms=float(np.sqrt(np.mean(u**2))), sizes=len(u), df1=df1,
               df2=float(seed_sd.df) if np.isfinite(seed_sd.df) else None, F=None, p=None)
    if df1 < 1 or seed_sd.sd <= 0 or not seed_sd.df:
        out["note"] = ("too few sizes for the law's parameters" if df1 < 1 else "no seed sd measured")
        return out
    F = float(np.sum(r * u**2) / df1 / seed_sd.sd**2)
    p = stats.f.sf(F, df1, seed_sd.df) if np.isfinite(seed_sd.df) else stats.chi2.sf(F * df1, df1)
    return dict(out, F=F, p=float(p))


def envelope_lack_of_fit(curves: list[bs.Curve], seed_sd: bs.SeedSd) -> dict:
    """lack_of_fit of the approach-1 L(C) law (clamped points kept) through the replicate-mean
    curves' envelope: per winning size, its mean residual over the grid points it wins."""
    res = approach1.fit(_table("lof", curves), include_clamped=True)
    env, law = res.envelope, res.laws["L_C"]
    u = env.loss - law(env.compute)
    reps = {c.n_params: c.replicates for c in curves}
    sizes = np.unique(env.n_params)
    return lack_of_fit([u[env.n_params == n].mean() for n in sizes], [reps[float(n)] for n in sizes], 2, seed_sd)


def full_law(table: Table, seed_sd: bs.SeedSd | None = None,
             flops_per_param_token: float = FLOPS_PER_PARAM_TOKEN) -> dict:
    """Approach 3 on every size of one arch (replicate means): {"law", "resid_sd", "lack_of_fit",
    "sizes"}; sizes: per size its n_params, replicates, `residual` (the mean of the replicate-mean
    curve minus the law over the second half of its checkpoints, nats) and `z` (that residual over
    the seed sd of an r-replicate mean, s/sqrt(r); None without a seed sd)."""
    curves = bs.curves_of(table)
    seed_sd = bs.seed_sd_of(curves) if seed_sd is None else seed_sd
    r = _fit(_table(str(table.arch[0]), curves), flops_per_param_token)
    res = [c.mean - r.predict(c.n_params, c.tokens) for c in curves]
    late = [x[len(x) // 2:].mean() for x in res]
    sizes = [dict(n_params=c.n_params, replicates=c.replicates, residual=float(u),
                  z=float(u * np.sqrt(c.replicates) / seed_sd.sd) if seed_sd.sd > 0 else None)
             for c, u in zip(curves, late)]
    return dict(law=_law(r, float(min(c.mean.min() for c in curves))),
                resid_sd=float(np.sqrt(np.mean(np.concatenate(res) ** 2))),
                lack_of_fit=lack_of_fit(late, [c.replicates for c in curves], 3, seed_sd), sizes=sizes)


def _cell(x) -> str:
    return "" if x is None else f"{x:.5f}"


def write_csv(predictions: list[Prediction], path) -> None:
    """holdout.csv: one row per held-out size, its final checkpoint (empty ci: no interval)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for p in predictions:
            f = p.final()
            w.writerow([f["arch"], f"{f['n_params']:.6g}", f"{f['tokens']:.6g}",
                        *(_cell(f[c]) for c in CSV_COLUMNS[3:])])


def write_curves_csv(predictions: list[Prediction], path) -> None:
    """Every checkpoint of every held-out size: arch, n_params, tokens, flops, predicted, ci, actual."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(("arch", "n_params", "tokens", "flops", "predicted", "ci_low", "ci_high", "actual"))
        for p in predictions:
            for i in range(len(p.tokens)):
                lo = None if p.ci_low is None else p.ci_low[i]
                hi = None if p.ci_high is None else p.ci_high[i]
                w.writerow([p.arch, f"{p.n_params:.6g}", f"{p.tokens[i]:.6g}", f"{p.flops[i]:.6g}",
                            _cell(p.predicted[i]), _cell(lo), _cell(hi), _cell(p.actual[i])])


def plot(curves_csv, table: Table, path, compute_label: str = "C") -> None:
    """One panel per arch from holdout_curves.csv: the arch's other runs (grey), each held-out size's
    actual curve (dots) and its predicted curve with the 95% band, in the arch's colour
    (linscale_jax.palette: a darker shade for a larger held-out size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from linscale_jax import palette

    rows = list(csv.DictReader(open(curves_csv)))
    archs = list(dict.fromkeys(r["arch"] for r in rows))
    n = max(len(archs), 1)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.8), squeeze=False)
    for ax, a in zip(axes[0], archs):
        mine = [r for r in rows if r["arch"] == a]
        held = sorted({float(r["n_params"]) for r in mine})
        for _, r in table.select(a).runs():
            if float(r.n_params[0]) not in held:
                ax.plot(r.flops, r.loss, color=palette.OTHER, lw=0.8)
        verdicts = []
        for j, nh in enumerate(held):
            pts = [r for r in mine if float(r["n_params"]) == nh]
            f = np.array([float(r["flops"]) for r in pts])
            col = palette.shades(a, len(held) + 1)[j + 1]
            if all(r["ci_low"] for r in pts):
                lo, hi = (np.array([float(r[k]) for r in pts]) for k in ("ci_low", "ci_high"))
                ax.fill_between(f, lo, hi, color=col, alpha=0.25)
                act = float(pts[-1]["actual"])
                verdicts.append("inside" if lo[-1] <= act <= hi[-1] else "OUTSIDE")
            else:
                verdicts.append("no interval")
            ax.plot(f, [float(r["predicted"]) for r in pts], color=col, lw=1.5, label=f"predicted N={nh:.3g}")
            ax.plot(f, [float(r["actual"]) for r in pts], "o", ms=3, color=col, mec="k", mew=0.3,
                    label=f"actual N={nh:.3g}")
        ax.set(xscale="log", yscale="log", xlabel=compute_label, ylabel="loss",
               title=f"{a}: final {', '.join(verdicts)}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
