"""Vocabularies selected by `data.vocab`, as seqio.Vocabulary objects (for seqio Tasks and eval).

  byte              seqio.ByteVocabulary: pad 0, eos 1, unk 2, bytes 3..258; vocab_size 259.
  sentencepiece:P   seqio.SentencePieceVocabulary of the model file P (pad 0, eos 1, unk 2); train one
                    with `python -m linscale_jax.data.train_spm`.
  cl100k_base       tiktoken's cl100k_base BPE from a local file, ids as in tiktoken (eos is
                    <|endoftext|> = 100257), padded to 100,280 ids as in the paper; pad = 100277.
  hf:P              a Hugging Face tokenizer.json (the `tokenizers` package); see data.tokenize.

Id conventions used by the packer: `pad_id` marks padding and is fed as the input at the first
position of every packed segment (the T5/seqio "shifted" convention); `eos_id` ends every document.
The ids are those of data.tokenize (what `prepare` runs, without TensorFlow); tests check both agree.
"""

from __future__ import annotations

import functools
import hashlib
import os

from linscale_jax.data import tokenize
from linscale_jax.data._tf import seqio, tf
from linscale_jax.data.errors import DataError  # noqa: F401  (re-exported for callers)
from linscale_jax.data.tokenize import CL100K_PADDED_SIZE, CL100K_URL, VOCAB_FORMS  # noqa: F401


class PyVocabulary(seqio.Vocabulary):
    """A seqio.Vocabulary over a data.tokenize.Tokenizer (encode_tf through tf.py_function)."""

    def __init__(self, tok: tokenize.Tokenizer):
        self.tok = tok
        super().__init__(extra_ids=0)

    @property
    def eos_id(self) -> int:
        return self.tok.eos_id

    @property
    def pad_id(self) -> int:
        return self.tok.pad_id

    @property
    def unk_id(self):
        return None

    @property
    def _base_vocab_size(self) -> int:
        return self.tok.vocab_size

    def _encode(self, s: str):
        return self.tok.encode_batch([s])[0].tolist()

    def _decode(self, ids):
        return self.tok.decode(list(ids))

    def _encode_tf(self, s):
        ids = tf.py_function(lambda x: tf.constant(self._encode(x.numpy().decode("utf-8")), tf.int32), [s], tf.int32)
        ids.set_shape([None])
        return ids

    def _decode_tf(self, ids):
        text = tf.py_function(lambda x: self._decode(x.numpy().tolist()), [ids], tf.string)
        text.set_shape([])
        return text

    def __eq__(self, other):
        return isinstance(other, PyVocabulary) and other.tok.spec == self.tok.spec \
            and other.tok.fingerprint == self.tok.fingerprint

    def __hash__(self):
        return hash((self.tok.spec, self.tok.fingerprint))


class Cl100kVocabulary(PyVocabulary):
    """tiktoken cl100k_base read from a local BPE file (never downloaded).

    Special-token text inside documents is encoded as ordinary text (`encode_ordinary`).
    """

    def __init__(self, bpe_file: str):
        self._bpe_file = bpe_file
        super().__init__(tokenize.get("cl100k_base", bpe_file))

    @functools.cached_property
    def encoding(self):
        return tokenize.cl100k_encoding(self._bpe_file)


def cl100k_file(data_config) -> str:
    """Local cl100k_base BPE file: data.tiktoken_file, else tiktoken's cache (TIKTOKEN_CACHE_DIR, ...)."""
    return tokenize.cl100k_file(data_config.get("tiktoken_file", ""))


def vocab_key(vocab: str) -> str:
    """Short stable tag of a `data.vocab` value, used in task names."""
    tokenize.check_spec(vocab)
    if vocab in ("byte", "cl100k_base"):
        return vocab
    kind, path = vocab.split(":", 1)
    tag = "spm" if kind == "sentencepiece" else "hf"
    return f"{tag}_" + hashlib.sha1(os.path.abspath(path).encode()).hexdigest()[:10]


def get_vocabulary(data_config) -> seqio.Vocabulary:
    """The seqio.Vocabulary named by `data_config.vocab` (see module docstring)."""
    return _vocabulary(data_config.vocab, data_config.get("tiktoken_file", ""))


@functools.lru_cache(maxsize=None)
def _vocabulary(vocab: str, tiktoken_file: str) -> seqio.Vocabulary:
    vocab_key(vocab)  # validates the name
    if vocab == "byte":
        return seqio.ByteVocabulary()
    if vocab == "cl100k_base":
        return Cl100kVocabulary(tokenize.cl100k_file(tiktoken_file))
    tok = tokenize.get(vocab)  # checks the file exists
    if vocab.startswith("hf:"):
        return PyVocabulary(tok)
    return seqio.SentencePieceVocabulary(vocab.split(":", 1)[1])
