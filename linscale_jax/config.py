"""Experiment configuration: one ml_collections ConfigDict with fixed sections.

Sections and their owners:
  model       architecture and shape (read by linscale_jax.models and linscale_jax.accounting)
  train       steps, batch, sequence length, seed, logging/eval cadence
  optim       AdamW and the learning-rate schedule
  data        seqio task, vocabulary, packing
  checkpoint  Orbax checkpoint schedule and retention
  mesh        device-mesh shape: ('data', 'fsdp', 'tensor') [+ 'seq']

Config files in configs/ call `experiment_config(arch, size)` and adjust fields; users override any
field on the command line (`--config.train.steps=100`).
"""

from __future__ import annotations

import ml_collections

ARCHS = ("llama", "tnl", "hgrn2", "cosformer2")


def model_defaults() -> ml_collections.ConfigDict:
    """Model section with the documented defaults for every choice the paper leaves open."""
    return ml_collections.ConfigDict(
        dict(
            arch="llama",  # llama | tnl | hgrn2 | cosformer2
            size="custom",  # label only: 70m, 160m, ... or a ladder name such as d128
            n_layers=2,
            d_model=128,
            n_heads=1,  # head dim = d_model // n_heads (128 at every paper size)
            ffn_dim=256,  # g; paper rule 256 * ceil(int(8d/3) / 256)
            vocab_size=256,
            max_seq_len=8192,  # longest sequence the model accepts (RoPE/LRPE tables, caches)
            dtype="float32",  # compute dtype: float32 | bfloat16 (parameters stay float32)
            param_dtype="float32",
            init_std=0.02,  # normal init of every weight matrix and the embedding
            norm_eps=1e-6,  # RMSNorm / SimpleRMSNorm epsilon
            rope_theta=10000.0,  # llama
            impl="auto",  # linear attention: auto | reference | xla | pallas
            chunk_size=None,  # chunk length of the chunked forms; None = the backend's default
            tnl_decay_rule="alibi_layer",  # alibi_layer (released TNL) | fla
            tpe="lightnet",  # cosformer2 Toeplitz positional encoding: lightnet (paper) | xmixers | none
            remat="none",  # none | block | dots  (activation checkpointing per block)
            scan_layers=False,  # scan over a stacked layer axis (faster compiles for deep models)
            # --- variants of released checkpoints (interop); the defaults are the paper's blocks ---
            n_kv_heads=0,  # llama grouped-query attention: key/value heads (0 = n_heads)
            tie_embeddings=True,  # False: separate LM head `lm_head` [d, vocab]
            embed_scale="none",  # none | sqrt_d (embedding output multiplied by sqrt(d))
            norm_scale=False,  # linear models: learnable scale in every RMSNorm (llama always has it)
            mixer_norm_eps=0.0,  # eps of the mixer output norm (0 = norm_eps)
            glu_act="none",  # linear models' GLU activation: none (paper) | silu (llama: always silu)
            hgrn2_q_scale="one",  # one (paper) | rsqrt_k (fla: q scaled by (d/h)^-1/2)
            tnl_gate="lowrank",  # lowrank (paper: sigmoid(X W_gdown W_gup)) | linear (released: X W_u)
            tnl_lrpe=False,  # released TransNormerLLM: LRPE on TNL's q, k (θ [h, d/h] per layer)
        )
    )


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
            peak_flops=0.0,  # per-device peak FLOP/s for MFU; 0: $LINSCALE_PEAK_FLOPS, a known
            #                  accelerator's bf16 peak, or a measured f32 matmul peak on CPU
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
        )
    )
    # Device mesh ('data', 'fsdp', 'tensor') [+ 'seq' when seq > 1]; -1 = all remaining devices.
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, tensor=1, seq=1))
    return c
