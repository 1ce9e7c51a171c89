"""The lm-eval command line with our "linscale" model registered and linscale_jax/eval/tasks/ on the task path.

    python -m linscale_jax.eval.lm_eval --model linscale --model_args workdir=DIR,step=S \
        --tasks linscale_commonsense --batch_size 16 --output_path DIR/eval/lm_eval

Every lm-eval flag works as with `lm_eval` itself. Why a wrapper: lm-eval 0.4.x finds models only in
its own registry (no plugin entry points), so the process that parses `--model linscale` must import
eval.lm_backend first; this module does that and then hands over to lm_eval's CLI.
"""

import importlib.resources
import sys

TASKS_DIR = str(importlib.resources.files("linscale_jax.eval").joinpath("tasks"))  # package data


def main(argv=None) -> None:
    import linscale_jax.eval.lm_backend  # noqa: F401  (registers "linscale")
    from lm_eval.__main__ import cli_evaluate

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and "--include_path" not in argv and not any(a.startswith("--include_path=") for a in argv):
        argv += ["--include_path", TASKS_DIR]
    sys.argv = ["lm_eval"] + argv
    cli_evaluate()


if __name__ == "__main__":
    main()
