"""Needle in a haystack: the grid, generated needles, prompts, the judge-free cell score, the sweep.

Two modes (paper §7):
  standard  only the answer sentence is inserted:   "... The pass key for <key> is <value>. ..."
  easy      question and answer are both inserted:
              "... What is the pass key for <key>? The pass key for <key> is <value>. ..."
Both end with the question and the start of the answer, so the model only has to continue with the
number:  "\nWhat is the pass key for <key>? The pass key for <key> is"  -> " <value>."
(Short sentences on purpose: miniature byte-level models have contexts of a few hundred tokens.)
Keys are random pronounceable words, values random 7-digit numbers (seeded per cell), so answers are
checked by exact match and a model cannot know them from training.

Cell score (the paper's 1..10 judge scale, computed without a judge): take the first run of digits in
the generated text; exact match with the value -> 10; otherwise 1 + 9 * m / n with m the number of
leading digits that match (capped at n - 1) and n = 7 -> a miss scores 1, each correct leading digit
adds 9/7. Metrics on the grid are in eval.niah_metrics.

The prompt length counts tokens of the run's vocabulary, needle and question included. The needle is
placed at the sentence boundary of the haystack nearest to depth% of the haystack.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

N_DIGITS = 7
_SYLLABLES = ("ka", "lo", "mi", "ru", "te", "vo", "zan", "bel", "dor", "fin", "gar", "hul", "nis", "pem",
              "sor", "tav")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


ANSWER_TOKENS = 16  # the most a sweep generates after the prompt (the value, its full stop, spare)


def in_context_max(train_len: int) -> int:
    """The longest prompt whose first token (BOS), prompt and generated answer all lie within a
    trained context of train_len tokens."""
    return train_len - 1 - ANSWER_TOKENS


def context_grid(train_len: int, n_lengths: int, n_depths: int, min_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths from min_len to in_context_max(train_len), every prompt and its answer within the
    trained context (where a model can pass: nothing beyond it was trained); ValueError when the
    shortest useful prompt (min_length) does not fit."""
    hi = in_context_max(train_len)
    if min_len > hi:
        raise ValueError(f"the shortest NIAH prompt ({min_len} tokens: needle, question and 32 haystack "
                         f"tokens) and its answer do not fit in the trained context of {train_len} tokens "
                         f"(prompts of at most {hi})")
    return np.unique(np.linspace(min_len, hi, n_lengths).round().astype(int)), np.linspace(0, 100, n_depths)


def scaled_grid(train_len: int, n_lengths: int = 35, n_depths: int = 35,
                min_len: int = 128) -> tuple[np.ndarray, np.ndarray]:
    """The paper's grid rescaled to a training context: 1000/8192 .. 16000/8192 of train_len.

    The shortest length is at least min_len (the needle and question take ~100 byte tokens)."""
    lo = max(min_len, round(train_len * 1000 / 8192))
    hi = max(lo, round(train_len * 16000 / 8192))
    return np.linspace(lo, hi, n_lengths).round().astype(int), np.linspace(0, 100, n_depths)


@dataclass(frozen=True)
class Needle:
    key: str
    value: str  # N_DIGITS decimal digits

    def fact(self) -> str:
        return f"The pass key for {self.key} is {self.value}."

    def question(self) -> str:
        return f"What is the pass key for {self.key}?"

    def inserted(self, mode: str) -> str:
        if mode == "standard":
            return f" {self.fact()} "
        if mode == "easy":
            return f" {self.question()} {self.fact()} "
        raise ValueError(f"NIAH mode must be 'standard' or 'easy', got {mode!r}")

    def suffix(self) -> str:
        return f"\n{self.question()} The pass key for {self.key} is"


def make_needle(rng: np.random.Generator) -> Needle:
    key = "".join(_SYLLABLES[i] for i in rng.integers(0, len(_SYLLABLES), size=2))
    value = str(rng.integers(1, 10)) + "".join(str(d) for d in rng.integers(0, 10, size=N_DIGITS - 1))
    return Needle(key=key, value=value)


