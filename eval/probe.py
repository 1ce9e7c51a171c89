"""A small multiple-choice probe built from the run's own corpus, scored through lm-eval.

Each item: a context of ~ctx_chars characters cut from a held-out document (ending at a word
boundary); choices = the true next ~cont_chars characters and n_choices - 1 spans of the same size
from other documents, in a seeded random order. A model that has learnt the corpus picks the true
continuation; chance is 1 / n_choices. The task is written as jsonl + an lm-eval task yaml
(`linscale_probe`) and scored with lm_eval.simple_evaluate: acc and acc_norm as lm-eval defines them.

    items = build_items(documents, n_items=64)
    write_task(items, out_dir);  run_probe(lm, out_dir) -> {"probe_acc", "probe_acc_norm", "probe_items"}
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from eval.loading import EvalError

TASK = "linscale_probe"


def _span(doc: str, start: int, n: int) -> str:
    """doc[start:start+~n] cut back to the last space (whole words), at least one word."""
    s = doc[start:start + n]
    cut = s.rfind(" ")
    return s[:cut] if cut > 0 else s


def build_items(documents, n_items: int = 64, n_choices: int = 4, ctx_chars: int = 96,
                cont_chars: int = 32, seed: int = 0) -> list[dict]:
    need = ctx_chars + cont_chars + 2
    docs = []
    for d in documents:
        d = " ".join(d.split())
        if len(d) >= need:
            docs.append(d)
        if len(docs) >= 4 * n_items:
            break
    if len(docs) < max(n_choices, 2):
        raise EvalError(f"the corpus has only {len(docs)} documents of >= {need} characters; the probe "
                        f"needs at least {n_choices}")
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n_items):
        j = i % len(docs)
        d = docs[j]
        p = d.find(" ", int(rng.integers(ctx_chars, len(d) - cont_chars - 1)))
        if p < 0 or p + 1 >= len(d):
            p = ctx_chars
        context = d[max(0, p - ctx_chars):p]
        context = context[context.find(" ") + 1:] if " " in context else context
        choices = [_span(d, p + 1, cont_chars)]
        others = [k for k in rng.permutation(len(docs)) if k != j][:n_choices - 1]
        for k in others:
            o = docs[k]
            q = o.find(" ", int(rng.integers(0, len(o) - cont_chars - 1)))
            choices.append(_span(o, q + 1, cont_chars))
        order = rng.permutation(n_choices)
        items.append({"context": context, "choices": [choices[o] for o in order],
                      "label": int(np.argmax(order == 0))})
    return items


def write_task(items: list[dict], out_dir) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "probe.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")
    (out / f"{TASK}.yaml").write_text(f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {json.dumps(str(data.absolute()))}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
""")
    return out


def run_probe(lm, task_dir) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    res = lm_eval.simple_evaluate(model=lm, tasks=[TASK], torch_random_seed=None, task_manager=TaskManager(
        include_path=str(task_dir), include_defaults=False))["results"][TASK]
    n = sum(1 for _ in open(Path(task_dir) / "probe.jsonl"))
    return {"probe_acc": float(res["acc,none"]), "probe_acc_norm": float(res["acc_norm,none"]),
            "probe_items": n}
