"""Learning rates per arch label for the recall preset, chosen by the sweep and shipped as package
data with their provenance (linscale_jax/configs/study/recall_rates.json, the bare name recall_rates).

    python -m linscale_jax.study --config=recall_sweep --workdir=DIR     # writes DIR/recall_rates.json
    cp DIR/recall_rates.json linscale_jax/configs/study/recall_rates.json   # what the preset reads
    rate("recall_rates", "tnl+short_conv=4")                             # -> the chosen lr

The file (JSON): rates {label: lr} (study.recall.table.best_lr: the best mean validation accuracy
over the seeds after the preset's steps for the label, counted up to the early stop's target, ties to
the fewer steps), shape (the one shape swept), sweep {label: {lr: validation accuracy after the
preset's steps}}, steps {label: {lr: the step it was read at}}, final {label: {lr: [validation
accuracy, steps] at the end of the sweep's run}}, test {label: {lr: {n_pairs: test accuracy at the
end}}}, status {label: {lr: run status}}, settings (the task and training fields the rates hold
for), command, machine and run_seconds (the runs' summed wall seconds).
"""

from __future__ import annotations

import json
import os
import platform
import sys

# the sweep fields a rate depends on (recorded in the file's settings)
SETTINGS = ("n_layers", "n_pairs", "n_keys", "n_values", "placement", "power_a", "seq_len", "batch_size",
            "max_steps", "baseline_max_steps", "sweep_steps", "model_changes", "warmup_steps", "schedule", "weight_decay", "eval_every", "val_sequences",
            "stop_accuracy", "seeds")


def read(path: str) -> dict:
    """The rates file `path` names: a packaged one (a bare name: recall_rates, the preset's) or a path."""
    from linscale_jax.run import config_file

    try:
        with open(config_file.resolve(path, "study", ".json")) as f:
            return json.load(f)
    except OSError:
        sweep = f"{path[:-len('_rates')]}_sweep" if path.endswith("_rates") else "recall_sweep"  # its preset's sweep
        raise FileNotFoundError(f"recall rates file {path!r} not found; run `python -m linscale_jax.study "
                                f"--config={sweep} --workdir=DIR` and pass "
                                "--config.rates=DIR/recall_rates.json, or give --config.lr") from None


def rate(path: str, label: str) -> float:
    """The chosen learning rate of `label` in the rates file at `path`."""
    rates = read(path)["rates"]
    if label not in rates:
        raise ValueError(f"{path} has no rate for {label!r} (it has {sorted(rates)}); add {label} to "
                         "the sweep's archs and run it, or give --config.lr")
    return float(rates[label])


def is_sweep(runs: list) -> bool:
    """True when some (arch, shape) runs at more than one rate."""
    seen = {}
    for r in runs:
        seen.setdefault((r.arch, r.d_model, r.head_dim), set()).add(r.lr)
    return any(len(v) > 1 for v in seen.values())


def record(runs: list, results: dict, chosen: dict, study, at=lambda label: None) -> dict:
    """The rates file's content from a sweep's runs and results; chosen: table.best_lr(..., at)."""
    from linscale_jax.study.recall.table import accuracy_at

    shapes = sorted({f"d{r.d_model}e{r.head_dim}" for r in runs})
    sweep, steps, final, test, status = {}, {}, {}, {}, {}
    for r in runs:
        res, key = results[r.name], f"{r.lr:g}"
        acc, step = accuracy_at(res, at(r.arch))
        sweep.setdefault(r.arch, {}).setdefault(key, []).append(acc)
        steps.setdefault(r.arch, {}).setdefault(key, []).append(step)
        final.setdefault(r.arch, {}).setdefault(key, []).append((res["val_accuracy"], res["steps"]))
        t = test.setdefault(r.arch, {}).setdefault(key, {})
        for p, c in res["per_pairs"].items():
            t.setdefault(p, []).append(c["correct"] / max(c["queries"], 1))
        status.setdefault(r.arch, {}).setdefault(key, []).append(res["status"])
    mean = lambda xs: round(sum(xs) / len(xs), 4)  # noqa: E731
    import jax

    return dict(
        rates={arch: lr for (arch, _, _), lr in chosen.items()},
        shape=",".join(shapes),
        sweep={a: {lr: mean(v) for lr, v in d.items()} for a, d in sweep.items()},
        steps={a: {lr: round(mean(v)) for lr, v in d.items()} for a, d in steps.items()},
        final={a: {lr: [mean([x for x, _ in v]), round(mean([n for _, n in v]))] for lr, v in d.items()}
               for a, d in final.items()},
        test={a: {lr: {p: mean(v) for p, v in t.items()} for lr, t in d.items()} for a, d in test.items()},
        status={a: {lr: "/".join(sorted(set(v))) for lr, v in d.items()} for a, d in status.items()},
        settings={k: str(study.get(k, "")) for k in SETTINGS},
        command=" ".join(["python", "-m", "linscale_jax.study"] + sys.argv[1:]),
        machine=f"{os.cpu_count()} CPU cores ({platform.machine()}, {platform.processor() or 'cpu'}), "
                f"jax {jax.__version__} on {jax.default_backend()}",
        run_seconds=round(sum(results[r.name]["seconds"] for r in runs)),
    )


def write(path: str, rec: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
