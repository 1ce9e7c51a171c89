"""Training: the command (cli), the loop (loop.train), the optimizer (optim), step metrics and
logging (metrics), divergence detection (divergence).

    python -m linscale_jax.train --config=configs/tiny.py --workdir=DIR
    from linscale_jax.train import loop; loop.train(config, workdir)
"""
