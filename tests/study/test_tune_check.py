"""study.tune.check: every field of the tuning preset that a stage reads is checked before the grid
trains anything, each bad one refused in one line naming the field (the command's own refusal:
tests/study/test_study_faults.py)."""

import pytest

from linscale_jax.study.presets import preset
from linscale_jax.study.tune.check import TuneConfigError, check_tune


@pytest.mark.parametrize("field, value, named", [
    ("tune.replicate_sizes", "smallest,d17", "'d17' is not smallest, largest or one of the tuned sizes"),
    ("tune.beta2s", "0.95,1.5", "'1.5' is not an AdamW beta2 in [0, 1)"),
    ("tune.batches", "4,x", "'x' is not a batch of >= 1 sequences"),
    ("tune.max_batch", 8, "below the largest batch of tune.batch/tune.batches (16)"),
    ("tune.check_archs", "tnl,gpt", "'gpt' is not an architecture"),
    ("tune.check_sizes", "d16l2,d17", "tnl-d17 is not a model of ladder (ValueError: unknown ladder size"),
    ("tune.lr_points", 0, "need an integer >= 1"),
    ("tune.own_rule_factor", 1.0, "need a finite number > 1"),
    ("tune.lr_base", float("nan"), "need a finite number > 0"),
    ("estimators", "val_loss", "include cooldown"),
    ("overrides.optim.schedule", "cosine", "set constant"),
])
def test_a_bad_tuning_field_is_named_before_anything_trains(field, value, named):
    study = preset("tune")
    check_tune(study)  # the preset itself is fine
    node = study
    *path, last = field.split(".")
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(TuneConfigError) as e:
        check_tune(study)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"--config.{field}={value!r}: ") and named in msg, msg
