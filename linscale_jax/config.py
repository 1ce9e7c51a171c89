"""Experiment configuration: one ml_collections ConfigDict with fixed sections.

Sections and their owners:
  model       architecture and shape (read by linscale_jax.models and linscale_jax.models.accounting)
  train       steps, batch, sequence length, seed, logging/eval cadence
  optim       AdamW and the learning-rate schedule
  data        seqio task, vocabulary, packing
  checkpoint  Orbax checkpoint schedule and retention
  mesh        device-mesh shape: ('data', 'fsdp', 'tensor') [+ 'seq']

A config file in configs/ defines `get_config(arg)`: it starts from `base_config()`, sets the model
section from a named shape (`sizes.apply_model(c.model, sizes.ladder_model(arch, size))`, or
`paper_model`) and adjusts fields; users override any field on the command line
(`--config.train.steps=100`).
"""

from __future__ import annotations

import ml_collections

from linscale_jax.errors import Refusal
from linscale_jax.models.config import ARCHS, ModelConfig  # noqa: F401  (ARCHS re-exported)

def model_defaults() -> ml_collections.ConfigDict:
    """Model section: the fields of ModelConfig with their defaults (the one source; see its
    field comments for every choice the paper leaves open), with one sub-section of options per
    architecture that has options (`model.tnl.decay_rule`, ...; ArchSpec.options)."""
    return ml_collections.ConfigDict(ModelConfig().to_dict())


class ModelConfigError(Refusal, ValueError):
    """A model section refused before anything was built or written (its line names the field
    and the fix)."""


def check_model(config, where: str = "") -> ModelConfig:
    """The model section validated, and against the run's sequence (train.seq_len): every model
    option in one line (ModelConfig.check_sequence), before anything is built or written. `where`
    (e.g. a study run's name) starts the line."""
    try:
        cfg = ModelConfig.from_config(config.model)
        cfg.check_sequence(int(config.train.seq_len))
    except (ValueError, TypeError) as e:
        raise ModelConfigError(f"{where}: {e}" if where else str(e)) from None
    return cfg


def base_config() -> ml_collections.ConfigDict:
    """Every section with defaults that train a tiny model on the embedded corpus."""
    c = ml_collections.ConfigDict()
    c.name = "run"
    c.model = model_defaults()
    c.train = ml_collections.ConfigDict(
        dict(
            steps=200,
            batch_size=8,  # global batch, sequences
            seq_len=256,
            grad_accum=1,
            seed=0,
            log_every=10,
            eval_every=100,  # periodic validation loss; 0 disables
            eval_batches=4,
            stop_at="",  # "val_accuracy>=T" or "val_loss<=T": stop at the first eval step that meets
            #              it (linscale_jax.train.early_stop); "": train every step
            peak_flops=0.0,  # per-device peak FLOP/s for MFU; 0: $LINSCALE_PEAK_FLOPS, a known
            #                  accelerator's bf16 peak, or a measured f32 matmul peak on CPU
            profile_steps="",  # "A,B": a jax.profiler trace of steps A..B under DIR/profile/
            wandb="",  # a Weights & Biases project: every metrics row there too ([track] extra)
            wandb_group="",  # its W&B group (a study sets its directory's name)
        )
    )
    c.optim = ml_collections.ConfigDict(
        dict(
            lr=3e-4,
            weight_decay=0.1,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            schedule="cosine",  # constant | cosine (linear warmup + cosine) | wsd
            warmup_steps=20,
            min_lr_ratio=0.1,  # final lr / peak lr for cosine and wsd
            decay_fraction=0.2,  # wsd: share of steps in the final decay
            clip_norm=1.0,  # global-norm gradient clipping; 0 disables
            # where lr, batch, b2 and warmup come from (linscale_jax.train.rule): paper (these
            # fields, one rate for every size), tuned (per arch and size from the shipped rule
            # file), or a rule file's path
            rule="paper",
            # no weight decay on norms, gains and biases: parameters with < 2 dims (stacked
            # scan_layers parameters count their layer axis out)
        )
    )
    c.data = ml_collections.ConfigDict(
        dict(
            task="stdlib",  # stdlib (embedded default) | tfds:<name> | files
            vocab="byte",  # byte | sentencepiece:<model path> | cl100k_base
            paths="",  # comma-separated local .txt/.jsonl files for task=files
            text_key="text",  # jsonl field
            txt_document="paragraph",  # .txt documents: paragraph (blank-line separated) | line | file
            tiktoken_file="",  # local cl100k_base.tiktoken (else tiktoken's cache: $TIKTOKEN_CACHE_DIR)
            tfds_data_dir="",
            val_fraction=0.05,  # share of documents (by path hash) held out for validation
            seed=0,
        )
    )
    c.checkpoint = ml_collections.ConfigDict(
        dict(
            every_steps=100,  # dense checkpoints every N steps (and at the last step)
            log_spaced=8,  # extra log-spaced early checkpoints in (0, every_steps); 0 disables
            keep=0,  # 0 keeps every checkpoint (the fits need them all); K keeps the newest K
            async_save=True,  # write in a background thread while training continues
            state_steps="all",  # checkpoints with the whole training state (optimizer, data
            # position: resume, cooldown branches): "all", or a comma list (with the last step and a
            # stop's save); the others are eval-only (parameters and metadata, what eval reads)
        )
    )
    # Device mesh ('data', 'fsdp', 'tensor') [+ 'seq' when seq > 1]; -1 = all remaining devices.
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1, seq=1))
    return c
