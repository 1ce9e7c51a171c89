"""The corpus multiple-choice probe, scored through lm-eval: pick the true next line of a document.

Each item: the context is up to `ctx_lines` consecutive lines (of >= MIN_CHARS characters) of a
held-out document, the choices are the true next line and n_choices - 1 lines of similar length
drawn from *other* documents, in a seeded random order; chance is 1 / n_choices. A model that has
learnt the corpus picks the true line. The task is written as jsonl + an lm-eval task yaml
(`linscale_probe`) and scored with lm_eval.simple_evaluate: acc and acc_norm as lm-eval defines them.

    items = build_items(documents, n_items=64)
    write_task(items, out_dir);  run_probe(lm, out_dir) -> {"probe_acc", "probe_acc_norm", "probe_items"}
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from linscale_jax.eval.loading import EvalError

TASK = "linscale_probe"


MIN_CHARS = 12  # shorter lines ("pass", "}") are too easy to guess from the form alone


def _lines(doc: str) -> list[str]:
    return [x.rstrip() for x in doc.split("\n") if len(x.strip()) >= MIN_CHARS]


def build_items(documents, n_items: int = 64, n_choices: int = 4, ctx_lines: int = 3,
                seed: int = 0, max_docs: int = 2000) -> list[dict]:
    """[{"context", "choices", "label"}] from an iterable of document strings (see module doc)."""
    docs = []
    for d in documents:
        lines = _lines(d)
        if len(lines) >= 2:
            docs.append(lines)
        if len(docs) >= max_docs:
            break
    if len(docs) < n_choices:
        raise EvalError(f"the corpus has only {len(docs)} documents with >= 2 lines of >= {MIN_CHARS} "
                        f"characters; the probe needs at least {n_choices}: use a larger corpus")
    rng = np.random.default_rng(seed)
    items = []
    for _ in range(n_items):
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
            "probe_items": n, "probe_chance": 1.0 / len(json.loads(
                (Path(task_dir) / "probe.jsonl").read_text().splitlines()[0])["choices"])}
