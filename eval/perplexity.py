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
Files: .jsonl (one JSON object per line, field `text`, or `page` for wikitext dumps) or .txt
(wikitext raw: documents start at top-level " = Title = " heading lines; otherwise documents are
separated by blank lines).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from lm_eval.api.instance import Instance

from eval.loading import EvalError

_HEADING = re.compile(r"^ = [^=].* = $")


def read_documents(path, text_key: str = "text") -> list[str]:
    p = Path(path)
    if not p.is_file():
        raise EvalError(f"data file {p} does not exist")
    try:
        raw = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise EvalError(f"{p} is not valid UTF-8 ({e}); re-encode it as UTF-8") from e
    docs: list[str] = []
    if p.suffix == ".jsonl":
        for n, line in enumerate(raw.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise EvalError(f"{p}:{n} is not valid JSON ({e.msg}); one JSON object per line") from e
            text = obj.get(text_key, obj.get("page")) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                raise EvalError(f"{p}:{n} has no string field {text_key!r}")
            docs.append(text)
    else:
        lines = raw.split("\n")
        if any(_HEADING.match(x) for x in lines):
            cur: list[str] = []
            for x in lines:
                if _HEADING.match(x) and any(c.strip() for c in cur):
                    docs.append("\n".join(cur))
                    cur = []
                cur.append(x)
            docs.append("\n".join(cur))
        else:
            docs = raw.split("\n\n")
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
