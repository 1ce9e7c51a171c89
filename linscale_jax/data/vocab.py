"""Vocabularies selected by `data.vocab`: byte (default), sentencepiece:<model>, cl100k_base.

All are seqio.Vocabulary objects. Id conventions used by the pipeline: `pad_id` marks padding and is
fed as the input at the first position of every packed segment (the T5/seqio "shifted" convention);
`eos_id` ends every document.

  byte              seqio.ByteVocabulary: pad 0, eos 1, unk 2, bytes 3..258; vocab_size 259.
  sentencepiece:P   seqio.SentencePieceVocabulary of the model file P (pad 0, eos 1, unk 2); train one
                    with `python -m linscale_jax.data.train_spm`.
  cl100k_base       tiktoken's cl100k_base BPE from a local file, ids as in tiktoken (eos is
                    <|endoftext|> = 100257), padded to 100,280 ids as in the paper; pad = 100277.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
from unittest import mock

from linscale_jax.data._tf import seqio, tf
from linscale_jax.data.errors import DataError

CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
TIKTOKEN_DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "data-gym-cache")  # tiktoken's default
CL100K_PADDED_SIZE = 100_280  # paper: 100,277 tiktoken ids padded to a multiple of 8
VOCAB_FORMS = "byte | sentencepiece:<path to .model> | cl100k_base"


class Cl100kVocabulary(seqio.Vocabulary):
    """tiktoken cl100k_base read from a local BPE file (never downloaded).

    Special-token text inside documents is encoded as ordinary text (`encode_ordinary`).
    """

    def __init__(self, bpe_file: str):
        self._bpe_file = bpe_file
        super().__init__(extra_ids=0)

    @functools.cached_property
    def encoding(self):
        import tiktoken
        import tiktoken.load
        import tiktoken_ext.openai_public as public

        with open(self._bpe_file, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != CL100K_SHA256:
            logging.warning("%s is not the official cl100k_base file (sha256 %s)", self._bpe_file, digest)
        # tiktoken's own cl100k_base spec (regex, special tokens) with the BPE ranks from our file.
        load = lambda _url, expected_hash=None: tiktoken.load.load_tiktoken_bpe(self._bpe_file)  # noqa: E731
        with mock.patch.object(public, "load_tiktoken_bpe", load):
            spec = public.cl100k_base()
        return tiktoken.Encoding(**spec)

    @property
    def eos_id(self) -> int:
        return self.encoding.eot_token

    @property
    def pad_id(self) -> int:
        return 100_277  # first id after tiktoken's 100,277; unused by cl100k_base

    @property
    def unk_id(self):
        return None

    @property
    def _base_vocab_size(self) -> int:
        return CL100K_PADDED_SIZE

    def _encode(self, s: str):
        return self.encoding.encode_ordinary(s)

    def _decode(self, ids):
        n = self.encoding.n_vocab
        return self.encoding.decode([int(i) for i in ids if 0 <= i < n and i != self.eos_id])

    def _encode_tf(self, s):
        ids = tf.py_function(lambda x: tf.constant(self._encode(x.numpy().decode("utf-8")), tf.int32), [s], tf.int32)
        ids.set_shape([None])
        return ids

    def _decode_tf(self, ids):
        text = tf.py_function(lambda x: self._decode(x.numpy().tolist()), [ids], tf.string)
        text.set_shape([])
        return text

    def __eq__(self, other):
        return isinstance(other, Cl100kVocabulary) and other._bpe_file == self._bpe_file

    def __hash__(self):
        return hash(("cl100k", self._bpe_file))


def cl100k_file(data_config) -> str:
    """Local cl100k_base BPE file: data.tiktoken_file, else tiktoken's cache (TIKTOKEN_CACHE_DIR, ...)."""
    explicit = data_config.get("tiktoken_file", "")
    if explicit:
        if not os.path.isfile(explicit):
            raise DataError(f"data.tiktoken_file={explicit!r} does not exist. {_CL100K_HOWTO}")
        return explicit
    key = hashlib.sha1(CL100K_URL.encode()).hexdigest()  # tiktoken's cache file name
    dirs = [os.environ.get("TIKTOKEN_CACHE_DIR"), os.environ.get("DATA_GYM_CACHE_DIR"), TIKTOKEN_DEFAULT_CACHE]
    for d in dirs:
        if d and os.path.isfile(os.path.join(d, key)):
            return os.path.join(d, key)
    raise DataError(f"vocab cl100k_base needs its BPE file and none was found locally. {_CL100K_HOWTO}")


_CL100K_HOWTO = (
    "Download cl100k_base.tiktoken once on a machine with internet "
    f"(curl -o cl100k_base.tiktoken {CL100K_URL}) and pass --config.data.tiktoken_file=PATH, or put "
    "it in $TIKTOKEN_CACHE_DIR under tiktoken's cache name "
    f"{hashlib.sha1(CL100K_URL.encode()).hexdigest()}."
)


def vocab_key(vocab: str) -> str:
    """Short stable tag of a `data.vocab` value, used in task names."""
    if vocab in ("byte", "cl100k_base"):
        return vocab
    if vocab.startswith("sentencepiece:"):
        path = os.path.abspath(vocab.split(":", 1)[1])
        return "spm_" + hashlib.sha1(path.encode()).hexdigest()[:10]
    raise DataError(f"unknown data.vocab={vocab!r}; use one of: {VOCAB_FORMS}")


def get_vocabulary(data_config) -> seqio.Vocabulary:
    """The seqio.Vocabulary named by `data_config.vocab` (see module docstring)."""
    return _vocabulary(data_config.vocab, data_config.get("tiktoken_file", ""))


@functools.lru_cache(maxsize=None)
def _vocabulary(vocab: str, tiktoken_file: str) -> seqio.Vocabulary:
    vocab_key(vocab)  # validates the name
    if vocab == "byte":
        return seqio.ByteVocabulary()
    if vocab == "cl100k_base":
        return Cl100kVocabulary(cl100k_file({"tiktoken_file": tiktoken_file}))
    path = vocab.split(":", 1)[1]
    if not os.path.isfile(path):
        raise DataError(
            f"SentencePiece model {path!r} (data.vocab={vocab!r}) does not exist. Train one with "
            f"`python -m linscale_jax.data.train_spm --corpus=stdlib --vocab_size=8000 --out={path}`."
        )
    return seqio.SentencePieceVocabulary(path)
