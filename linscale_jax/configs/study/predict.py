"""A prediction beyond a finished scaling study's ladder (study.predict): per arch, N_opt and the
law's loss at compute_factor × the ladder's largest run, with 95% intervals; then N_opt and one size
on each side trained at that compute under the ladder's protocol, predicted against actual.

    python -m linscale_jax.study --config=configs/study/predict.py --workdir=P --config.ladder_from=DIR
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --config.archs=llama
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --dry_run  # the prediction and its chance, no training
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --config.rungs=optimum  # N_opt alone
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --join_only  # report what is trained
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --config.estimator=cooldown
    python -m linscale_jax.study --config=predict --workdir=P --config.ladder_from=DIR --config.seeds=2  # each rung at 2 seeds

Writes P/predictions.json (before anything trains), P/prediction.csv, P/prediction.png and
P/report.md. Cost: three runs per arch, each about compute_factor times the ladder's largest run
(docs/study.md, "A prediction beyond the ladder"). An arch added later (--config.archs) is predicted
and appended; the archs predicted before are read back. rungs=optimum trains N_opt alone: its loss is
checked, whether it wins is not measured; --config.rungs=<arch>-<size>,... trains those alone.
form picks the law (auto: per arch, approach 3's additive form or Kaplan's joint form, the one that
misses the ladder's own sizes least; docs/study.md). seeds=k trains each rung at k init seeds (the ladder's train.seed + 0..k-1) and checks their mean
against an interval for a mean of k runs: a single run's seed offset (the ladder's seed sd) is about
half the target, so one seed can miss or meet it by chance; k seeds cost k times the training.
"""

import ml_collections


def get_config():
    return ml_collections.ConfigDict(dict(
        kind="predict",
        ladder_from="",  # DIR: the finished scaling study whose laws predict
        ladder_preset="cpu",  # the preset (packaged name or file) that ran DIR: the rungs train under it
        # the replicate seeds the laws rest on: each named size of the ladder with at least `seeds` replicate
        # seeds; what the ladder lacks is trained in P/ladder first (the ladder's preset with these replicates
        # added: sizes the union, seeds the larger) and the laws are that completed ladder's. The main job
        # repeats d96l2 alone; its laws' refits at 4x spread less with d64l2 and d80l2 repeated too (8 runs,
        # docs/results.md "A prediction 4x beyond"). sizes="": the ladder as it is.
        replicates=ml_collections.ConfigDict(dict(sizes="d64l2,d80l2,d96l2", seeds=1)),
        estimator="",  # "": the ladder's laws' estimator (its first); or another of its estimators (e.g. cooldown):
        # the laws of that estimator's fit table predict, and the rungs' actual loss is measured under it
        archs="",  # "": every arch of the ladder; or a comma list of them
        compute_factor=4.0,  # C = this × the ladder's largest run (Table-1 FLOPs)
        rungs="all",  # which rungs train: all (N_opt and a neighbour on each side), optimum (N_opt alone) or a
        # comma list of rung names (<arch>-<size>, as --dry_run lists them)
        rule="extrapolate",  # a rung outside the learning-rate rule's sizes: extrapolate its laws, or as_given (refuse)
        seeds=1,  # init seeds per rung: its actual is their mean, its interval one for a mean of that many runs
        form="auto",  # the law per arch: additive (E + A/N^α + B/D^β), kaplan (E + ((A/N)^(α/β) + B/D)^β), or
        # auto: of those two, the one whose fit misses the ladder's own sizes least (fit.holdout.choose_form)
        bootstrap=200,  # refits of the law on draws: the intervals
        seed=0,
        target=0.03,  # nats: |actual − predicted| at N_opt that counts as predicted
        workers=2,  # rungs trained at once
    ))
