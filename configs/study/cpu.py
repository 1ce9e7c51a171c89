"""The default miniature study (the README's main job), two runs at a time on 2 CPU cores.

    python -m study --config=configs/study/cpu.py --workdir=/tmp/study_cpu
4 archs × 4 ladder sizes d32 d48 d64 d80 (4 layers, head dim 16, 2..5 heads; non-embedding N
5.0e4 .. 3.2e5, 0.8 decades; configs/ladder.py says why), every size on the same budget of
1536 steps × 8 × 128 = 1,572,864 byte tokens (31 .. 5 tokens per parameter), 12 checkpoints per
run, every 128 steps (the laws skip checkpoints inside the 64-step warmup, so no log-spaced ones).
Budget arithmetic (CPU time; one training step of batch 8 × 128 on one core, XLA single-threaded,
`bench/train_step.py --clock=cpu`; docs/results.md "Ladder step costs"): a step costs a + b·(GFLOP per
step) per arch, fitted to the measured steps (llama d48/d64/d96 16/23/40 ms, hgrn2 27/37/73 ms; tnl
and cosformer2 taken midway): one step of each of the 16 runs sums to about 477 ms. Train steps
about 18.8 CPU-minutes for 1536 steps, eval about 3.1 for 12 checkpoints, compile about 5.5, the
rest 0.4: about 28 CPU-minutes, 14 minutes wall on 2 workers.
d96 is on the ladder but not here: at 4 layers it would add about 12 CPU-minutes, and trained beside d80 on
4M tokens it stayed 0.08-0.10 nats above d80 at every token count (llama, lr 3e-3).
Constant learning rate after warmup, so intermediate checkpoints are comparable with final ones on
the envelope (and a shorter budget is a prefix of a longer run). At this budget every run is still
data-limited: the envelope sawtooths, each larger size reaching a smaller one's final compute above
its final loss, and no envelope point is interior (measured on llama up to 2.6M tokens per size,
docs/results.md "Ladder step costs and the token budget"); the fit therefore keeps the clamped
envelope (fit.include_clamped, as the paper does) and report.md gives the share of envelope points
that are interior, i.e. an optimum and not a bound.
Estimators and noise (docs/results.md "Loss estimators, verdicts and calibration"): every finding
is judged on val_loss (each checkpoint's own weights on 32 validation batches, the paper's estimator;
the laws and plots use it) and on cooldown branches (10% more steps, 1 − sqrt decay, from steps 384,
768 and 1536 of every run: +17.5% training steps, no extra compilation); one replicate seed of the
smallest size measures each arch's seed-to-seed sd, which the verdicts' intervals use.
Time: runs train two at a time (workers = 2, one process pinned to each core, study.workers); NIAH
and the corpus probe run on each arch's largest model only (every smaller one was at chance).
cosFormer2's verdict without its TPE: configs/study/tpe.py.
"""

from study.presets import study_defaults


def get_config():
    c = study_defaults()
    c.sizes = "d32,d48,d64,d80"
    c.tokens = 1536 * 8 * 128.0
    c.checkpoints = 12
    c.workers = 2  # two runs at once, one per core (study.workers)
    c.overrides.optim.update(lr=3e-3, warmup_steps=64, schedule="constant")
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=32)
    c.eval.final_runs = "largest"  # NIAH + probe at chance below the largest size; the recall preset
    # measures retrieval with signal
    c.estimators = "val_loss,cooldown"  # the paper's estimator (the laws, plots), and cooldowns beside it
    c.cooldown.update(points=3, fraction=0.1, shape="1-sqrt")  # from steps 384, 768, 1536: +269 steps
    c.replicates.update(sizes="smallest", seeds=1)  # the seed sd per arch, measured in the study
    c.noise.seed_sd = 0.05  # nats: assumed only for an arch without replicates (study.noise, llama-d32)
    c.fit.include_clamped = True
    return c
