"""optim.rule (linscale_jax.train.rule): `paper` leaves the config's one rate alone, `tuned` (or a rule
file) sets lr, batch, β2 and warmup per arch and size from the file, with N from the model config's
own accounting, and refuses in one line outside the rule's fitted range, vocabulary or sequence
length; the shipped rule file and the presets that read it."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from linscale_jax.models import ModelConfig, accounting
from linscale_jax.train import rule

ROOT = Path(__file__).resolve().parents[2]


def load_config(rel: str, arg: str | None = None):
    spec = importlib.util.spec_from_file_location(f"_r_{Path(rel).stem}", ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.get_config(arg) if arg is not None else mod.get_config()


def planted(tmp_path, n_min=1e4, n_max=4e5) -> Path:
    doc = {"range": {"n_min": n_min, "n_max": n_max, "n_count": "non_embedding"},
           "data": {"vocab": "byte", "seq_len": 128},
           "warmup_tokens_per_param": 1.0, "default": "llama",
           "archs": {"llama": {"lr": {"coefficient": 2.0, "exponent": -0.5},
                               "batch": {"coefficient": 0.05, "exponent": 0.5}, "beta2": 0.999},
                     "tnl": {"same_as": "llama"},
                     "hgrn2": {"lr": {"coefficient": 6.0, "exponent": -0.5},
                               "batch": {"coefficient": 0.05, "exponent": 0.5}, "beta2": 0.99}}}
    path = tmp_path / "rule.json"
    path.write_text(json.dumps(doc))
    return path


def n_of(cfg) -> float:
    return float(accounting.param_counts(ModelConfig.from_config(cfg.model))["non_embedding"])


def test_rule_file_gives_each_arch_and_size_its_settings(tmp_path):
    path = planted(tmp_path)
    for arch, coef, beta2 in (("llama", 2.0, 0.999), ("tnl", 2.0, 0.999), ("hgrn2", 6.0, 0.99),
                              ("cosformer2", 2.0, 0.999)):  # unlisted: the default arch's rule
        cfg = load_config("configs/ladder.py", f"{arch}-d64")
        cfg.train.seq_len = 128
        cfg.optim.rule = str(path)
        n = n_of(cfg)
        rule.resolve(cfg)
        batch = 2 ** round(math.log2(0.05 * n ** 0.5))
        assert cfg.optim.lr == pytest.approx(coef * n ** -0.5, rel=1e-3)
        assert (cfg.train.batch_size, cfg.optim.b2) == (batch, beta2)
        assert cfg.optim.warmup_steps == math.ceil(n / (batch * 128))
        before = cfg.to_dict()
        assert rule.resolve(cfg).to_dict() == before  # applying it twice changes nothing
        assert rule.pinned_flags(cfg) == ["--config.optim.rule=paper", f"--config.train.batch_size={batch}",
                                          f"--config.optim.b2={beta2}",
                                          f"--config.optim.warmup_steps={cfg.optim.warmup_steps}"]


def test_a_rule_with_a_horizon_sets_the_rate_by_the_runs_length(tmp_path):
    """horizon {tokens: D0, exponent: g}: lr = c·N^e·(D/D0)^-g with D = steps·batch·seq_len, the
    same rate at D0 as without it; batch, β2 and warmup unchanged; the study's run configs (the
    budget's steps) and the train command's (its own steps) get the rate of their length."""
    path = planted(tmp_path)
    doc = json.loads(path.read_text())
    doc["horizon"] = {"tokens": 1_000_000.0, "exponent": 0.25}
    path.write_text(json.dumps(doc))
    cfg = load_config("configs/ladder.py", "llama-d64")
    cfg.train.seq_len, cfg.optim.rule = 128, str(path)
    n = n_of(cfg)
    batch = 2 ** round(math.log2(0.05 * n ** 0.5))
    for d in (250_000, 1_000_000, 16_000_000):
        cfg.train.steps = d // (batch * 128)
        rule.resolve(cfg)
        tokens = cfg.train.steps * batch * 128
        assert cfg.optim.lr == pytest.approx(2.0 * n ** -0.5 * (tokens / 1e6) ** -0.25, rel=1e-3)
        assert cfg.train.batch_size == batch and cfg.optim.warmup_steps == math.ceil(n / (batch * 128))
    assert rule.horizon_factor(doc, 16e6) == pytest.approx(0.5) and rule.horizon_factor(doc, None) == 1.0
    from linscale_jax.study import presets
    from linscale_jax.study.scaling import plan

    study = presets.preset("cpu")
    study.overrides.optim.rule = str(path)
    short, long = (plan.run_config(study, "llama", size) for size in ("d96l2", "d32l2"))  # tokens ∝ 1/N
    for c in (short, long):
        want = 2.0 * n_of(c) ** -0.5 * (c.train.steps * c.train.batch_size * 128 / 1e6) ** -0.25
        assert c.optim.lr == pytest.approx(want, rel=1e-3)


def test_paper_rule_keeps_the_one_rate(tmp_path):
    cfg = load_config("configs/ladder.py", "llama-d64")
    before = cfg.to_dict()
    assert cfg.optim.rule == "paper" and rule.resolve(cfg).to_dict() == before and not rule.pinned_flags(cfg)
    cfg = load_config("configs/paper.py", "llama-70m")
    assert rule.resolve(cfg).optim.lr == 3e-4


def test_rule_refuses_outside_its_range_in_one_line(tmp_path):
    path = planted(tmp_path, n_max=1e5)
    cfg = load_config("configs/ladder.py", "llama-d80")  # N 3.1e5 > 1e5
    cfg.train.seq_len, cfg.optim.rule = 128, str(path)
    with pytest.raises(rule.RuleError) as e:
        rule.resolve(cfg)
    msg = str(e.value)
    assert "\n" not in msg and "1e+04-1e+05" in msg and "3.1e+05" in msg and "optim.rule=paper" in msg
    cfg = load_config("configs/ladder.py", "llama-d32")
    cfg.train.seq_len, cfg.optim.rule = 256, str(path)  # the batch is counted in 128-token sequences
    with pytest.raises(rule.RuleError, match="sequences of 256.*optim.rule=paper"):
        rule.resolve(cfg)
    doc = json.loads(path.read_text())
    doc["archs"]["tnl"]["range"] = {"n_min": 1e4, "n_max": 4e5}  # an arch checked at larger sizes
    path.write_text(json.dumps(doc))
    for arch, refused in (("llama", True), ("tnl", False)):
        cfg = load_config("configs/ladder.py", f"{arch}-d80")
        cfg.train.seq_len, cfg.optim.rule = 128, str(path)
        if refused:
            with pytest.raises(rule.RuleError, match="N = 1e\\+04-1e\\+05"):
                rule.resolve(cfg)
        else:
            assert rule.resolve(cfg).optim.lr == pytest.approx(2.0 * n_of(cfg) ** -0.5, rel=1e-3)
    cfg.optim.rule = "fast"
    with pytest.raises(rule.RuleError, match="not one of"):
        rule.resolve(cfg)
    cfg.optim.rule = str(tmp_path / "missing.json")
    with pytest.raises(rule.RuleError, match="not found"):
        rule.resolve(cfg)


def test_shipped_rule_refuses_the_paper_scale():
    doc = rule.load()
    assert doc["data"]["vocab"] == "byte" and doc["range"]["n_max"] < 1e7 and doc["command"].startswith("python -m linscale_jax.study")
    assert doc["cells"] and all("loss" in c for c in doc["cells"])
    cfg = load_config("configs/paper.py", "tnl-70m")
    cfg.optim.rule = "tuned"
    with pytest.raises(rule.RuleError, match=r"this tnl has N = 2\.1\d*e\+07, outside that range; set optim.rule=paper"):
        rule.resolve(cfg)


def test_the_two_shipped_rules_by_name(tmp_path):
    """optim.rule=tuned (the default file: the grid's rule checked at the main job's ladder, tnl on
    its own rate, each run's rate by its length) and optim.rule=grid (the grid's rule alone): the
    main job's tnl trains at its own rate under tuned and at llama's under grid; below its checked
    sizes tnl is refused under tuned, naming grid and paper, and runs under grid."""
    from linscale_jax.study.scaling import plan

    tuned, grid = rule.load(rule.rule_path("tuned")), rule.load(rule.rule_path("grid"))
    assert "horizon" in tuned and "horizon" not in grid
    assert "same_as" not in tuned["archs"]["tnl"] and grid["archs"]["tnl"]["same_as"] == "llama"
    study = load_config("configs/study/cpu.py")
    study.archs = "tnl"
    lrs = {}
    for name in ("tuned", "grid"):
        study.overrides.optim.rule = name
        runs = plan.build_plan(study, str(tmp_path / name))
        lrs[name] = {r.size: r.config.optim.lr for r in runs}
    n = {"d32l2": 27136.0, "d96l2": 227328.0}
    for size in ("d32l2", "d96l2"):
        tokens = plan.tokens_of(study, size)
        own = rule.power(tuned["archs"]["tnl"]["lr"], n[size]) * rule.horizon_factor(tuned, tokens)
        assert lrs["tuned"][size] == pytest.approx(own, rel=1e-3)
        assert lrs["grid"][size] == pytest.approx(rule.power(grid["archs"]["llama"]["lr"], n[size]), rel=1e-3)
    assert lrs["grid"]["d32l2"] > 2 * lrs["tuned"]["d32l2"]  # the grid's rule: 2.3x tnl's best rate there
    cfg = load_config("configs/ladder.py", "tnl-d16l2")
    cfg.train.seq_len, cfg.optim.rule = 128, "tuned"
    with pytest.raises(rule.RuleError, match=r"this tnl has N = 7\.68e\+03, outside that range; set "
                                             r"optim\.rule=paper .*optim\.rule=grid"):
        rule.resolve(cfg)
    cfg.optim.rule = "grid"
    assert rule.resolve(cfg).optim.lr == pytest.approx(rule.power(grid["archs"]["llama"]["lr"], 7680.0), rel=1e-3)


def test_cpu_preset_runs_on_the_tuned_rule_and_its_paper_twin(tmp_path):
    from linscale_jax.study.scaling import plan

    doc = rule.load()
    study = load_config("configs/study/cpu.py")
    tuned = plan.build_plan(study, str(tmp_path))
    paper = plan.build_plan(load_config("configs/study/cpu_paper.py"), str(tmp_path))
    assert {r.config.optim.lr for r in paper} == {3e-3}
    for r in tuned:
        s = rule.settings(doc, r.config.model.arch, r.n_params, 128, "byte", steps=r.config.train.steps)
        assert (r.config.optim.lr, r.config.train.batch_size, r.config.optim.b2,
                r.config.optim.warmup_steps) == (s["lr"], s["batch_size"], s["b2"], s["warmup_steps"])
        assert r.tokens == plan.tokens_of(study, r.size)  # the size's budget, whatever the batch
    assert len({r.config.optim.lr for r in tuned}) > 1


def _bad_rules(tmp_path):
    """(name, file text, what the line must name) of every way a rule file can be bad."""
    good = json.loads(planted(tmp_path).read_text())

    def changed(change):
        doc = json.loads(json.dumps(good))
        change(doc)
        return json.dumps(doc)

    return [
        ("empty", "", "is empty"),
        ("malformed", '{"range": {', "is not valid JSON"),
        ("a list", "[1, 2]", "holds a JSON list"),
        ("no archs", changed(lambda d: d.pop("archs")), "has no 'archs' entry"),
        ("no default arch", changed(lambda d: d["archs"].pop("llama")), "archs has no entry for 'llama'"),
        ("same_as itself", changed(lambda d: d["archs"].update(tnl={"same_as": "tnl"})),
         "archs.tnl refers to itself through same_as (tnl -> tnl)"),
        ("a cycle", changed(lambda d: d["archs"].update(tnl={"same_as": "hgrn2"}, hgrn2={"same_as": "tnl"})),
         "(tnl -> hgrn2 -> tnl)"),
        ("same_as unknown", changed(lambda d: d["archs"].update(tnl={"same_as": "gpt"})),
         "archs.tnl.same_as names 'gpt'"),
        ("negative lr", changed(lambda d: d["archs"]["llama"]["lr"].update(coefficient=-2.0)),
         "archs.llama.lr.coefficient is -2.0, not a finite number > 0"),
        ("NaN lr", changed(lambda d: d["archs"]["llama"]["lr"].update(coefficient=math.nan)),
         "archs.llama.lr.coefficient is nan"),
        ("NaN beta2", changed(lambda d: d["archs"]["hgrn2"].update(beta2=math.nan)), "archs.hgrn2.beta2 is nan"),
        ("beta2 of 1", changed(lambda d: d["archs"]["hgrn2"].update(beta2=1.0)), "archs.hgrn2.beta2 is 1.0"),
        ("NaN batch", changed(lambda d: d["archs"]["llama"]["batch"].update(exponent=math.nan)),
         "archs.llama.batch.exponent is nan"),
        ("no batch", changed(lambda d: d["archs"]["hgrn2"].pop("batch")), "archs.hgrn2 has no 'batch'"),
        ("inf range", changed(lambda d: d["range"].update(n_max=math.inf)), "range.n_max is inf"),
        ("text seq_len", changed(lambda d: d["data"].update(seq_len="long")), "data.seq_len is 'long'"),
        ("negative warmup", changed(lambda d: d.update(warmup_tokens_per_param=-1)),
         "warmup_tokens_per_param is -1, not a finite number >= 0"),
        ("horizon without tokens", changed(lambda d: d.update(horizon={"exponent": 0.2})), "horizon is {'exponent'"),
        ("NaN horizon", changed(lambda d: d.update(horizon={"tokens": 1e6, "exponent": math.nan})),
         "horizon.exponent is nan"),
        ("a check without best rates", changed(lambda d: d["archs"]["tnl"].update(
            check={"sizes": {"d64l2": {"rule_lr": 0.002}}})), "archs.tnl.check.sizes.d64l2 is {'rule_lr'"),
        ("a check that is a list", changed(lambda d: d["archs"]["tnl"].update(check=[0.002])),
         "archs.tnl.check is [0.002], not an object with the checked sizes"),
        ("a tuned size's rate of 0", changed(lambda d: d["archs"]["llama"].update(sizes={"d16l2": {"lr_opt": 0}})),
         "archs.llama.sizes.d16l2.lr_opt is 0, not a finite number > 0"),
    ]


def test_every_bad_rule_file_is_refused_in_one_line_naming_file_entry_and_fix(tmp_path):
    """Each bad file, whichever arch the run is (the whole file is checked): one RuleError line that
    names the file and the entry, and offers no setting the rule overrides (optim.lr, b2, batch)."""
    for i, (what, text, named) in enumerate(_bad_rules(tmp_path)):
        path = tmp_path / f"bad{i}.json"
        path.write_text(text)
        cfg = load_config("configs/ladder.py", "cosformer2-d64")  # not the entry that is bad
        cfg.train.seq_len, cfg.optim.rule = 128, str(path)
        with pytest.raises(rule.RuleError) as e:
            rule.resolve(cfg)
        msg = str(e.value)
        assert "\n" not in msg and str(path) in msg and named in msg, (what, msg)
        assert "optim.rule=paper" in msg and "configs/study/tune.py" in msg, (what, msg)
        assert not any(k in msg for k in ("optim.lr", "optim.b2", "batch_size")), (what, msg)


def test_a_law_that_overflows_at_the_run_size_is_refused(tmp_path):
    doc = json.loads(planted(tmp_path).read_text())
    doc["archs"]["llama"]["lr"]["exponent"] = 400.0  # finite, but N^400 is not
    path = tmp_path / "steep.json"
    path.write_text(json.dumps(doc))
    cfg = load_config("configs/ladder.py", "llama-d64")
    cfg.train.seq_len, cfg.optim.rule = 128, str(path)
    with pytest.raises(rule.RuleError, match=r"gives this llama \(N = .*\) a lr of inf"):
        rule.resolve(cfg)
