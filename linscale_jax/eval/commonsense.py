"""The paper's lm-eval task groups and the metric each task reports (paper §7), and their averages.

    out = run_group(lm, "commonsense")  -> {"boolq_acc": .., ..., "commonsense_avg": ..}
Task-group configs live in linscale_jax/eval/tasks/ (linscale_commonsense, linscale_scrolls). The datasets come
from the Hugging Face hub through lm-eval (downloaded once into the HF cache; nothing here downloads
in tests). Offline without a cache, run_group raises EvalError saying so.
"""

from __future__ import annotations

import importlib.resources

from linscale_jax.eval.loading import EvalError

TASKS_DIR = str(importlib.resources.files("linscale_jax.eval").joinpath("tasks"))  # package data

COMMONSENSE_METRICS = {
    "boolq": ["acc"], "piqa": ["acc"], "hellaswag": ["acc_norm"], "winogrande": ["acc"],
    "arc_easy": ["acc"], "arc_challenge": ["acc_norm"], "openbookqa": ["acc_norm"],
}
SCROLLS_METRICS = {
    "scrolls_govreport": ["rouge1", "rouge2", "rougeL"],
    "scrolls_summscreenfd": ["rouge1", "rouge2", "rougeL"],
    "scrolls_qmsum": ["rouge1", "rouge2", "rougeL"],
    "scrolls_qasper": ["f1"], "scrolls_narrativeqa": ["f1"],
    "scrolls_quality": ["em"], "scrolls_contractnli": ["em"],
}
GROUPS = {"commonsense": ("linscale_commonsense", COMMONSENSE_METRICS),
          "scrolls": ("linscale_scrolls", SCROLLS_METRICS)}


def paper_average(results: dict, metrics: dict) -> dict:
    """lm-eval `results["results"]` -> {"<task>_<metric>": value, ..., "avg": mean of them all}."""
    out = {}
    for task, names in metrics.items():
        if task not in results:
            raise EvalError(f"lm-eval results have no task {task!r}; got {sorted(results)}")
        for m in names:
            key = f"{m},none"
            if key not in results[task]:
                raise EvalError(f"lm-eval results for {task} have no metric {m!r}")
            out[f"{task}_{m}"] = float(results[task][key])
    out["avg"] = sum(out.values()) / len(out)
    return out


def run_group(lm, name: str, limit: int | None = None) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager

    group, metrics = GROUPS[name]
    try:
        res = lm_eval.simple_evaluate(model=lm, tasks=[group], limit=limit, torch_random_seed=None,
                                      task_manager=TaskManager(include_path=TASKS_DIR))
    except Exception as e:  # noqa: BLE001 - datasets missing offline surface as many error types
        raise EvalError(f"lm-eval could not run {group} ({type(e).__name__}: {str(e)[:300]}). Its datasets "
                        "come from the Hugging Face hub: run once with network access (they are cached "
                        "in ~/.cache/huggingface) or set HF_DATASETS_CACHE to a prepared cache.") from e
    out = paper_average(res["results"], metrics)
    out[f"{name}_avg"] = out.pop("avg")
    return out
