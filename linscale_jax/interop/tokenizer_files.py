"""The tokenizer an export carries, written beside its weights: the run's data.vocab as files.

    ids = tokenizer_files.write(out_dir, config.data)   # {"eos_token_id": 1, "pad_token_id": 0, ...}

  data.vocab        files written
  byte              tokenizer.json (a `tokenizers` byte-level BPE without merges: byte b -> id b + 3,
                    pad 0, eos 1, unk 2, as data.tokenize) + tokenizer_config.json
  hf:P              P copied as tokenizer.json + tokenizer_config.json
  sentencepiece:P   P copied as tokenizer.model
  cl100k_base       the local BPE file copied as cl100k_base.tiktoken

`tokenizers.Tokenizer.from_file(out/"tokenizer.json").encode(text, add_special_tokens=False).ids`
gives the ids training used (tests check it for the byte vocabulary). The special tokens of the
byte vocabulary are vocabulary entries, not added tokens, so text such as "</s>" inside a document
stays bytes as in training; tokenizer_config.json names them for transformers'
PreTrainedTokenizerFast (which does match them in text).
"""

from __future__ import annotations

import json
import os
import shutil

from linscale_jax.data import tokenize

BYTE_SPECIALS = ("<pad>", "</s>", "<unk>")  # ids 0, 1, 2 (tokenize.BYTE_OFFSET = 3)


def _byte_chars() -> dict[int, str]:
    """Byte -> the printable character byte-level BPE (GPT-2's alphabet) stands it for."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + i) for i, b in enumerate(moved)}}


def byte_tokenizer():
    """A `tokenizers.Tokenizer` with the byte vocabulary's ids (see module docstring)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate(BYTE_SPECIALS)}
    vocab.update({ch: b + tokenize.BYTE_OFFSET for b, ch in _byte_chars().items()})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def _config(out: str, tok: tokenize.Tokenizer, names: dict) -> None:
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(tokenizer_class="PreTrainedTokenizerFast", add_bos_token=False, add_eos_token=False,
                       clean_up_tokenization_spaces=False, **names), f, indent=2)


def write(out: str, data_config) -> dict:
    """Write data_config.vocab's tokenizer files into `out`; returns the config.json token ids."""
    spec = data_config.vocab
    tok = tokenize.get(spec, data_config.get("tiktoken_file", ""))
    ids = dict(eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    if spec == "byte":
        byte_tokenizer().save(os.path.join(out, "tokenizer.json"))
        _config(out, tok, dict(zip(("pad_token", "eos_token", "unk_token"), BYTE_SPECIALS)))
        return ids
    if spec == "cl100k_base":
        shutil.copyfile(tokenize.cl100k_file(data_config.get("tiktoken_file", "")),
                        os.path.join(out, "cl100k_base.tiktoken"))
        return ids
    kind, path = spec.split(":", 1)
    if kind == "sentencepiece":
        shutil.copyfile(path, os.path.join(out, "tokenizer.model"))
        return ids
    shutil.copyfile(path, os.path.join(out, "tokenizer.json"))
    import tokenizers

    hf = tokenizers.Tokenizer.from_file(path)
    _config(out, tok, dict(eos_token=hf.id_to_token(tok.eos_id), pad_token=hf.id_to_token(tok.pad_id)))
    return ids
