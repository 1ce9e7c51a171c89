"""The power of a study's interval, from the noise model its draws carry (fit.bootstrap.draw_curves).

    m = split(diff_draws, sigma_draws, sd, df)   # the draws' variance: checkpoint part + seed part
    p = power(0.1, m)                             # share of studies like this one whose 95% interval
                                                  # excludes 0 when the true difference is 0.1 nats
    d = mde(m)                                    # the difference resolved in 80% of them

A difference's n draws d_j [n] (one study, paired draws; fit.approach1_draws refits on each) carry two
sources: the checkpoint noise (resampled residuals, and the law's refit spread with them) and the seed
offsets, whose sd σ*_j [n] is drawn per draw from the measured seed sd s with ν degrees of freedom
(SeedSd.draws). Their variance is modelled as

    Var(d_j | σ*_j) = v0 + c σ*_j²

(v0: the checkpoint part; c = Σ_i w_i² / r_i, the seed offsets' weight over sizes i with r_i
replicates), fitted to the draws by maximum likelihood (`split`). A re-run of the study with true
seed sd s then gives an estimate D ~ N(δ, v0 + c s²), measures s' = s·sqrt(χ²_ν/ν) from its own
replicates, and its 95% (90%) interval reaches the 97.5% (95%) point of z·sqrt(v0 + c s'²ν/χ²_ν)
from D; the verdict resolves (better or worse) when the 95% interval misses 0 and the 90% one does
not lie inside ±margin (that is "equivalent", scaling.verdicts.outcome). `power` averages this over
s' (the interval's width varies from study to study as the seed sd's estimate does), and `mde`
inverts it. The calibration
(study.calibrate) simulates exactly this model, so its simulated power crosses 80% at the MDE.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

LEVELS = (0.95, 0.90)  # two-sided: the resolving interval, the equivalence interval
POWER = 0.80
_RATIOS = np.concatenate([[0.0], np.geomspace(1e-4, 1e4, 161)])  # c s'^2 / v0 grid of the quantile table
_J = 200  # quantiles of z and of χ²_ν per entry of the quantile table (a J × J grid)
_M = 64  # quantiles of the future study's measured seed sd


@dataclasses.dataclass(frozen=True)
class Model:
    """The variance of one difference's draws: v0 + c σ², with the measured seed sd s (df ν)."""

    v0: float  # nats², the checkpoint part (and the refit spread with it)
    c: float  # the seed part's weight: Var from seed offsets = c σ²
    sd: float  # the measured seed sd s, nats
    df: float  # its degrees of freedom ν (inf: taken as known; 0: no seed part)
    margin: float = 0.0  # nats: a difference whose 90% interval lies inside ±margin is "equivalent"

    @property
    def se(self) -> float:
        """The estimate's sd over re-runs when the true seed sd is the measured one."""
        return float(np.sqrt(self.v0 + self.c * self.sd**2))

    def json(self) -> dict:
        return dict(v0=self.v0, c=self.c, sd=self.sd, df=None if not np.isfinite(self.df) else self.df,
                    margin=self.margin, se=self.se)

    @classmethod
    def of(cls, d: dict) -> "Model":
        """The inverse of json()."""
        return cls(d["v0"], d["c"], d["sd"], np.inf if d["df"] is None else d["df"], d.get("margin", 0.0))


def split(draws, sigma=None, sd: float = 0.0, df: float = 0.0, margin: float = 0.0) -> Model:
    """Model of the finite draws [n] whose seed sd was sigma [n] (None: no seed part): v0 and c by
    maximum likelihood of d_j ~ N(median, v0 + c σ_j²), profiled over the seed share on a grid."""
    d = np.asarray(draws, float)
    keep = np.isfinite(d)
    d = d[keep]
    r2 = (d - np.median(d)) ** 2
    if sigma is None or sd <= 0 or not df:
        return Model(float(np.mean(r2)), 0.0, float(sd), float(df), margin)
    x = np.asarray(sigma, float)[keep] ** 2 / sd**2  # σ_j² / s²
    if np.ptp(x) < 1e-9:  # one σ for every draw (df inf): the split is not identified, and not needed
        return Model(0.0, float(np.mean(r2)) / sd**2, float(sd), float(df), margin)
    best = None
    for f in np.linspace(0.0, 1.0, 201):  # f: the seed share of the variance at σ = s
        u = 1 - f + f * x
        t = np.mean(r2 / u)
        ll = -np.sum(np.log(t * u))
        if best is None or ll > best[0]:
            best = (ll, t, f)
    _, t, f = best
    return Model(float(t * (1 - f)), float(t * f / sd**2), float(sd), float(df), margin)


