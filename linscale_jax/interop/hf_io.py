"""Reading and writing Hugging Face style checkpoint directories, and moving arrays into models.

A checkpoint directory holds `config.json` and weights in one of
    model.safetensors | model-XXXXX-of-YYYYY.safetensors (+ model.safetensors.index.json)
    pytorch_model.bin | pytorch_model-XXXXX-of-YYYYY.bin (+ pytorch_model.bin.index.json)
Safetensors are read with `safetensors.numpy` (no torch needed); .bin files need torch.
Weights come back as {name: float32 numpy array}. Parameter paths of our models are '/'-joined
nnx paths, e.g. 'layers/0/mixer/wq/kernel'.
"""

from __future__ import annotations

import glob
import json
import os

import jax.numpy as jnp
import numpy as np
from flax import nnx

from linscale_jax.run.extras import MissingExtra


def read_config(src: str) -> dict:
    path = os.path.join(src, "config.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{src}: no config.json. Pass --src=<directory holding config.json and the weights> "
            "(a Hugging Face snapshot directory)."
        )
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}); re-download the checkpoint.") from e


def _to_numpy(tensor) -> np.ndarray:
    if hasattr(tensor, "detach"):  # torch
        tensor = tensor.detach().float().cpu().numpy()
    return np.asarray(tensor, dtype=np.float32)


def read_weights(src: str) -> dict[str, np.ndarray]:
    """All tensors of the checkpoint in `src` as float32 numpy arrays."""
    st_files = sorted(glob.glob(os.path.join(src, "*.safetensors")))
    bin_files = sorted(glob.glob(os.path.join(src, "*.bin")))
    state: dict[str, np.ndarray] = {}
    if st_files:
        from safetensors.numpy import load_file

        for path in st_files:
            try:
                part = load_file(path)
            except Exception as e:  # truncated / not a safetensors file
                raise ValueError(f"{path}: cannot read safetensors ({e}); re-download it.") from e
            state.update({k: _to_numpy(v) for k, v in part.items()})
    elif bin_files:
        try:
            import torch
        except ModuleNotFoundError as e:
            if e.name != "torch":
                raise
            raise MissingExtra("interop", why=f"{src} holds PyTorch .bin weights", module="torch",
                               instead="convert them to safetensors first") from None
        for path in bin_files:
            try:
                part = torch.load(path, map_location="cpu", weights_only=True)
            except Exception as e:
                raise ValueError(f"{path}: cannot read the PyTorch checkpoint ({e}).") from e
            state.update({k: _to_numpy(v) for k, v in part.items()})
    else:
        raise FileNotFoundError(
            f"{src}: no *.safetensors or *.bin weight files next to config.json."
        )
    return state


def write_checkpoint(out: str, config: dict, state: dict[str, np.ndarray]) -> None:
    """Write config.json + model.safetensors (float32) into directory `out`."""
    from safetensors.numpy import save_file

    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, sort_keys=True)
    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in state.items()}
    save_file(arrays, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


def take(state: dict[str, np.ndarray], name: str, shape=None) -> np.ndarray:
    """state[name] with a clear error when it is missing or mis-shaped."""
    if name not in state:
        near = sorted(k for k in state if k.split(".")[-1] == name.split(".")[-1])[:5]
        raise KeyError(
            f"checkpoint has no tensor {name!r} (similar: {near}); is --from the right format?"
        )
    arr = state[name]
    if shape is not None and tuple(arr.shape) != tuple(shape):
        raise ValueError(f"tensor {name!r} has shape {arr.shape}, expected {tuple(shape)} from config.json.")
    return arr


def _path_key(path) -> str:
    return "/".join(str(p) for p in path)


def model_params(model) -> dict[str, np.ndarray]:
    """{path: float32 numpy array} for every nnx.Param of `model`."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {_path_key(p): np.asarray(v[...], np.float32) for p, v in flat}


def set_model_params(model, values: dict[str, np.ndarray]) -> None:
    """Overwrite every nnx.Param of `model` from `values`; every parameter must be covered, every
    value must be used, and shapes must match exactly."""
    flat = list(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    expected = {_path_key(p): p for p, _ in flat}
    missing = sorted(set(expected) - set(values))
    unused = sorted(set(values) - set(expected))
    if missing or unused:
        raise ValueError(
            f"weight conversion does not cover the model: missing {missing[:8]}, unused {unused[:8]}. "
            "The model config built from config.json does not match the converter's mapping."
        )
    for key, path in expected.items():
        obj = model
        for part in path[:-1]:
            obj = obj[part] if isinstance(part, int) else getattr(obj, part)
        var = getattr(obj, path[-1])
        value = np.asarray(values[key], np.float32)
        if tuple(var.shape) != value.shape:
            raise ValueError(f"parameter {key}: model shape {tuple(var.shape)} != converted {value.shape}.")
        var[...] = jnp.asarray(value)
