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


def test_cpu_preset_runs_on_the_tuned_rule_and_its_paper_twin(tmp_path):
    from linscale_jax.study.scaling import plan

    doc = rule.load()
    tuned = plan.build_plan(load_config("configs/study/cpu.py"), str(tmp_path))
    paper = plan.build_plan(load_config("configs/study/cpu_paper.py"), str(tmp_path))
    assert {r.config.optim.lr for r in paper} == {3e-3}
    for r in tuned:
        s = rule.settings(doc, r.config.model.arch, r.n_params, 128, "byte")
        assert (r.config.optim.lr, r.config.train.batch_size, r.config.optim.b2,
                r.config.optim.warmup_steps) == (s["lr"], s["batch_size"], s["b2"], s["warmup_steps"])
        assert r.tokens == tuned[0].tokens  # one token budget, whatever the batch
    assert len({r.config.optim.lr for r in tuned}) > 1
