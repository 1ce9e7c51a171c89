"""Shared defaults of the study presets of the scaling and tune kinds (configs/study/{quick,cpu,paper,tune}.py):
a ConfigDict `study`.

Fields: kind (study.experiments.Kind: what the preset runs; every preset declares it), model_file,
archs (the paper's four, registry.paper_archs(), by default; an arch beyond the paper such as gdn
by name; a variant label such as cosformer2+tpe=none or tnl+hybrid=3:1
runs an architecture with changed model fields as one more arch), sizes, tokens (training tokens
per run, the same for every size), tokens_by_size (a size's own budget instead, "d32l2=12582912,...":
study.scaling.plan.tokens_of),
checkpoints (dense checkpoints per run; plus checkpoint.log_spaced early ones), workers (runs
trained at once, each in its own process pinned to its share of the CPU cores: study.workers),
overrides (nested run-config sections applied to every run), eval (what is evaluated),
estimators (the loss estimators the findings are judged under; the first is the laws' and plots'),
cooldown (the cooldown branches of the `cooldown` estimator: study.cooldown), replicates (extra
seeds of some sizes: the seed-to-seed sd the intervals use), verdicts (the equivalence margin and
the held-out tolerance: study.verdicts), recall_from (a recall study's workdir whose recall.csv the
findings section reads), protocol_from (a finished study under the other learning-rate protocol,
whose findings.json every finding is also judged by), noise (seed_sd: assumed for archs without
replicates; prior: other studies' seed sd of the same design, study.scaling.seed_prior), fit (how
laws are fitted), cluster (what each run asks of a Ray cluster under --backend=ray:
study.ray_backend).
"""

import ml_collections

from linscale_jax.models import registry

def preset(name: str) -> ml_collections.ConfigDict:
    """The study config of the packaged preset `name` (linscale_jax/configs/study/<name>.py) or of a
    preset file: a preset built on another (cpu_paper, tpe on cpu)."""
    from linscale_jax.run import config_file

    return config_file.load(name, folder="study")


def study_defaults(kind: str) -> ml_collections.ConfigDict:
    """The shared fields, for a preset of `kind` (a study.experiments.Kind value)."""
    from linscale_jax.study.experiments import Kind

    return ml_collections.ConfigDict(dict(
        kind=str(Kind(kind)),
        model_file="ladder",  # a packaged config (linscale_jax/configs/<name>.py) or a path
        archs=",".join(registry.paper_archs()),  # the paper's four; others (gdn) by name;
        # an entry may be a variant label '<arch>+<model field>=<value>' (sizes.split_variant)
        sizes="d64,d96,d128,d192,d256",
        tokens=1.0e6,  # float: paper-scale budgets exceed int32 ConfigDict fields
        tokens_by_size="",  # "size=tokens,...": those sizes' budgets instead of tokens (plan.tokens_of)
        checkpoints=10,
        workers=1,  # runs trained at once in pinned single-core processes (study.workers; CPU only)
        recall_from="",  # a recall study's workdir (configs/study/recall.py): the report's finding 3
        protocol_from="",  # a finished study of the other learning-rate protocol: every finding judged
        # under both (study.results)
        overrides=dict(
            train=dict(batch_size=8, seq_len=128, log_every=10, eval_every=0,
                       seed=0),  # init seed: a replicate study is --config.overrides.train.seed=1
            # lr, batch, b2, warmup per arch and size from the tuned rule (linscale_jax.train.rule;
            # rule="paper": optim.lr for every size, as the paper)
            optim=dict(lr=3e-3, warmup_steps=20, schedule="cosine", rule="tuned"),
            checkpoint=dict(log_spaced=4, async_save=False),
        ),
        eval=dict(val_batches=2, niah_grid="4x4", niah_task="niah", probe_items=32,
                  final_runs="all"),  # NIAH + probe on the final checkpoint of: all | largest
        # comma list of: val_loss (each checkpoint's own weights: the paper's), cooldown (a short
        # learning-rate cooldown branched off a few checkpoints per run), val_loss_avg (the mean
        # weights of the last quarter of the checkpoints, LAWA). The first is the laws' and plots'.
        estimators="val_loss",
        cooldown=dict(points=3, fraction=0.1, shape="1-sqrt"),  # branches: last checkpoint, 1/2, 1/4
        replicates=dict(sizes="", seeds=0),  # e.g. sizes="smallest,largest", seeds=1
        verdicts=dict(margin=0.05,  # nats: equivalent when the 90% interval is inside ±margin (TOST)
                      tolerance=0.1),  # nats: the held-out largest size's error allowed (finding 1)
        # seed_sd, nats: assumed when no arch has replicates; prior: other studies' measured seed sd
        # of this design (a packaged name or a file: study.scaling.seed_prior), pooled with the own
        noise=dict(seed_sd=0.0, prior=""),
        fit=dict(approach=1, bootstrap=200, include_clamped=False, seed=0,
                 count="non_embedding"),  # N of the backtest's laws: non_embedding (as the paper) | total
        # (with the embedding and head); the laws size by size are reported in both counts
        # --backend=ray: the resources of one run (study.ray_backend.placement)
        cluster=dict(accelerator="cpu",  # cpu | gpu | tpu
                     hosts=1,  # processes (hosts) per run; > 1 is a gang, one task per host
                     devices_per_host=0,  # cpu: simulated devices; gpu: GPUs; tpu: chips (0: 1; tpu: 4)
                     cpus_per_host=1,  # CPU cores each host task reserves (1: single-threaded XLA)
                     tpu_topology="", tpu_version="",  # a multi-host slice, e.g. "4x4" and "v6e"
                     max_retries=3,  # resubmissions after a lost worker, node or slice
                     host_timeout_s=120),  # a started host silent this long is lost (ray_backend.gang)
    ))
