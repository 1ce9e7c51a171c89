"""Needle-in-a-haystack metrics on a grid of cell scores (pure numpy), and the heatmap.

A grid is `scores[n_lengths, n_depths]`, each cell a score in [1, 10] (the paper's judge scale; here
computed by `eval.niah.cell_score`, no external judge). Rows are context lengths (ascending), columns
are needle depths in percent (ascending).

Constants (the paper names the metrics but not their constants; these are ours):
  cell accuracy        a = (score - 1) / 9              1 -> 0 (miss), 10 -> 1 (exact)
  Acc@len              mean of a over the depths of that length
  Acc<=len             mean of a over every cell whose length <= len
  weighted average     sum w_ij a_ij / sum w_ij with geometric weights that grow with length and depth:
                       w_ij = w0 * ALPHA**i * ALPHA**j  (i length index, j depth index, from 0);
                       w0 cancels; ALPHA = 1.05, so the longest of 35 lengths weighs 1.05**34 ~ 5.3x the
                       shortest (same for depth).
  NIAH score           binarise: success = a >= THRESHOLD (0.5, i.e. score >= 5.5). Per length row i,
                       n_i = number of contiguous runs of equal values along depth;
                       p_i = 0 if no cell succeeds, 1 if all do, else 2**((1 - n_i) / 2).
                       Combined with the weighted average row by row:
                       NIAH = sum_i W_i p_i A_i / sum_i W_i,  W_i = ALPHA**i,  A_i = depth-weighted
                       mean of a in row i (weights ALPHA**j). So NIAH <= weighted average, with equality
                       when every row is all-success or all-failure, and fragmented rows are discounted.
All accuracies are fractions in [0, 1]; multiply by 100 for the paper's percentages.
"""

from __future__ import annotations

import numpy as np

ALPHA = 1.05
THRESHOLD = 0.5
SCORE_MIN, SCORE_MAX = 1.0, 10.0


def _check(scores) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.size == 0:
        raise ValueError(f"NIAH scores must be a non-empty [lengths, depths] grid, got shape {s.shape}")
    if np.any(~np.isfinite(s)) or s.min() < SCORE_MIN or s.max() > SCORE_MAX:
        raise ValueError("NIAH cell scores must lie in [1, 10] (1 = miss, 10 = exact answer)")
    return s


def cell_accuracy(scores) -> np.ndarray:
    """[l, d] scores in [1, 10] -> [l, d] accuracies in [0, 1]."""
    return (_check(scores) - SCORE_MIN) / (SCORE_MAX - SCORE_MIN)


def acc_at_len(scores) -> np.ndarray:
    """[l] mean accuracy over depths, per length."""
    return cell_accuracy(scores).mean(axis=1)


def acc_upto_len(scores) -> np.ndarray:
    """[l] mean accuracy over all cells with length <= this row's length (rows ascending)."""
    a = cell_accuracy(scores)
    return np.cumsum(a.sum(axis=1)) / (a.shape[1] * np.arange(1, a.shape[0] + 1))


def geometric_weights(n: int, alpha: float = ALPHA) -> np.ndarray:
    """[n] w_i = alpha**i (w0 = 1; it cancels in every normalised average)."""
    return alpha ** np.arange(n, dtype=np.float64)


def weighted_accuracy(scores, alpha: float = ALPHA) -> float:
    a = cell_accuracy(scores)
    w = np.outer(geometric_weights(a.shape[0], alpha), geometric_weights(a.shape[1], alpha))
    return float((w * a).sum() / w.sum())


def segment_counts(success) -> np.ndarray:
    """[l, d] bool -> [l] number of contiguous runs of equal values along depth."""
    s = np.asarray(success, dtype=bool)
    return 1 + (s[:, 1:] != s[:, :-1]).sum(axis=1)


def row_penalty(success) -> np.ndarray:
    """[l] p_i: 0 if nothing succeeds, 1 if everything does, else 2**((1 - n_i) / 2)."""
    s = np.asarray(success, dtype=bool)
    p = 2.0 ** ((1.0 - segment_counts(s)) / 2.0)
    p = np.where(s.all(axis=1), 1.0, p)
    return np.where(~s.any(axis=1), 0.0, p)


def niah_score(scores, alpha: float = ALPHA, threshold: float = THRESHOLD) -> float:
    a = cell_accuracy(scores)
    p = row_penalty(a >= threshold)
    wd = geometric_weights(a.shape[1], alpha)
    row_acc = (a * wd).sum(axis=1) / wd.sum()
    wl = geometric_weights(a.shape[0], alpha)
    return float((wl * p * row_acc).sum() / wl.sum())


def summarize(scores, lengths) -> dict:
    """All metrics as a flat JSON-friendly dict (accuracies as fractions)."""
    lengths = [int(x) for x in lengths]
    s = _check(scores)
    if len(lengths) != s.shape[0]:
        raise ValueError(f"{len(lengths)} lengths for a grid with {s.shape[0]} rows")
    at, upto = acc_at_len(s), acc_upto_len(s)
    out = {
        "niah_weighted_acc": weighted_accuracy(s),
        "niah_score": niah_score(s),
        "niah_mean_cell_score": float(s.mean()),
    }
    out.update({f"acc@{n}": float(v) for n, v in zip(lengths, at)})
    out.update({f"acc<={n}": float(v) for n, v in zip(lengths, upto)})
    return out


def heatmap(scores, lengths, depths, path, title: str = "") -> None:
    """Write a PNG: x = context length (tokens), y = depth (%), colour = cell score 1..10."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = _check(scores)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.25 * s.shape[0] + 2), max(3.0, 0.2 * s.shape[1] + 1.5)))
    im = ax.imshow(s.T, origin="upper", aspect="auto", cmap="RdYlGn", vmin=1, vmax=10,
                   interpolation="nearest")
    step_x = max(1, len(lengths) // 8)
    step_y = max(1, len(depths) // 8)
    ax.set_xticks(range(0, len(lengths), step_x), [str(int(x)) for x in lengths][::step_x])
    ax.set_yticks(range(0, len(depths), step_y), [f"{d:.0f}" for d in depths][::step_y])
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth (%)")
    m = summarize(s, lengths)
    ax.set_title(f"{title}\nweighted acc {100 * m['niah_weighted_acc']:.1f}%  "
                 f"NIAH score {100 * m['niah_score']:.1f}%".strip(), fontsize=9)
    fig.colorbar(im, ax=ax, label="score (1 miss .. 10 exact)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
