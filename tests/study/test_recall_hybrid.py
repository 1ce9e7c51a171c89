"""The recall study with hybrid, gdn and state-variant labels: each built at study.n_layers with the
label's changes winning over the shape, its state floats per layer from the accounting (a hybrid's
softmax layer's KV cache included), a label deeper than study.n_layers refused in one line; and
each label judged against the baseline at equal steps (study.recall.verdicts) from a recall.csv,
through finding 3's lines, findings.json's retrieval archs and the report's summary line."""

import types

import pytest

from linscale_jax.study import recall
from linscale_jax.study.recall import table, train, verdicts
from linscale_jax.study.scaling import findings
from linscale_jax.study.scaling.report import summary


def _study(**kw):
    from configs.study.hybrid_recall import get_config

    c = get_config()
    c.update(dict(shapes="d16e8", baseline_shapes="d16e8", seq_len=32, n_keys=16, n_values=16, lr="1e-3"), **kw)
    return c


def test_hybrid_gdn_and_state_labels_build_at_the_study_depth(tmp_path):
    """< 5 s. A 3:1 hybrid at 4 layers is `<arch>*3,llama`; its state per layer is the mean of three
    linear states and one KV cache at seq_len; TNL's decayed heads leave its usable state smaller;
    a variant's field (n_heads) wins over the shape's."""
    study = _study(archs="llama,gdn,tnl+hybrid=3:1,gdn+hybrid=3:1,gdn+expand_v=1,tnl+n_heads=1", seeds="0")
    runs = {r.arch: r for r in train.build_runs(study, str(tmp_path))}
    assert {r.config.model.n_layers for r in runs.values()} == {4}
    assert runs["tnl+hybrid=3:1"].config.model.layers == "tnl*3,llama"
    kv = 2 * 32 * 16  # llama: k and v of d 16 for 32 tokens
    assert runs["llama"].state_floats == runs["llama"].usable_state_floats == kv
    tnl = 2 * 8 * 8  # h·e·e
    assert runs["tnl+hybrid=3:1"].state_floats == round((3 * tnl + kv) / 4)
    # TNL's paper decay: one head of two spans the context in each of its three layers
    assert runs["tnl+hybrid=3:1"].usable_state_floats == round((3 * tnl / 2 + kv) / 4)
    gdn = runs["gdn"].state_floats
    assert runs["gdn+hybrid=3:1"].state_floats == round((3 * gdn + kv) / 4)
    assert runs["gdn+expand_v=1"].state_floats < gdn and runs["gdn+expand_v=1"].variant == "expand_v=1"
    assert runs["tnl+n_heads=1"].config.model.n_heads == 1 and runs["tnl+n_heads=1"].state_floats == 16 * 16
    assert {r.steps for r in runs.values()} == {4000}  # equal steps: the control's too


def test_study_model_changes_reach_every_label_and_the_label_wins(tmp_path):
    """< 3 s. study.model_changes changes every label's model (a hybrid's too), a label's own change
    of the same field wins, a bad field is refused naming it, and the report's protocol says so."""
    from linscale_jax.study.recall import report

    study = _study(archs="llama,tnl+hybrid=3:1,llama+init_std=0.01", seeds="0",
                   model_changes="init_std=0.04+embed_scale=sqrt_d")
    runs = {r.arch: r.config.model for r in train.build_runs(study, str(tmp_path))}
    assert runs["llama"].init_std == runs["tnl+hybrid=3:1"].init_std == 0.04
    assert {m.embed_scale for m in runs.values()} == {"sqrt_d"}
    assert runs["tnl+hybrid=3:1"].layers == "tnl*3,llama"
    assert runs["llama+init_std=0.01"].init_std == 0.01
    assert report.model_phrase(study) == "(every label with init_std=0.04+embed_scale=sqrt_d) "
    assert report.model_phrase(_study(model_changes="")) == ""
    from configs.study.hybrid_recall_sweep import get_config as sweep  # the preset's, its sweep's too

    assert _study().model_changes == sweep().model_changes == "embed_scale=sqrt_d"
    with pytest.raises(ValueError, match="no_such_field"):
        train.build_runs(_study(archs="llama", seeds="0", model_changes="no_such_field=1"), str(tmp_path))


def test_a_label_deeper_than_the_study_is_refused_in_one_line(tmp_path):
    """< 1 s."""
    with pytest.raises(ValueError) as err:
        train.build_runs(_study(archs="llama,gdn+hybrid=3:1", n_layers=2), str(tmp_path))
    msg = str(err.value)
    assert "\n" not in msg and "'gdn+hybrid=3:1'" in msg and "period of 4" in msg
    assert "--config.n_layers=4" in msg
    assert train.layer_period("tnl*3,llama") == 4 and train.layer_period("") == 0


