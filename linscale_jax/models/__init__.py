"""The four architectures of the paper as Flax NNX modules (more register via models.registry).

    from linscale_jax.models import build_model, ModelConfig
    cfg = ModelConfig.from_config(config.model)
    model = build_model(cfg, rngs=nnx.Rngs(0))
    logits = model(tokens, segment_ids=None)               # [b,t] int -> [b,t,v] float32
    state = model.init_state(batch_size, max_len); logits, state = model.extend(tokens, state)
"""

from linscale_jax.models import registry
from linscale_jax.models.build import build_model, model_class
from linscale_jax.models.config import ModelConfig

# The paper's four register themselves on import, in the paper's order (registry.ARCHS).
from linscale_jax.models import llama, tnl, hgrn2, cosformer2  # noqa: E402,F401  isort: skip

__all__ = ["ModelConfig", "build_model", "model_class", "registry"]
