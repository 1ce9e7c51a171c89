"""The study's retrieval-free multiple-choice probe: pick the true next line of a corpus document.

Each item: the context is up to `ctx_lines` consecutive non-blank lines of a document (for the
embedded stdlib corpus: Python source), the choices are the true next line and n_choices - 1
lines of similar length drawn from *other* documents, in a seeded random order; chance is
1 / n_choices. Items come from the validation split first (held out from training), then train.
Scored through lm-eval as a local multiple-choice task (eval.probe.write_task / run_probe give the
yaml + jsonl and acc / acc_norm), registered as eval task `line_probe` by `register()`.

    items = build_items(documents, n_items=32)   -> [{"context", "choices", "label"}]
"""

from __future__ import annotations

import numpy as np

TASK_NAME = "line_probe"
MIN_CHARS = 12  # shorter lines ("pass", "}") are too easy to guess from the form alone


def _lines(doc: str) -> list[str]:
    return [x.rstrip() for x in doc.split("\n") if len(x.strip()) >= MIN_CHARS]


def build_items(documents, n_items: int = 32, n_choices: int = 4, ctx_lines: int = 3,
                seed: int = 0, max_docs: int = 2000) -> list[dict]:
    docs = []
    for d in documents:
        lines = _lines(d)
        if len(lines) >= 2:
            docs.append(lines)
        if len(docs) >= max_docs:
            break
    if len(docs) < n_choices:
        raise ValueError(f"the corpus has only {len(docs)} documents with >= 2 lines of >= {MIN_CHARS} "
                         f"characters; the line probe needs at least {n_choices}")
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n_items):
        j = int(rng.integers(len(docs)))
        lines = docs[j]
        p = int(rng.integers(1, len(lines)))
        context = "\n".join(lines[max(0, p - ctx_lines):p]) + "\n"
        true = lines[p]
        choices = [true]
        while len(choices) < n_choices:  # distractors: other documents, similar length
            k = int(rng.integers(len(docs)))
            if k == j:
                continue
            cands = sorted(docs[k], key=lambda s: abs(len(s) - len(true)))
            pick = next((c for c in cands if c not in choices), None)
            if pick is not None:
                choices.append(pick)
        order = rng.permutation(n_choices)
        items.append({"context": context, "choices": [choices[o] for o in order],
                      "label": int(np.argmax(order == 0))})
    return items


def line_probe(run, ctx) -> dict:
    """eval task: build items from the run's corpus, score them through lm-eval."""
    import itertools

    from eval import probe as ev_probe
    from eval.lm_backend import LinscaleLM
    from linscale_jax import data

    docs = itertools.chain(data.corpus_documents(run.config.data, "validation"),
                           data.corpus_documents(run.config.data, "train"))
    items = build_items(docs, n_items=ctx.probe_items, seed=0)
    lm = LinscaleLM(model=run.model, vocab=run.vocab, max_length=int(run.config.train.seq_len))
    out = ev_probe.run_probe(lm, ev_probe.write_task(items, ctx.out_dir("line_probe")))
    return {"acc": out["probe_acc"], "acc_norm": out["probe_acc_norm"], "items": out["probe_items"],
            "chance": 1.0 / len(items[0]["choices"])}


def register() -> None:
    """Add `line_probe` to eval's task table (eval.suite.TASKS) so eval.runner can run it."""
    from eval import suite

    suite.TASKS.setdefault(TASK_NAME, line_probe)
