"""The recall study rendered: DIR/recall.png (accuracy against state floats per layer) and the
"Recall (MQAR)" section of DIR/report.md, from the rows of study.recall.table and the rates file.

    plot(rows, study, DIR + "/recall.png")
    update_report(DIR + "/report.md", report_section(rows, study, rates))
"""

from __future__ import annotations

import os
import re

import numpy as np

from linscale_jax import palette
from linscale_jax.contract import split_list
from linscale_jax.study.recall.table import CONTROL_ACCURACY, Status, control, control_sentence

SECTION = "## Recall (MQAR)"
STATUS_WORDS = {Status.DID_NOT_TRAIN: "did not train", Status.COPY_LEVEL: "copy level", Status.RECALL: "recall"}


def plot(rows: list[dict], study, path: str) -> None:
    """Accuracy (seed mean, interval incl. the seed spread) against state floats per layer, one
    panel per number of pairs; the arch's colour (linscale_jax.palette), solid for the paper's mixer
    and dashed for a variant (e.g. +short_conv=4); filled markers: recall results, hollow: copy level, crosses: did
    not train. Where the usable state differs (TNL's decayed heads), a dotted line at the usable state."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = [r for r in rows if r["seed"] == "all"]
    pairs = sorted({r["n_pairs"] for r in cells})
    labels = list(dict.fromkeys(r["arch"] for r in cells))
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.2 * len(pairs), 4.2), squeeze=False, sharey=True)
    for ax, p in zip(axes[0], pairs):
        for label in labels:
            mine = sorted((r for r in cells if r["arch"] == label and r["n_pairs"] == p),
                          key=lambda r: r["state_floats"])
            if not mine:
                continue
            c, ls = palette.color(label), palette.linestyle(label)
            x = np.array([r["state_floats"] for r in mine])
            y = np.array([r["accuracy"] for r in mine])
            err = np.array([y - [r["ci_low"] for r in mine], [r["ci_high"] for r in mine] - y])
            ax.errorbar(x, y, yerr=err, color=c, ls=ls, lw=1.2, capsize=2, label=label)
            for r in mine:
                face = c if r["status"] == Status.RECALL else "white"
                marker = "x" if r["status"] == Status.DID_NOT_TRAIN else "o"
                style = dict(edgecolors=c, facecolors=face) if marker == "o" else dict(color=c)
                ax.scatter([r["state_floats"]], [r["accuracy"]], marker=marker, s=28, zorder=3, **style)
            usable = np.array([r["usable_state_floats"] for r in mine])
            if np.any(usable != x):
                ax.plot(usable, y, color=c, ls=":", lw=1, marker="o", ms=3, mfc="white",
                        label=f"{label} at its usable state")
        ax.axhline(1 / int(study.n_values), color="grey", lw=0.8, ls=":")
        ax.axhline(1 / p, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_title(f"{p} key-value pairs (dashed grey: copy level 1/{p}; dotted: chance)", fontsize=9)
        ax.set_xlabel("state floats per layer")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MQAR accuracy (seed mean, 95%)")
    axes[0][-1].legend(fontsize=6.5, loc="best")
    fig.suptitle("filled: recall result; hollow: copy level; x: did not train", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cell(r: dict) -> str:
    if r["status"] == Status.DID_NOT_TRAIN:
        return "did not train"
    return f"{r['accuracy']:.3f} [{r['ci_low']:.3f}, {r['ci_high']:.3f}] {STATUS_WORDS[r['status']]}"


def cell_table(rows: list[dict], n_pairs: list[str]) -> list[str]:
    """The markdown table of the seed "all" rows: one line per (arch label, shape)."""
    cells = [r for r in rows if r["seed"] == "all"]
    lines = ["| arch | d | head dim | state floats/layer (usable) | lr | "
             + " | ".join(f"P={p}" for p in n_pairs) + " | steps |",
             "|---|---|---|---|---|" + "---|" * len(n_pairs) + "---|"]
    for key in dict.fromkeys((r["arch"], r["d_model"], r["head_dim"]) for r in cells):
        mine = [r for r in cells if (r["arch"], r["d_model"], r["head_dim"]) == key]
        s, u = mine[0]["state_floats"], mine[0]["usable_state_floats"]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {s:,}" + (f" ({u:,})" if u != s else "")
                     + f" | {mine[0]['lr']:g} | " + " | ".join(_cell(r) for r in mine) + f" | {mine[0]['steps']} |")
    return lines


def sweep_table(rates: dict) -> list[str]:
    """The rates file's sweep: validation accuracy (the step it was read at; the run's final
    accuracy and steps where it trained on) per arch label and rate, the chosen one bold."""
    lrs = sorted({float(lr) for d in rates["sweep"].values() for lr in d})
    lines = ["| arch | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | chosen |",
             "|---|" + "---|" * (len(lrs) + 1)]
    for label, accs in rates["sweep"].items():
        chosen = float(rates["rates"][label])
        vals = []
        for lr in lrs:
            v, n = accs.get(f"{lr:g}"), rates.get("steps", {}).get(label, {}).get(f"{lr:g}")
            end, steps = rates.get("final", {}).get(label, {}).get(f"{lr:g}") or (None, n)
            text = "-" if v is None else (f"{v:.3f}" + (f" ({n}" if n else "")
                                          + (f"; {end:.3f} at {steps}" if n and steps != n else "")
                                          + (")" if n else ""))
            vals.append(f"**{text}**" if lr == chosen else text)
        lines.append(f"| {label} | " + " | ".join(vals) + f" | {chosen:g} |")
    return lines


def steps_phrase(study) -> str:
    """How many steps the runs train: the sweep's sweep_steps for every label, else max_steps and
    the positive control's baseline_max_steps."""
    if int(study.get("sweep_steps") or 0):
        return f"{study.sweep_steps} steps for every label"
    return (f"at most {study.max_steps} steps (LLaMA, the positive control: "
            f"{study.get('baseline_max_steps') or study.max_steps})")