def min_length(encode: Callable[[str], list[int]], mode: str) -> int:
    """Shortest useful prompt: the longest possible needle and question plus 32 haystack tokens."""
    longest = max(_SYLLABLES, key=len) * 2
    n = Needle(key=longest, value="9" * N_DIGITS)
    return len(encode(n.inserted(mode))) + len(encode(n.suffix())) + 32


def cell_score(generated: str, value: str) -> float:
    """Judge-free score in [1, 10]: 10 exact, 1 miss, 9/n per correct leading digit otherwise."""
    m = re.search(r"\d+", generated)
    digits = m.group(0) if m else ""
    if digits == value:
        return 10.0
    prefix = 0
    for a, b in zip(digits, value):
        if a != b:
            break
        prefix += 1
    return 1.0 + 9.0 * min(prefix, len(value) - 1) / len(value)


class Haystack:
    """Sentences of a corpus, tokenised once; enough for the longest prompt of a sweep."""

    def __init__(self, documents: Iterable[str], encode: Callable[[str], list[int]], min_tokens: int):
        self.sentences: list[list[int]] = []
        total = 0
        for doc in documents:
            for sent in _SENTENCE_END.split(doc):
                sent = sent.strip()
                if not sent:
                    continue
                toks = list(encode(sent + " "))
                self.sentences.append(toks)
                total += len(toks)
            if total >= min_tokens:
                break
        if total < min_tokens:
            raise ValueError(f"the haystack corpus has only {total} tokens, fewer than the {min_tokens} "
                             "the longest NIAH prompt needs; lower the grid's maximum length or pass "
                             "more documents")

    def build(self, budget: int, depth_pct: float) -> tuple[list[int], int]:
        """First `budget` haystack tokens and the insertion index nearest depth% at a sentence end."""
        tokens, bounds = [], [0]
        for s in self.sentences:
            tokens.extend(s)
            bounds.append(len(tokens))
            if len(tokens) >= budget:
                break
        tokens = tokens[:budget]
        bounds = np.array([b for b in bounds if b <= budget] + [budget])
        target = depth_pct / 100.0 * budget
        return tokens, int(bounds[np.argmin(np.abs(bounds - target))])


def build_prompt(hay: Haystack, needle: Needle, mode: str, length: int, depth_pct: float,
                 encode: Callable[[str], list[int]]) -> list[int]:
    """Token ids of exactly `length` tokens: haystack with the needle at depth%, then the question."""
    ins, suf = list(encode(needle.inserted(mode))), list(encode(needle.suffix()))
    budget = length - len(ins) - len(suf)
    if budget < 1:
        raise ValueError(f"NIAH length {length} is too short for the needle and question "
                         f"({len(ins) + len(suf)} tokens); raise the grid's minimum length")
    tokens, pos = hay.build(budget, depth_pct)
    return tokens[:pos] + ins + tokens[pos:] + suf


def run_sweep(generate: Callable[[list[int], int], list[int]], encode, decode, documents,
              lengths, depths, mode: str = "standard", seed: int = 0, progress=None) -> dict:
    """Score every (length, depth) cell with greedy answers from `generate(prompt_ids, n_new)`.

    Returns {"scores": [l, d] float array, "lengths", "depths", "cells": per-cell records}.
    """
    lengths, depths = [int(x) for x in lengths], [float(x) for x in depths]
    hay = Haystack(documents, encode, max(lengths))
    scores = np.ones((len(lengths), len(depths)))
    cells = []
    for i, n in enumerate(lengths):
        for j, d in enumerate(depths):
            needle = make_needle(np.random.default_rng([seed, i, j]))
            prompt = build_prompt(hay, needle, mode, n, d, encode)
            n_new = len(encode(f" {needle.value}.")) + 2
            text = decode(list(generate(prompt, n_new)))
            scores[i, j] = cell_score(text, needle.value)
            cells.append({"length": n, "depth": d, "value": needle.value, "output": text,
                          "score": scores[i, j]})
            if progress is not None:
                progress(i * len(depths) + j + 1, len(lengths) * len(depths))
    return {"scores": scores, "lengths": lengths, "depths": depths, "cells": cells}
