"""Tokenizers named by `data.vocab`, without TensorFlow: what `prepare` runs over many cores.

  tok = tokenize.get("hf:/path/tokenizer.json")
  ids = tok.encode_batch(["text", ...])     # list of int32 [t_doc] arrays (no EOS appended)
  tok.decode(ids); tok.vocab_size, tok.eos_id, tok.pad_id, tok.fingerprint

  byte              UTF-8 bytes offset by 3: pad 0, eos 1, unk 2, bytes 3..258 (seqio.ByteVocabulary ids).
  sentencepiece:P   the SentencePiece model file P (pad 0, eos from the model).
  cl100k_base       tiktoken's cl100k_base from a local BPE file (data.tiktoken_file or tiktoken's
                    cache); special-token text in documents is encoded as text; eos <|endoftext|> =
                    100257, pad 100277, padded to 100,280 ids as in the paper.
  hf:P              a Hugging Face `tokenizers` tokenizer.json (GPT-2, LLaMA-3, one trained locally).
                    No special tokens are added to documents (the library still reads special-token
                    text inside a document as that token); eos is its end-of-text token
                    (HF_EOS_TOKENS), pad its padding token (HF_PAD_TOKENS) or else eos.

The seqio.Vocabulary wrappers in data.vocab give the same ids (tests check it).
`fingerprint` is the sha256 of the vocabulary's model file ("byte" for bytes): prepared records
store it, so a run can refuse records made with another tokenizer.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import tempfile
from typing import Callable
from unittest import mock

import numpy as np

from linscale_jax.data.errors import DataError

VOCAB_FORMS = "byte | sentencepiece:<path to .model> | cl100k_base | hf:<path to tokenizer.json>"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
TIKTOKEN_DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "data-gym-cache")  # tiktoken's default
CL100K_PADDED_SIZE = 100_280  # paper: 100,277 tiktoken ids padded to a multiple of 8
CL100K_PAD = 100_277  # first id after tiktoken's 100,277; unused by cl100k_base
BYTE_OFFSET = 3  # pad, eos, unk come before the 256 byte ids
HF_EOS_TOKENS = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>", "[EOS]", "[SEP]")
HF_PAD_TOKENS = ("<pad>", "[PAD]", "<|pad|>", "<|padding|>")


@dataclasses.dataclass(frozen=True)
class Tokenizer:
    """One vocabulary's encode/decode and id conventions (see module docstring)."""

    spec: str  # the data.vocab value
    vocab_size: int
    eos_id: int
    pad_id: int
    fingerprint: str
    encode_batch: Callable[[list[str]], list[np.ndarray]]
    decode: Callable[[list[int]], str]

    def encode_with_eos(self, texts: list[str]) -> list[np.ndarray]:
        """int32 [t_doc + 1] per text: its ids and EOS (what the packer concatenates)."""
        eos = np.array([self.eos_id], np.int32)
        return [np.concatenate([np.asarray(ids, np.int32), eos]) for ids in self.encode_batch(texts)]


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cl100k_file(tiktoken_file: str = "") -> str:
    """Local cl100k_base BPE file: tiktoken_file, else tiktoken's cache (TIKTOKEN_CACHE_DIR, ...)."""
    if tiktoken_file:
        if not os.path.isfile(tiktoken_file):
            raise DataError(f"data.tiktoken_file={tiktoken_file!r} does not exist. {CL100K_HOWTO}")
        return tiktoken_file
    key = hashlib.sha1(CL100K_URL.encode()).hexdigest()  # tiktoken's cache file name
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR"), TIKTOKEN_DEFAULT_CACHE]
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, key)):
            return os.path.join(d, key)
    raise DataError(f"vocab cl100k_base needs its BPE file and none was found locally. {CL100K_HOWTO}")


CL100K_HOWTO = (
    "Download cl100k_base.tiktoken once on a machine with internet "
    f"(curl -o cl100k_base.tiktoken {CL100K_URL}) and pass --config.data.tiktoken_file=PATH, or put "
    "it in $TIKTOKEN_CACHE_DIR under tiktoken's cache name "
    f"{hashlib.sha1(CL100K_URL.encode()).hexdigest()}."
)


def cl100k_encoding(bpe_file: str):
    """tiktoken's own cl100k_base spec (regex, special tokens) with the BPE ranks of a local file."""
    import tiktoken
    import tiktoken.load
    import tiktoken_ext.openai_public as public

    if file_sha256(bpe_file) != CL100K_SHA256:
        logging.warning("%s is not the official cl100k_base file", bpe_file)
    load = lambda _url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(bpe_file)  # noqa: E731
    with mock.patch.object(public, "load_tiktoken_bpe", load):
        spec = public.cl100k_base()
    return tiktoken.Encoding(**spec)