def summary(csv_path: str) -> list[str]:
    """The section's first lines, its answer: finding 3's verdict on this study (the baseline minus
    each linear arch where the positive control passed, rows labelled "Δ llama − tnl"), or "not
    measured" with the reason in one line, and the cells left out (scaling.findings.retrieval on
    recall.verdict_input)."""
    from linscale_jax.study.recall.table import verdict_input
    from linscale_jax.study.scaling import findings

    verdict, lines = findings.retrieval(verdict_input(csv_path), "this study")
    title = dict(findings.TITLES)["retrieval"]
    return [f"**Summary ({title}): {verdict.replace('**', '')}.**", "", *lines, ""]


def model_phrase(study) -> str:
    """'(every label with init_std=0.04) ' for study.model_changes, '' without."""
    text = str(study.get("model_changes", "") or "").strip()
    return f"(every label with {text}) " if text else ""


def report_section(rows: list[dict], study, rates: dict | None, csv_path: str | None = None) -> str:
    """The report's recall section: its answer (summary, from the recall.csv at csv_path), the
    protocol, the plot, the cell table, the control, the sweep."""
    ctl = control(rows)
    n_pairs = split_list(study.n_pairs, "study.n_pairs")
    lines = [SECTION, "", *(summary(csv_path) if csv_path else []),
             f"Multi-query associative recall (Arora et al. 2023, Zoology): {study.n_layers}-layer models "
             f"{model_phrase(study)}trained on MQAR sequences of {study.seq_len} tokens with {{{study.n_pairs}}} key-value "
             f"pairs (distinct keys and values, {study.n_keys} keys, {study.n_values} values, "
             f"{study.placement} query placement), through the trainer's AdamW step ({study.schedule} "
             f"schedule, {study.warmup_steps} warmup steps, weight decay {study.weight_decay}), batch "
             f"{study.batch_size}, {steps_phrase(study)}, stopping once the validation "
             f"accuracy reaches {study.stop_accuracy}; seeds {study.seeds}; scored on "
             f"{study.eval_sequences} test sequences per number of pairs. Accuracy is the seed mean; "
             f"its interval spans the seeds' 95 % Wilson intervals. Status: 'did not train' = test "
             f"loss within {study.dnt_margin} nats of ln {study.n_values}; 'copy level' = the interval "
             f"reaches down to 1/pairs (copying a stored value without its key); otherwise a recall "
             f"result. An arch '<arch>+short_conv=4' is the paper's mixer with a causal depthwise "
             f"convolution of width 4 on q, k and v (fla's use_short_conv); the paper's mixers have "
             f"none; '<arch>+hybrid=3:1' stacks three <arch> layers, then one LLaMA layer, per period "
             f"of four. State floats per layer: the decoding state (ArchSpec.state_floats; the "
             f"convolution's last 3 inputs included; a softmax layer's KV cache at {study.seq_len} "
             f"tokens; a hybrid's the mean over its layers); usable: the heads whose decay keeps a "
             f"memory of the whole context (TNL's paper rule decays all but one head per layer within "
             f"a few tokens).", "", "![MQAR accuracy against state size](recall.png)", "",
             *cell_table(rows, n_pairs), "", control_sentence(ctl), ""]
    if rates:
        lines += [f"Learning rates from the sweep at {rates['shape']} (`{rates['command']}`; "
                  f"{rates['machine']}; each run trained {rates['settings'].get('sweep_steps', '')} "
                  f"steps; validation accuracy after the preset's steps for the label, with the step "
                  f"it was read at (an earlier one: the run stopped early), the chosen rate bold: the "
                  f"best accuracy counted up to the early stop's {study.stop_accuracy}, ties to the "
                  f"fewer steps):", "", *sweep_table(rates), ""]
    return "\n".join(lines)


def update_report(path: str, section: str) -> None:
    """Write `section` into report.md, replacing an earlier recall section, keeping the rest."""
    text = open(path).read() if os.path.exists(path) else ""
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = (text.rstrip() + "\n\n" if text.strip() else "") + section + "\n"
    with open(path, "w") as f:
        f.write(text)
