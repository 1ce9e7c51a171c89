"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology") as a training data source.

    config.data.task = "mqar"
    config.data.mqar = dict(n_pairs="4,8,16", n_keys=64, n_values=64, placement="power")
    it = data.make_iterator(config, "train")   # the same batch dicts as the text pipeline
    batch = mqar.batch(rng, batch_size, seq_len, n_pairs=8, n_keys=64, n_values=64)

One sequence x of seq_len + 1 tokens (Zoology's layout):
    k_1 v_1 k_2 v_2 ... k_P v_P | the P keys again in a random order, each at an even offset of the
    rest of the sequence and followed by its value (a target only, see below); every other position
    holds 0.
Keys are distinct ids in [1, 1 + n_keys), values distinct ids in [1 + n_keys, 1 + n_keys + n_values)
(Zoology draws both without replacement). targets = x[1:]; inputs = x[:-1] with every queried
value replaced by 0, as in Zoology: the answers are targets only. (With the answers in the input a
model can exclude the values already answered and reach (1 + 1/2 + ... + 1/P)/P, 0.52 for P = 4,
without binding keys to values.) weights are 1 exactly where the input is a query key, so the loss
(and accuracy) counts only the recalled values.
segment_ids are 1 (one sequence per row). Needs 4·P <= seq_len + 1 and P <= n_keys, n_values.

Query placement (placement): "uniform" draws the P query slots (the S = (seq_len + 1 - 2P) // 2
even offsets after the pairs) uniformly without replacement; "power" draws slot s = 1..S with
probability proportional to a·s^(a-1) (Zoology's power law, a = power_a = 0.01), so queries
cluster right after the pairs, close to their keys.

Training rows draw P uniformly from the n_pairs list (a mixture, as Zoology trains); evaluation
uses one P at a time (`batch`). Batch i of a split is a pure function of (data.seed, split, i),
so the iterator state is the batch count and resume is exact.
"""

from __future__ import annotations

import numpy as np

from linscale_jax.data.errors import DataError

DEFAULTS = dict(n_pairs="4,8,16", n_keys=64, n_values=64, placement="uniform", power_a=0.01)
PLACEMENTS = ("uniform", "power")
SPLITS = {"train": 0, "validation": 1, "test": 2}


def options(data_config) -> dict:
    """n_pairs (list of int), n_keys, n_values, placement, power_a from data.mqar (defaults:
    DEFAULTS)."""
    section = data_config.get("mqar", None) or {}
    if hasattr(section, "to_dict"):
        section = section.to_dict()
    opts = {**DEFAULTS, **dict(section)}
    unknown = sorted(set(opts) - set(DEFAULTS))
    if unknown:
        raise DataError(f"data.mqar: unknown field(s) {unknown}; valid fields are {sorted(DEFAULTS)}")
    pairs = opts["n_pairs"]
    pairs = [int(p) for p in (pairs.split(",") if isinstance(pairs, str) else pairs)]
    if not pairs or min(pairs) < 1:
        raise DataError(f"data.mqar.n_pairs={opts['n_pairs']!r} must list positive integers, e.g. '4,8,16'")
    if opts["placement"] not in PLACEMENTS:
        raise DataError(f"data.mqar.placement={opts['placement']!r}: choose one of {PLACEMENTS}")
    if not 0 < float(opts["power_a"]) <= 1:
        raise DataError(f"data.mqar.power_a={opts['power_a']!r} must lie in (0, 1] (Zoology: 0.01)")
    return dict(n_pairs=pairs, n_keys=int(opts["n_keys"]), n_values=int(opts["n_values"]),
                placement=str(opts["placement"]), power_a=float(opts["power_a"]))


def vocab_size(n_keys: int, n_values: int) -> int:
    """Ids used: 0 (gap), keys, values."""
    return 1 + n_keys + n_values


def check(seq_len: int, n_pairs: int, n_keys: int, n_values: int) -> None:
    if 4 * n_pairs > seq_len + 1:
        raise DataError(f"MQAR: {n_pairs} pairs need seq_len >= {4 * n_pairs - 1} (pairs and queries "
                        f"take 4 tokens each); got train.seq_len={seq_len}. Lower data.mqar.n_pairs or "
                        "raise the sequence length.")
    if n_pairs > min(n_keys, n_values):
        raise DataError(f"MQAR: {n_pairs} pairs of distinct keys and values need data.mqar.n_keys "
                        f">= {n_pairs} and n_values >= {n_pairs} (got {n_keys}, {n_values}).")


def slot_probabilities(slots: int, placement: str = "uniform", power_a: float = 0.01):
    """Probability of each of the `slots` query slots (None: uniform): Zoology's a·s^(a-1)."""
    if placement == "uniform":
        return None
    p = power_a * np.arange(1, slots + 1, dtype=np.float64) ** (power_a - 1)
    return p / p.sum()


def sequences(rng: np.random.Generator, n: int, seq_len: int, n_pairs, n_keys: int,
              n_values: int, placement: str = "uniform",
              power_a: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """x [n, seq_len + 1] int32 and query mask [n, seq_len + 1] bool (True at query keys).
    n_pairs: an int, or an int array [n] (one P per row)."""
    pairs = np.broadcast_to(np.asarray(n_pairs, np.int64), (n,))
    x = np.zeros((n, seq_len + 1), np.int32)
    query = np.zeros((n, seq_len + 1), bool)
    probs = {}
    for i, p in enumerate(pairs):
        check(seq_len, int(p), n_keys, n_values)
        keys = 1 + rng.choice(n_keys, size=p, replace=False)
        values = 1 + n_keys + rng.choice(n_values, size=p, replace=False)
        x[i, 0:2 * p:2], x[i, 1:2 * p:2] = keys, values
        slots = (seq_len + 1 - 2 * p) // 2
        if p not in probs:
            probs[p] = slot_probabilities(slots, placement, power_a)
        starts = 2 * p + 2 * np.sort(rng.choice(slots, size=p, replace=False, p=probs[p]))
        order = rng.permutation(p)
        x[i, starts], x[i, starts + 1] = keys[order], values[order]
        query[i, starts] = True
    return x, query


def to_batch(x: np.ndarray, query: np.ndarray) -> dict:
    """The text pipeline's batch dict from sequences x [b, t + 1] and their query mask."""
    b, t = x.shape[0], x.shape[1] - 1
    inputs = x[:, :-1].copy()
    inputs[:, 1:][query[:, :t - 1]] = 0  # the answers are targets only, never inputs
    return dict(inputs=inputs, targets=x[:, 1:].copy(),
                segment_ids=np.ones((b, t), np.int32),
                weights=query[:, :-1].astype(np.float32))


def batch(rng: np.random.Generator, batch_size: int, seq_len: int, n_pairs, n_keys: int,
          n_values: int, placement: str = "uniform", power_a: float = 0.01) -> dict:
    return to_batch(*sequences(rng, batch_size, seq_len, n_pairs, n_keys, n_values, placement,
                               power_a))


class MQARRows:
    """The row source of MQAR (the interface of data.rows.RecordRows): batch `step` of a split is
    drawn from rng(data.seed, split, step), whole, and the requested rows are returned."""

    kind = "mqar"

    def __init__(self, config, split: str):
        opts = options(config.data)
        need = vocab_size(opts["n_keys"], opts["n_values"])
        model = config.get("model")
        if model is not None and model.get("vocab_size", need) < need:
            raise DataError(f"model.vocab_size={model.vocab_size} < {need} MQAR ids (1 + n_keys + n_values); "
                            f"lower data.mqar.n_keys/n_values or set --config.model.vocab_size={need}")
        if split not in SPLITS:
            raise DataError(f"MQAR split {split!r}: choose one of {sorted(SPLITS)}")
        self.seq_len, self.batch_size = int(config.train.seq_len), int(config.train.batch_size)
        for p in opts["n_pairs"]:
            check(self.seq_len, p, opts["n_keys"], opts["n_values"])
        self.split, self.seed, self.opts = split, int(config.data.seed), opts
        self.tokens_read = 0

    def rows(self, step: int, row_ids) -> dict:
        rng = np.random.default_rng([self.seed, SPLITS[self.split], int(step), 0, 1])
        pairs = rng.choice(self.opts["n_pairs"], size=self.batch_size)
        o = self.opts
        full = batch(rng, self.batch_size, self.seq_len, pairs, o["n_keys"], o["n_values"], o["placement"],
                     o["power_a"])
        idx = np.asarray(list(row_ids), np.int64)
        self.tokens_read += idx.size * self.seq_len
        return {k: v[idx] for k, v in full.items()}

    def one_pass(self, num_batches: int) -> list[dict]:
        """Batches 0 .. num_batches - 1 of the split, whole (as RecordRows.one_pass)."""
        return [self.rows(i, range(self.batch_size)) for i in range(num_batches)]

    def state(self, step: int) -> dict:
        return dict(kind="mqar", task="mqar", split=self.split, seed=self.seed, step=int(step))

    def check_state(self, state: dict) -> None:
        mine = self.state(0)
        diff = {k: (state.get(k), mine[k]) for k in ("task", "split", "seed") if state.get(k) != mine[k]}
        if diff:
            raise DataError(f"MQAR iterator state does not match (saved, current): {diff}; resume with "
                            "the same data.seed")