def check_spec(spec: str) -> None:
    """Raise DataError unless `spec` is one of VOCAB_FORMS."""
    if spec in ("byte", "cl100k_base") or (spec.startswith(("sentencepiece:", "hf:")) and spec.split(":", 1)[1]):
        return
    raise DataError(f"unknown data.vocab={spec!r}; use one of: {VOCAB_FORMS}")


@functools.lru_cache(maxsize=None)
def get(spec: str, tiktoken_file: str = "") -> Tokenizer:
    """The Tokenizer of a data.vocab value (see module docstring)."""
    check_spec(spec)
    if spec == "byte":
        return _byte()
    if spec == "cl100k_base":
        return _cl100k(cl100k_file(tiktoken_file))
    kind, path = spec.split(":", 1)
    if not os.path.isfile(path):
        if kind == "hf":
            raise DataError(f"tokenizer file {path!r} (data.vocab={spec!r}) does not exist; pass the path of a "
                            "Hugging Face tokenizer.json (saved with tokenizer.save(PATH) or from a model repo)")
        raise DataError(
            f"SentencePiece model {path!r} (data.vocab={spec!r}) does not exist. Train one with "
            f"`python -m linscale_jax.data.train_spm --corpus=stdlib --vocab_size=8000 --out={path}`."
        )
    return _sentencepiece(spec, path) if kind == "sentencepiece" else _hf(spec, path)


def _byte() -> Tokenizer:
    def encode_batch(texts):
        return [np.frombuffer(t.encode("utf-8"), np.uint8).astype(np.int32) + BYTE_OFFSET for t in texts]

    def decode(ids):
        ids = np.asarray(ids, np.int64)
        ids = ids[(ids >= BYTE_OFFSET) & (ids < BYTE_OFFSET + 256)] - BYTE_OFFSET
        return ids.astype(np.uint8).tobytes().decode("utf-8", errors="ignore")

    return Tokenizer("byte", 256 + BYTE_OFFSET, 1, 0, "byte", encode_batch, decode)


def _sentencepiece(spec: str, path: str) -> Tokenizer:
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=path)

    def encode_batch(texts):
        return [np.asarray(ids, np.int32) for ids in sp.encode(list(texts))]

    def decode(ids):
        return sp.decode([int(i) for i in ids if 0 <= i < sp.get_piece_size() and i not in (0, sp.eos_id())])

    return Tokenizer(spec, sp.get_piece_size(), sp.eos_id(), 0, file_sha256(path), encode_batch, decode)


def _cl100k(bpe_file: str) -> Tokenizer:
    enc = cl100k_encoding(bpe_file)

    def encode_batch(texts):
        return [np.asarray(ids, np.int32) for ids in enc.encode_ordinary_batch(list(texts), num_threads=1)]

    def decode(ids):
        return enc.decode([int(i) for i in ids if 0 <= i < enc.n_vocab and i != enc.eot_token])

    return Tokenizer("cl100k_base", CL100K_PADDED_SIZE, enc.eot_token, CL100K_PAD, file_sha256(bpe_file),
                     encode_batch, decode)


def _hf(spec: str, path: str) -> Tokenizer:
    import tokenizers

    try:
        tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # the Rust parser's message names the problem
        raise DataError(f"{path} is not a Hugging Face tokenizer.json ({str(e).splitlines()[0]}); pass the "
                        "tokenizer.json file itself (data.vocab=hf:PATH)") from None
    vocab = tok.get_vocab(with_added_tokens=True)
    eos = next((vocab[t] for t in HF_EOS_TOKENS if t in vocab), None)
    if eos is None:
        raise DataError(f"{path} has no end-of-text token (one of {HF_EOS_TOKENS}); add one as a special token "
                        "(tokenizer.add_special_tokens([...])) and save the tokenizer again")
    pad = next((vocab[t] for t in HF_PAD_TOKENS if t in vocab), eos)
    size = max(tok.get_vocab_size(with_added_tokens=True), max(vocab.values()) + 1)

    def encode_batch(texts):
        return [np.asarray(e.ids, np.int32) for e in tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(ids):
        return tok.decode([int(i) for i in ids if 0 <= i < size], skip_special_tokens=True)

    return Tokenizer(spec, size, eos, pad, file_sha256(path), encode_batch, decode)
