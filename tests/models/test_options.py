"""Per-arch options (ArchSpec.options; model.<arch>.<option>): typed fields on the registry entry,
set from a config file, the command line and a variant label; options of an arch the model does not
use are refused; and a checkpoint whose config has the earlier flat fields (tnl_gate, tpe,
n_kv_heads, param_dtype, ...) resumes and evaluates, translated on read."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from absl import flags
from helpers.train import ROOT, tiny_config
from ml_collections import config_flags

from linscale_jax.config import base_config
from linscale_jax.eval import runner
from linscale_jax.models import ModelConfig, registry, variant_change
from linscale_jax.models.config import LEGACY, shape_fields, upgrade
from linscale_jax.run import checkpoint as ckpt
from linscale_jax.run import checksums, identity
from linscale_jax.train import loop as trainer


def test_every_arch_declares_its_options_on_its_registry_entry():
    got = {a: sorted(f for f in ModelConfig().to_dict()[a]) for a in registry.ARCHS
           if registry.get(a).options is not None}
    assert got == {"llama": ["n_kv_heads", "rope_theta"], "tnl": ["decay_rule", "gate", "lrpe"],
                   "hgrn2": ["q_scale"], "cosformer2": ["tpe"]}
    cfg = ModelConfig(arch="tnl", d_model=32, n_heads=2, tnl=dict(gate="linear"))
    assert (cfg.tnl.decay_rule, cfg.tnl.gate, cfg.tnl.lrpe) == ("paper", "linear", False)
    assert cfg.replace(tnl=dict(lrpe=True)).tnl == type(cfg.tnl)(gate="linear", lrpe=True)
    assert ModelConfig.from_config(cfg.to_dict()) == cfg and hash(ModelConfig.from_config(cfg.to_dict())) == hash(cfg)
    assert set(shape_fields()) >= {"model.tnl.gate", "model.tnl.lrpe", "model.llama.n_kv_heads",
                                   "model.cosformer2.tpe", "model.n_layers"}
    assert "model.tnl.decay_rule" not in shape_fields()  # a constant, no parameter


def test_the_command_line_sets_an_arch_option():
    argv = ["x", f"--config={ROOT}/configs/ladder.py:tnl-d32", "--config.model.tnl.gate=linear",
            "--config.model.tnl.lrpe=True"]
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "", flag_values=fv, sys_argv=argv)
    fv(argv)
    cfg = ModelConfig.from_config(fv.config.model)
    assert (cfg.tnl.gate, cfg.tnl.lrpe, cfg.d_model) == ("linear", True, 32)


def test_bad_options_are_one_line_errors_naming_the_field_and_the_fix():
    cases = [
        (dict(arch="llama", tnl=dict(gate="linear")),
         r"model.tnl.gate='linear' applies to tnl layers, and this model has none \(model.arch=llama\); "
         r"drop it \(default 'lowrank'\) or set --config.model.arch=tnl"),
        (dict(arch="tnl", tnl=dict(gate="sigmoid")), r"model.tnl.gate='sigmoid' is not supported; choose one of"),
        (dict(arch="tnl", tnl=dict(lrpe="yes")), r"model.tnl.lrpe='yes' must be a bool"),
        (dict(arch="tnl", tnl=dict(nonsense=1)), r"model.tnl: unknown option\(s\) \['nonsense'\]"),
        (dict(arch="llama", n_heads=4, d_model=64, llama=dict(n_kv_heads=3)), r"model.llama.n_kv_heads=3 must divide"),
        (dict(arch="llama", llama=dict(n_kv_heads=-1)), r"model.llama.n_kv_heads=-1 must be >= 0"),
        (dict(arch="llama", glu_act="silu"), r"model.glu_act applies to the linear mixers' blocks"),
        (dict(arch="llama", norm_scale=True), r"model.norm_scale applies to the linear mixers' blocks"),
        (dict(arch="tnl", mamba=dict(x=1)), r"unknown field 'mamba'"),
        (dict(arch="tnl", tnl_gate="linear", tnl=dict(gate="lowrank")), r"model.tnl_gate='linear' \(the earlier name"),
        (dict(arch="tnl", param_dtype="bfloat16"), r"model.param_dtype: parameters are kept in float32"),
    ]
    for values, match in cases:
        with pytest.raises(ValueError, match=match) as e:
            ModelConfig(**values)
        assert "\n" not in str(e.value)


def test_variant_change_is_the_one_function_for_labels():
    assert variant_change("cosformer2", "tpe", "none") == {"cosformer2": {"tpe": "none"}}
    assert variant_change("tnl", "tnl.gate", "linear") == {"tnl": {"gate": "linear"}}
    assert variant_change("tnl", "tnl_lrpe", "true") == {"tnl": {"lrpe": True}}  # earlier flat name
    assert variant_change("tnl", "short_conv", "4") == {"short_conv": 4}
    assert variant_change("llama", "n_kv_heads", "2") == {"llama": {"n_kv_heads": 2}}
    assert variant_change("llama", "rope_theta", "5e5") == {"llama": {"rope_theta": 500000.0}}
    with pytest.raises(ValueError, match="'tnl' options do not apply to hgrn2"):
        variant_change("hgrn2", "tnl.gate", "linear")


def old_layout(section: dict) -> dict:
    """A model section as the trainer wrote it before the per-arch options: 29 flat fields."""
    flat = {k: v for k, v in section.items() if not isinstance(v, dict)}
    flat.update(param_dtype="float32", rope_theta=section["llama"]["rope_theta"],
                tnl_decay_rule=section["tnl"]["decay_rule"], tpe=section["cosformer2"]["tpe"],
                n_kv_heads=section["llama"]["n_kv_heads"], hgrn2_q_scale=section["hgrn2"]["q_scale"],
                tnl_gate=section["tnl"]["gate"], tnl_lrpe=section["tnl"]["lrpe"])
    assert len(flat) == 29
    return flat


def test_an_old_flat_section_reads_as_todays():
    new = ModelConfig(arch="tnl", d_model=32, n_heads=2, tnl=dict(decay_rule="alibi_layer", lrpe=True))
    old = old_layout(new.to_dict())
    assert set(LEGACY) <= set(old) and "tnl" not in old
    assert upgrade(old) == {k: v for k, v in new.to_dict().items()}
    assert ModelConfig.from_config(old) == new
    stored = json.loads(json.dumps({**base_config().to_dict(), "model": old}))
    current = base_config()
    current.model = new.to_dict()
    assert identity.diff(ckpt._upgraded({"config": stored})["config"], current) == {}


def test_a_checkpoint_with_the_old_fields_resumes_and_evaluates(tmp_path):
    """Train 2 steps of a TNL with non-default options (released decay rule, LRPE: a shape option),
    rewrite the checkpoint's metadata to the earlier flat layout (checksums recorded again, as the
    old trainer would have), then: the metadata reads in today's form, the model loads with its
    options, eval runs, and the run resumes to step 4 with today's config (no refusal). ~20 s."""
    c = tiny_config("tnl", steps=2)
    c.model.tnl.update(decay_rule="alibi_layer", lrpe=True)
    c.checkpoint.update(every_steps=2)
    trainer.train(c, tmp_path)
    step_dir = Path(ckpt.ckpt_dir(tmp_path)) / "2"
    meta_file = step_dir / "metadata" / "metadata"
    meta = json.loads(meta_file.read_text())
    meta["config"]["model"] = old_layout(meta["config"]["model"])
    meta_file.write_text(json.dumps(meta))
    checksums.record(step_dir)
    assert checksums.verify(step_dir) is None

    got = ckpt.load_metadata(tmp_path, 2)["config"]["model"]
    assert got["tnl"] == dict(decay_rule="alibi_layer", gate="lowrank", lrpe=True) and "tpe" not in got
    model, config, _ = ckpt.load_model(str(tmp_path), 2)
    assert model.cfg.tnl.decay_rule == "alibi_layer" and model.layers[0].mixer.theta.shape == (4, 16)
    rows = runner.evaluate(str(tmp_path), tasks="val_loss", ctx_kwargs=dict(val_batches=1),
                           log=lambda *_: None)
    assert [r["step"] for r in rows] == [2] and math.isfinite(rows[0]["val_loss"])
    c.train.steps = 4
    out = trainer.train(c, tmp_path)
    assert out["step"] == 4 and sorted(out["losses"]) == [3, 4]
    assert np.isfinite(list(out["losses"].values())).all()
    # a shape option changed on resume is refused as another model, in one line
    c.model.tnl.lrpe = False
    c.train.steps = 6
    with pytest.raises(identity.RunIdentityError, match=r"holds a different model.*model.tnl.lrpe True -> False"):
        trainer.train(c, tmp_path)
