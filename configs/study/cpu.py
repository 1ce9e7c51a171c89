"""The default miniature study (the README's main job): 14.5 min on 2 CPU cores, two runs at a time.

    python -m study --config=configs/study/cpu.py --workdir=/tmp/study_cpu
4 archs × 5 ladder sizes d32 d40 d48 d64 d96 (3 layers, 4..12 heads of dim 8; non-embedding N
3.8e4 .. 3.3e5, 0.9 decades; configs/ladder.py says why and what it costs), every size on the
same budget of 2048 steps × 8 × 128 = 2,097,152 byte tokens (55 .. 6 tokens per parameter), 16
checkpoints per run, every 128 steps (16 points per training curve for the envelope; the laws skip
checkpoints inside the 64-step warmup, so no log-spaced early ones).
Constant learning rate after warmup, so intermediate checkpoints are comparable with final ones on
the envelope. At this budget every run is still data-limited (tried on llama: cosine or constant,
8 × 128 or 32 × 128 tokens per step, lr 3e-3 or 1e-2), so the smallest size reaching a compute wins
almost everywhere; the fit therefore keeps the clamped envelope (fit.include_clamped, as the paper
does) and report.md says where the envelope is an optimum and where only a bound.
Estimators and noise (docs/results.md "Loss estimators, verdicts and calibration"): every finding
is judged on val_loss (each checkpoint's own weights on 32 validation batches, the paper's estimator;
the laws and plots use it) and on cooldown branches (10% more steps, 1 − sqrt decay, from steps 512,
1024 and 2048 of every run: +17.5% training steps, no extra compilation); one replicate seed of the
smallest size measures each arch's seed-to-seed sd, which the verdicts' intervals use.
Time: runs train two at a time (workers = 2, one process pinned to each core, study.workers); NIAH
and the corpus probe run on each arch's largest model only (every smaller one was at chance).
"""

from study.presets import study_defaults


def get_config():
    c = study_defaults()
    c.sizes = "d32,d40,d48,d64,d96"
    c.tokens = 2048 * 8 * 128.0
    c.checkpoints = 16
    c.workers = 2  # two runs at once, one per core (study.workers)
    c.overrides.optim.update(lr=3e-3, warmup_steps=64, schedule="constant")
    c.overrides.checkpoint.log_spaced = 0
    c.eval.update(val_batches=32)
    c.eval.final_runs = "largest"  # NIAH + probe at chance below d96 (README); the recall preset
    # measures retrieval with signal
    c.estimators = "val_loss,cooldown"  # the paper's estimator (the laws, plots), and cooldowns beside it
    c.cooldown.update(points=3, fraction=0.1, shape="1-sqrt")  # from steps 512, 1024, 2048: +358 steps
    c.replicates.update(sizes="smallest", seeds=1)  # the seed sd per arch, measured in the study
    c.noise.seed_sd = 0.05  # nats: assumed only for an arch without replicates (study.noise, llama-d32)
    c.fit.include_clamped = True
    return c
