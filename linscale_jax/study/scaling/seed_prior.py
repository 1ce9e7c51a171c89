"""Other studies' measurement of a study's seed sd, shipped as package data with its provenance
(linscale_jax/configs/study/cpu_seed_sd.json, the bare name cpu_seed_sd: the main job's).

    python -m linscale_jax.study seed_sd_prior --workdir=A --workdir=B [...] --out=FILE
    priors, note = for_design("cpu_seed_sd", design)   # {estimator: SeedSd} or None; why

A study's own seed sd rests on its replicates (4 df in the main job, 12 in the 32-run design that
the packaged prior's studies ran), and two 12-df estimates of one sd differ by more than 1.5× about
one time in six, and the widths of the two studies' intervals with them. The seed sd belongs to the protocol (the ladder, its token budgets,
the learning-rate rule, the data), so finished studies of one design measure it together: the file
holds each study's own pooled sd per estimator with its df, and their pooling (df-weighted
variances, df summed) with Bartlett's test of one sd across them. A study whose design
(`FINGERPRINT` of study.scaling.results.design) equals the file's pools its own sd with the prior's
unless an F test rejects that they share one sd (fit.bootstrap.with_prior). A study of any other
design uses its own sd alone, and its report says why.

The file (JSON): design (the fingerprint's fields), studies [{study (its workdir's name), <estimator>:
{sd, df}}], pooled {estimator: {sd, df, bartlett_p}}, command.
"""

from __future__ import annotations

import json
import os

import numpy as np

from linscale_jax.study import files, inputs

# design fields the seed sd depends on (the ladder, budgets, rule and data; not the fit's settings,
# not the number of runs)
FINGERPRINT = ("archs", "sizes", "tokens", "tokens_by_size", "steps", "batch", "seq_len", "lr", "b2",
               "schedule", "warmup", "protocol", "data_task", "vocab", "vocab_size", "fit_min_step")


class PriorError(ValueError):
    pass


def fingerprint(design: dict) -> dict:
    return {k: design.get(k) for k in FINGERPRINT}


def _differs(a: dict, b: dict) -> list[str]:
    return [k for k in FINGERPRINT if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]


def read(spec: str) -> dict:
    """The prior file `spec` names: a packaged one (a bare name: cpu_seed_sd) or a path."""
    from linscale_jax.run import config_file

    try:
        with open(config_file.resolve(spec, "study", ".json")) as f:
            prior = json.load(f)
    except OSError:
        raise PriorError(f"seed sd prior {spec!r} not found; write one from finished studies of this design "
                         "with `python -m linscale_jax.study seed_sd_prior --workdir=A --workdir=B --out=FILE` "
                         "and pass --config.noise.prior=FILE, or --config.noise.prior= for none") from None
    except json.JSONDecodeError as e:
        raise PriorError(f"seed sd prior {spec!r} is not JSON ({e}); write it again with "
                         "`python -m linscale_jax.study seed_sd_prior ...`") from None
    fix = "write it again with `python -m linscale_jax.study seed_sd_prior ...`"
    if not isinstance(prior, dict) or not isinstance(prior.get("pooled"), dict) \
            or not isinstance(prior.get("design"), dict):
        raise PriorError(f"seed sd prior {spec!r} lacks 'pooled' or 'design'; {fix}")
    for est, v in prior["pooled"].items():
        ok = isinstance(v, dict) and all(isinstance(v.get(k), (int, float)) and np.isfinite(v[k]) and v[k] > 0
                                         for k in ("sd", "df"))
        if not ok:
            raise PriorError(f"seed sd prior {spec!r}: pooled.{est} needs a finite sd > 0 and df > 0, "
                             f"got {v!r}; {fix}")
    return prior


def for_design(spec: str, design: dict) -> tuple[dict | None, str]:
    """({estimator: SeedSd} of the prior `spec`, or None; a sentence for the report)."""
    from linscale_jax.fit.bootstrap import SeedSd

    if not spec:
        return None, "no prior (study.noise.prior empty): each estimator's own measured seed sd"
    prior = read(spec)
    diff = _differs(fingerprint(design), prior["design"])
    if diff:
        return None, (f"prior {spec} not used: it measures another design (differs in {', '.join(diff)}); "
                      "each estimator's own measured seed sd")
    n = len(prior.get("studies", []))
    out = {est: SeedSd(float(v["sd"]), float(v["df"]), f"{spec}: {n} studies")
           for est, v in prior["pooled"].items()}
    return out, (f"prior {spec}: {n} finished studies of this design, "
                 + ", ".join(f"{e} {v.sd:.4f} ({v.df:g} df)" for e, v in out.items()))


def own_sd(findings: dict, estimator: str, workdir: str):
    """A finished study's own pooled seed sd (fit.bootstrap.SeedSd) under `estimator`."""
    from linscale_jax.fit.bootstrap import SeedSd

    by = (findings.get("by_estimator") or {}).get(estimator)
    if by is None:
        raise PriorError(f"{workdir} has no {estimator!r} estimator; give studies with the same estimators")
    s = by.get("seed_sd_own") or by["seed_sd_pooled"]
    if not s.get("df"):
        raise PriorError(f"{workdir} measured no seed sd under {estimator} ({s.get('source')}): "
                         "a prior needs studies with replicates (study.replicates)")
    return SeedSd(float(s["sd"]), float(s["df"]), os.path.basename(os.path.normpath(workdir)))


def build(workdirs: list[str]) -> dict:
    """The prior file's dict from finished scaling studies of one design (module docstring)."""
    from linscale_jax.fit import bootstrap as bs

    if len(workdirs) < 2:
        raise PriorError(f"a seed sd prior pools 2 or more finished studies; {len(workdirs)} given "
                         "(repeat --workdir)")
    found = []
    for w in workdirs:
        path = files.study_path(w, files.FINDINGS_JSON)
        if not os.path.exists(path):
            raise PriorError(f"{w} is not a finished study (no {path}); run `python -m linscale_jax.study "
                             f"--config=... --workdir={w}` first")
        found.append(inputs.findings(path))
    design = fingerprint(found[0]["design"])
    for w, f in zip(workdirs[1:], found[1:]):
        diff = _differs(design, f["design"])
        if diff:
            raise PriorError(f"{w} has another design than {workdirs[0]} (differs in {', '.join(diff)}); "
                             "a prior pools studies of one design")
    ests = list(found[0]["estimators"])
    studies = [dict(study=os.path.basename(os.path.normpath(w)), **{e: own_sd(f, e, w).json() for e in ests})
               for w, f in zip(workdirs, found)]
    pooled = {}
    for e in ests:
        sds = [own_sd(f, e, w) for w, f in zip(workdirs, found)]
        p = bs.pooled(sds)
        pooled[e] = dict(sd=p.sd, df=p.df, bartlett_p=bs.bartlett(sds))
    return dict(design=design, studies=studies, pooled=pooled,
                command="python -m linscale_jax.study seed_sd_prior " + " ".join(f"--workdir={w}" for w in workdirs))


def main(workdirs: list[str], out: str | None) -> str:
    """Build the prior, write it to `out` (when given), return the lines to print."""
    prior = build(workdirs)
    if out:
        with open(out, "w") as f:
            json.dump(prior, f, indent=2)
            f.write("\n")
    lines = [f"{e}: seed sd {v['sd']:.4f} on {v['df']:g} df from {len(workdirs)} studies "
             f"(Bartlett's test of one sd: p {v['bartlett_p']:.2g})" for e, v in prior["pooled"].items()]
    return "\n".join(lines + ([f"wrote {out}"] if out else []))
