"""Word-level perplexity (WikiText-2 style) and LAMBADA last-word accuracy from local files.

    wikitext(lm, path) -> {"word_ppl", "byte_ppl", "bits_per_byte", "docs", "words"}
    lambada(lm, path)  -> {"lambada_ppl", "lambada_acc", "examples"}

`lm` is an eval.lm_backend.LinscaleLM. Definitions follow lm-eval's `wikitext` and `lambada` tasks:
  wikitext: each document is scored whole with loglikelihood_rolling (prefixed by EOS);
            word_ppl = exp(-sum ll / sum words), words = len(re.split(r"\\s+", doc)),
            byte_ppl = exp(-sum ll / sum bytes), bits_per_byte = -sum ll / (ln 2 * sum bytes).
  lambada:  context = text up to the last space, target = " " + last word;
            lambada_ppl = exp(-mean ll(target)), lambada_acc = share of targets that are the greedy
            continuation (every target token is the argmax).
Files: .jsonl (one JSON object per line, field `text`) or .txt
(wikitext raw: documents start at top-level " = Title = " heading lines; otherwise documents are
separated by blank lines).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from lm_eval.api.instance import Instance

from linscale_jax.eval.loading import EvalError
from linscale_jax.data import DataError
from linscale_jax.data.corpora import file_documents
from linscale_jax.data.decode import read_utf8

_HEADING = re.compile(r"^ = [^=].* = $")


def _wikitext_documents(raw: str) -> list[str]:
    lines = raw.split("\n")
    if not any(_HEADING.match(x) for x in lines):
        return raw.split("\n\n")
    docs, cur = [], []
    for x in lines:
        if _HEADING.match(x) and any(c.strip() for c in cur):
            docs.append("\n".join(cur))
            cur = []
        cur.append(x)
    docs.append("\n".join(cur))
    return docs


def read_documents(path, text_key: str = "text") -> list[str]:
    """Documents of a .jsonl file (one object per line, field `text_key`; the data pipeline's own
    reader) or of a wikitext-style .txt file (split at top-level headings, else at blank lines)."""
    p = Path(path)
    if not p.is_file():
        raise EvalError(f"data file {p} does not exist")
    try:
        if p.suffix == ".jsonl":
            docs = file_documents(str(p), text_key, "file")
        else:
            docs = _wikitext_documents(read_utf8(str(p)))
    except DataError as e:
        raise EvalError(str(e)) from None
    docs = [d.strip() for d in docs if d.strip()]
    if not docs:
        raise EvalError(f"{p} contains no documents")
    return docs


def _instances(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=i) for i, a in enumerate(args)]


def wikitext(lm, path) -> dict:
    docs = read_documents(path)
    lls = lm.loglikelihood_rolling(_instances("loglikelihood_rolling", [(d,) for d in docs]))
    ll = sum(lls)
    words = sum(len(re.split(r"\s+", d)) for d in docs)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    return {"word_ppl": math.exp(-ll / words), "byte_ppl": math.exp(-ll / nbytes),
            "bits_per_byte": -ll / (math.log(2) * nbytes), "docs": len(docs), "words": words}


def lambada(lm, path) -> dict:
    docs = read_documents(path)
    pairs = []
    for d in docs:
        if " " not in d:
            raise EvalError(f"LAMBADA example without a space (no last word to predict): {d[:60]!r}")
        ctx, last = d.rsplit(" ", 1)
        pairs.append((ctx, " " + last))
    res = lm.loglikelihood(_instances("loglikelihood", pairs))
    return {"lambada_ppl": math.exp(-sum(r[0] for r in res) / len(res)),
            "lambada_acc": sum(r[1] for r in res) / len(res), "examples": len(res)}