def _row(arch, acc, half, status="recall", steps=2000, max_steps=2000, d=64):
    return dict(arch=arch, d_model=d, n_pairs=4, seq_len=64, accuracy=acc, ci_low=acc - half,
                ci_high=acc + half, state_floats=1024, seed="all", status=status, head_dim=16, n_layers=4,
                lr=1e-3, steps=steps, test_loss=1.0, queries=2048, n_params=1000,
                variant="hybrid=3:1" if "+" in arch else "", usable_state_floats=1024, max_steps=max_steps)


def _verdict(tmp_path, rows):
    path = str(tmp_path / "recall.csv")
    table.write_csv(rows, path)
    return recall.verdict_input(path), path


def test_each_label_against_the_control_at_equal_steps(tmp_path):
    """< 1 s. The four outcomes, a copy-level cell judged, an untrained cell and one allowed fewer
    steps not measured; without the positive control every label is not measured."""
    rows = [_row("llama", 0.93, 0.02, steps=1900),
            _row("gdn", 0.99, 0.01, steps=1200),                          # above: better
            _row("tnl", 0.25, 0.03, status="copy_level"),                 # at the copy level: worse
            _row("tnl+hybrid=3:1", 0.94, 0.015),                          # inside ±0.05: equivalent
            _row("hgrn2+hybrid=3:1", 0.85, 0.12),                         # wide: not resolved
            _row("cosformer2+hybrid=3:1", 0.1, 0.02, status="did_not_train"),
            _row("gdn+hybrid=3:1", 0.99, 0.01, max_steps=1000)]           # fewer steps than the control
    v, path = _verdict(tmp_path, rows)
    out = verdicts.equal_steps(v)
    assert {a: r["verdict"] for a, r in out.items()} == {
        "gdn": "better", "tnl": "worse", "tnl+hybrid=3:1": "equivalent", "hgrn2+hybrid=3:1": "not_resolved",
        "cosformer2+hybrid=3:1": "not measured", "gdn+hybrid=3:1": "not measured"}
    assert out["gdn"]["diff"] == pytest.approx(0.06) and out["gdn"]["ci_low"] > 0
    assert out["cosformer2+hybrid=3:1"]["reason"] == "did not train"
    assert out["gdn+hybrid=3:1"]["reason"] == "fewer steps than the control"
    verdict, lines = findings.retrieval(v, path)
    text = "\n".join(lines)
    assert "| tnl+hybrid=3:1 | 64 | 16 | 4 | 0.940 (0.930) | 2000 (1900) | +0.010 [" in text
    assert "**equivalent** |" in text and "not measured (fewer steps than the control)" in text
    assert verdict.startswith("**not reproduced**")  # finding 3 itself: gdn above llama; tnl left out
    # findings.json's retrieval archs -> the summary line and the console line
    found = dict(findings=dict(power_laws=dict(verdict="reproduced", archs={}),
                               equal_compute=dict(verdict="reproduced", archs={}, compute=1.0),
                               retrieval=dict(verdict=verdict.replace("**", ""), archs=out)))
    (line,) = [x for x in summary.finding_lines(types.SimpleNamespace(found=found)) if "retrieval" in x]
    assert "arch − llama at equal steps [95%]: gdn +0.060 [" in line and "(better)" in line
    assert "cosformer2+hybrid=3:1 (not measured: did not train)" in line
    assert "tnl worse" in findings.console_lines(found)[2]
    # the positive control not met: every label not measured, with the reason
    rows[0] = _row("llama", 0.6, 0.02)
    v, _ = _verdict(tmp_path, rows)
    assert {r["verdict"] for r in verdicts.equal_steps(v).values()} == {"not measured"}
    assert verdicts.equal_steps(v)["gdn"]["reason"] == "the positive control did not pass"
    assert verdicts.equal_steps(None) == {}
    # a label of the study that the recall study lacks
    extra = verdicts.equal_steps(v, labels=["llama", "gdn", "gdn+expand_v=1"])
    assert extra["gdn+expand_v=1"]["reason"] == "not in the recall study" and "llama" not in extra
    assert "| gdn+expand_v=1 | | | | | | | | not measured (not in the recall study) |" in findings.retrieval(
        v, path, ["gdn+expand_v=1"])[1]


def test_the_preset_without_its_rates_names_its_own_sweep(tmp_path):
    """< 1 s."""
    with pytest.raises(FileNotFoundError, match="--config=hybrid_recall_sweep --workdir=DIR"):
        train.learning_rates(_study(lr="", rates="hybrid_recall_rates"), "gdn")
