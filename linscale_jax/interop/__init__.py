"""Weights in and out: converters between released PyTorch checkpoints and linscale_jax models.

    hf_llama        Hugging Face LlamaForCausalLM  <->  llama          (both directions)
    transnormerllm  OpenNLPLab TransNormerLLM      <->  tnl            (released variant switches)
    hgrn2           hgru2-pytorch (official) / fla HGRN2ForCausalLM <-> hgrn2

Each format has a pair `model_config(hf_config) -> dict` (a `model` config section, with the
released-variant switches set) and `to_params(hf_config, state) -> {param path: array}` (registry in
`loading.CONVERTERS`); `loading.load(format, src) -> (model section, model)` reads a checkpoint
directory (config.json + safetensors or PyTorch .bin). The exports are the inverses,
`from_params(cfg, variant, params) -> (config.json, state)` per format, behind `export.export`
(which refuses a model its layout cannot hold exactly); `tokenizer_files` writes the run's tokenizer
beside them. `python -m linscale_jax.interop.convert` is the command-line front end.
"""

FORMATS = ("hf-llama", "transnormerllm", "hgrn2-fla", "hgrn2-official")
