"""The four architectures of the paper as Flax NNX modules (more register via models.registry:
a module in this package that calls `registry.register` is found and imported on import).

    from linscale_jax.models import build_model, ModelConfig
    cfg = ModelConfig.from_config(config.model)
    model = build_model(cfg, rngs=nnx.Rngs(0))
    logits = model(tokens, segment_ids=None)               # [b,t] int -> [b,t,v] float32
    state = model.init_state(batch_size, max_len); logits, state = model.extend(tokens, state)
    variant_change("cosformer2", "tpe", "none")  # a variant label's change: {"cosformer2": {"tpe": "none"}}
"""

from linscale_jax.models import registry
from linscale_jax.models.build import build_model, model_class
from linscale_jax.models.config import ModelConfig
from linscale_jax.models.variants import variant_change

# Every module of this package that registers an architecture is imported here, found by
# registry.discover (no list to edit): a new architecture is one file in linscale_jax/models/.
registry.discover(__name__, __path__)

__all__ = ["ModelConfig", "build_model", "model_class", "registry", "variant_change"]