@functools.lru_cache(maxsize=64)
def _quantiles(df: float) -> np.ndarray:
    """[len(LEVELS), len(_RATIOS)] the two-sided upper point of z·sqrt(1 + ρ·ν/χ²_ν) per level and ρ
    in _RATIOS (ν inf: of z·sqrt(1 + ρ))."""
    from scipy import stats

    u = (np.arange(_J) + 0.5) / _J  # a product grid of the two distributions' quantiles
    z = stats.norm.ppf(u)
    g = np.ones(1) if not np.isfinite(df) else df / stats.chi2.ppf(u, df)
    zz, gg = (z[:, None] * np.ones_like(g)[None, :]).ravel(), (np.ones_like(z)[:, None] * g[None, :]).ravel()
    x = zz[None, :] * np.sqrt(1 + _RATIOS[:, None] * gg[None, :])
    return np.stack([np.quantile(x, 1 - (1 - lv) / 2, axis=1) for lv in LEVELS])


def _halfwidths(m: Model) -> np.ndarray:
    """[len(LEVELS), _M] the intervals' half-widths in re-runs, one per quantile of their measured
    seed sd."""
    if m.v0 <= 0 and m.c <= 0:
        return np.zeros((len(LEVELS), _M))
    if m.c <= 0 or m.sd <= 0 or not m.df:
        return np.repeat(_quantiles(np.inf)[:, :1] * np.sqrt(m.v0), _M, axis=1)
    if np.isfinite(m.df):
        from scipy import stats

        s2 = m.sd**2 * stats.chi2.ppf((np.arange(_M) + 0.5) / _M, m.df) / m.df
    else:
        s2 = np.full(_M, m.sd**2)
    q = _quantiles(float(m.df))
    if m.v0 <= 0:  # all seed: z·sqrt(c s'²ν/χ²) = sqrt(c) s' · (the largest ratio's point / sqrt(ρ))
        return np.sqrt(m.c * s2)[None, :] * q[:, -1:] / np.sqrt(_RATIOS[-1])
    x = np.log(np.maximum(m.c * s2 / m.v0, 1e-4))
    return np.sqrt(m.v0) * np.stack([np.interp(x, np.log(_RATIOS[1:]), qi[1:]) for qi in q])


def _curve(m: Model):
    """effect -> power under `m` (the re-runs' half-widths computed once)."""
    from scipy import stats

    se = m.se
    hw95, hw90 = _halfwidths(m)
    need = np.maximum(hw95, m.margin - hw90)  # |estimate| beyond this resolves
    if se <= 0:
        return lambda effect: float(np.mean(abs(effect) > need))
    return lambda effect: float(np.mean(stats.norm.cdf((abs(effect) - need) / se)))


def power(effect: float, m: Model) -> float:
    """Share of re-runs (true seed sd = the measured one) whose verdict resolves a true difference
    `effect` (nats, either sign) on its side: the 95% interval excludes 0, and the 90% interval does
    not lie inside ±margin (that is "equivalent", which the verdict rules put first)."""
    return _curve(m)(effect)


def mde(m: Model, target: float = POWER) -> float:
    """The smallest true difference (nats) that `power` resolves in `target` of re-runs."""
    f = _curve(m)
    lo, hi = 0.0, max(m.se, 1e-9)
    while f(hi) < target:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return float(hi)
