"""python -m linscale_jax.eval.export --workdir=DIR1 --workdir=DIR2 ... --out=table.csv   (or --workdir='runs/*')

One table from the results.jsonl of many runs, one line per (run, step), for fit/:
  arch, run, step, n_params, tokens, flops, loss, flops_exact, then every other metric.
loss = val_loss (the validation task); other tasks' fields are named <task>.<field> (val_loss
task fields keep their names: val_ppl, val_bpb, ...). Steps without a val_loss row have an empty loss.
--workdir is repeatable and each value may be a glob (quote it so the shell leaves it alone).
"""

from __future__ import annotations

import glob
import os
import sys

from linscale_jax.eval.loading import EvalError
from linscale_jax import contract
from linscale_jax.eval.runner import ROW_KEYS, read_results

LEAD = list(contract.TABLE_LEAD)
SKIP = {"task", "eval_seconds", "niah_heatmap", "niah_grid", "niah_mode"}


def collect(workdirs) -> list[dict]:
    table: dict[tuple, dict] = {}
    for wd in workdirs:
        rows = read_results(wd)
        if not rows:
            raise EvalError(f"{wd} has no eval/results.jsonl rows; run python -m linscale_jax.eval --workdir={wd} first")
        for r in rows:
            line = table.setdefault((r["run"], r["step"]), {k: r.get(k) for k in ROW_KEYS})
            for k, v in r.items():
                if k in ROW_KEYS or k in SKIP or isinstance(v, (list, dict)):
                    continue
                if r["task"] == "val_loss":
                    line[contract.TABLE_LOSS if k == "val_loss" else k] = v
                else:
                    line[f"{r['task']}.{k}"] = v
    return [table[k] for k in sorted(table, key=lambda k: (str(k[0]), k[1]))]


def write_csv(lines: list[dict], out: str) -> None:
    contract.write_table_csv(lines, out)


def main(argv=None) -> int:
    """The command: one line on an error (rc 1, traceback to a log), rc 2 on a bad command line."""
    from linscale_jax.run import command

    return command.run(lambda: _main(argv), command="export")


def _main(argv) -> int:
    from linscale_jax.errors import ArgumentParser

    p = ArgumentParser(prog="python -m linscale_jax.eval.export", description=__doc__.split("\n")[0])
    p.add_argument("--workdir", action="append", required=True,
                   help="a run directory or a glob of them (repeatable)")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    dirs = sorted({d for pat in a.workdir for d in (glob.glob(pat) or [pat]) if os.path.isdir(d)})
    if not dirs:
        raise EvalError(f"no run directories match --workdir={' --workdir='.join(a.workdir)}; "
                        "pass existing run directories or a glob that matches some")
    lines = collect(dirs)
    write_csv(lines, a.out)
    print(f"wrote {len(lines)} rows from {len(dirs)} run(s) to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
