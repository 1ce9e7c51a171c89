"""Convert released checkpoints to linscale_jax checkpoints, and runs back to the released layouts.

    python -m linscale_jax.interop.convert --from=FORMAT --src=HF_DIR --workdir=WORKDIR
        FORMAT: hf-llama | transnormerllm | hgrn2-fla | hgrn2-official
        -> WORKDIR/checkpoints/0/ (Orbax, via checkpoint.save_model; accepted by train --init_from
           and eval) and WORKDIR/config.json (the full experiment config)
    python -m linscale_jax.interop.convert --to=FORMAT --workdir=WORKDIR [--step=N] --out=HF_DIR
        FORMAT: hf-llama (llama runs) | transnormerllm (tnl) | hgrn2-official, hgrn2-fla (hgrn2)
        -> HF_DIR/config.json + model.safetensors in the layout that --from=FORMAT reads (and the
           released code loads), and the run's tokenizer (interop.tokenizer_files). A model the
           layout cannot hold exactly (interop.export), and cosFormer2, are refused in one line.
"""

from __future__ import annotations

import argparse
import os
import sys

from linscale_jax.errors import ArgumentParser
from linscale_jax.interop import FORMATS

EXPORTS = FORMATS  # every imported layout is written back (interop.export.LAYOUTS)


def _parse(argv):
    p = ArgumentParser(prog="python -m linscale_jax.interop.convert", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="src_format", choices=FORMATS, help="import: format of --src")
    p.add_argument("--to", dest="dst_format", choices=EXPORTS, help="export: the layout to write --workdir in")
    p.add_argument("--src", help="import: the released checkpoint directory")
    p.add_argument("--workdir", required=True, help="our run directory (import: created; export: read)")
    p.add_argument("--out", help="export: the Hugging Face directory to write")
    p.add_argument("--step", type=int, default=None, help="export: checkpoint step (default latest)")
    args = p.parse_args(argv)
    if (args.src_format is None) == (args.dst_format is None):
        p.error("give exactly one of --from=FORMAT (import) or --to=FORMAT (export).")
    if args.src_format and (args.src is None or args.out is not None):
        p.error("import: --from=FORMAT --src=DIR --workdir=NEW_RUN (no --out).")
    if args.dst_format and (args.out is None or args.src is not None):
        p.error("export: --to=FORMAT --workdir=RUN --out=NEW_DIR (no --src).")
    args.target, args.target_flag = ((args.workdir, "--workdir") if args.src_format
                                     else (args.out, "--out"))
    return args


def import_checkpoint(fmt: str, src: str, out: str) -> str:
    from linscale_jax.run import checkpoint as ckpt
    from linscale_jax.models.accounting import param_counts
    from linscale_jax.interop.loading import experiment_config, load
    from linscale_jax.models import ModelConfig

    section, model = load(fmt, src)
    config = experiment_config(section)
    config.name = f"converted-{fmt}"
    counts = param_counts(ModelConfig.from_config(config.model))
    ckpt.save_model(out, model, config, step=0,
                    metadata=dict(source=os.path.abspath(src), source_format=fmt))
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        f.write(config.to_json(indent=2))
    print(f"converted {fmt} {src} -> {out}: {section['arch']} l={section['n_layers']} "
          f"d={section['d_model']} h={section['n_heads']}, {counts['total']:,} parameters")
    return out


def check_export(fmt: str, src: str, step=None):
    """Refuse before anything is written: a model the layout cannot hold, a tokenizer file gone."""
    from linscale_jax.data import tokenize
    from linscale_jax.interop import export
    from linscale_jax.models import ModelConfig
    from linscale_jax.run import checkpoint as ckpt

    workdir, step = ckpt.resolve(src, step)
    steps = ckpt.list_steps(workdir)
    if not steps:
        raise FileNotFoundError(f"--workdir={src}: no complete checkpoint there; pass a run directory.")
    config = ckpt.config_from_metadata(ckpt.load_metadata(workdir, steps[-1] if step is None else step))
    export.check(fmt, ModelConfig.from_config(config.model))
    tokenize.get(config.data.vocab, config.data.get("tiktoken_file", ""))


def export_checkpoint(fmt: str, src: str, out: str, step=None) -> str:
    from linscale_jax.interop import export, hf_io, tokenizer_files
    from linscale_jax.models import ModelConfig
    from linscale_jax.run import checkpoint as ckpt

    model, config, meta = ckpt.load_model(src, step=step)
    hf_config, state = export.export(fmt, model, ModelConfig.from_config(config.model))
    os.makedirs(out, exist_ok=True)
    hf_config.update(tokenizer_files.write(out, config.data))
    hf_io.write_checkpoint(out, hf_config, state)
    print(f"exported {src} step {meta['step']} -> {out} ({export.LAYOUTS[fmt].name}, {len(state)} tensors, "
          f"tokenizer of data.vocab={config.data.vocab})")
    return out


def main(argv=None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    out, flag = args.target, args.target_flag  # the directory this command creates
    if os.path.isdir(out) and os.listdir(out):
        print(f"ERROR: {flag}={out} is not empty (it holds {sorted(os.listdir(out))[:4]}); "
              "pass a new or empty directory: convert never writes into an existing run.",
              file=sys.stderr)
        return 1
    if os.path.exists(out) and not os.path.isdir(out):
        print(f"ERROR: {flag}={out} is a file; pass a new or empty directory.", file=sys.stderr)
        return 1
    from linscale_jax.run import command
    from linscale_jax.run import lock

    def convert():  # errors: one line, traceback in a log; a failed conversion into a directory
        if args.dst_format:  # it created leaves none (lock.claim)
            check_export(args.dst_format, args.workdir, args.step)
        with lock.claim(out):
            if args.src_format:
                import_checkpoint(args.src_format, args.src, args.workdir)
            else:
                export_checkpoint(args.dst_format, args.workdir, args.out, args.step)

    return command.run(convert, workdir=out, command="convert")


if __name__ == "__main__":
    sys.exit(main())
