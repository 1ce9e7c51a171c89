"""lm-evaluation-harness backend "linscale" for our four architectures.

    lm = LinscaleLM(workdir=DIR, step=S)                 # from a checkpoint (ckpt.load_model)
    lm = LinscaleLM(model=model, vocab=vocab)            # in memory (tests, the study's probe)
    python -m linscale_jax.eval.lm_eval --model linscale --model_args workdir=DIR,step=S --tasks ...

Scoring (loglikelihood, loglikelihood_rolling): requests are sorted by length and run in batches of
`batch_size` rows right-padded to a power-of-two length bucket (causal models: padding never affects
the scored positions), so a whole task compiles a handful of shapes. Inputs longer than `max_length`
(default: the run's training context) are handled by `long_context`:
  window  lm-eval's definition: loglikelihood keeps the last max_length tokens; rolling documents are
          cut into disjoint max_length windows, each predicted from its own window only.
  state   one pass through model.extend carrying the recurrent state (linear models) or KV cache
          (LLaMA) over the whole input, in chunks; every token sees the full prefix. Bounded by the
          model's max_seq_len.
Every context starts with the vocabulary's pad id, the token the trainer feeds at the first position
of every document (seqio's shifted-inputs convention); it is also lm-eval's prefix token for empty
contexts and rolling windows. EOS ends generation.
generate_until: greedy (or sampled, from gen_kwargs) decoding through eval.generate.Generator,
prompt truncated on the left to max_length - max_gen_toks, stopped at any `until` string or EOS.
"""

from __future__ import annotations

from functools import lru_cache, partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
import lm_eval.models  # noqa: F401  (lm-eval's own models stay findable once "linscale" is registered)
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from linscale_jax.eval.generate import Generator
from linscale_jax.eval.loading import Tokens


def _bucket(n: int, cap: int) -> int:
    return min(cap, max(64, 1 << (max(n, 1) - 1).bit_length()))


@register_model("linscale")
class LinscaleLM(TemplateLM, Tokens):
    def __init__(self, workdir=None, step=None, model=None, vocab=None, batch_size=8, max_length=None,
                 long_context="window", max_gen_toks=256, chunk_size=256, **kwargs):
        super().__init__()
        if (workdir is None) == (model is None):
            raise ValueError("LinscaleLM needs exactly one of workdir=DIR (with optional step=S) or an "
                             "in-memory model=... with vocab=...")
        train_len = None
        if workdir is not None:
            from linscale_jax.eval.loading import load_run

            run = load_run(str(workdir), None if step in (None, "", "last") else int(step))
            model, vocab, train_len = run.model, run.vocab, int(run.config.train.seq_len)
        elif vocab is None:
            raise ValueError("an in-memory model needs its vocab=... (a seqio.Vocabulary)")
        if long_context not in ("window", "state"):
            raise ValueError(f"long_context must be 'window' or 'state', got {long_context!r}")
        self.model, self.vocab, self.long_context = model, vocab, long_context
        self.max_seq_len = int(model.cfg.max_seq_len)
        self._max_length = min(int(max_length or train_len or self.max_seq_len), self.max_seq_len)
        self.batch_size = int(batch_size) if str(batch_size).isdigit() else 8  # "auto" -> 8
        self.max_gen_toks = int(max_gen_toks)
        self.generator = Generator(model, chunk_size=int(chunk_size))
        graphdef, params = nnx.split(model)
        self._params = params
        self._score = _score_fn(graphdef)

    # ---- tokenizer -----------------------------------------------------------------------------
    eot_token_id = Tokens.eos_id  # lm-eval's names for the run's own ids (eval.loading.Tokens)
    prefix_token_id = Tokens.bos_id
    tok_decode = Tokens.decode

    @property
    def max_length(self) -> int:
        return self._max_length

    def tok_encode(self, string: str, add_special_tokens=None, **kwargs) -> list[int]:
        """Token ids of `string`, after the start token unless add_special_tokens=False."""
        ids = self.encode(string)
        return ids if add_special_tokens is False else [self.bos_id] + ids

    # ---- scoring -------------------------------------------------------------------------------
    def _rows(self, seqs):
        """seqs: list of (tokens, n_scored): score the last n_scored tokens of each from the rest.
        Returns [(sum log p, all greedy)] in input order."""
        out = [None] * len(seqs)
        long = [i for i, (s, _) in enumerate(seqs) if len(s) - 1 > self.max_length]
        if long and self.long_context == "state":
            for i in long:
                out[i] = self._score_state(*seqs[i])
        order = sorted((i for i in range(len(seqs)) if out[i] is None), key=lambda i: -len(seqs[i][0]))
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            rows = []
            for i in idx:
                toks, n = seqs[i]
                toks = toks[-(self.max_length + 1):]  # window: keep the last max_length inputs
                rows.append((toks, min(n, len(toks) - 1)))
            t = _bucket(max(len(r[0]) - 1 for r in rows), self.max_length)
            inp = np.zeros((self.batch_size, t), np.int32)
            tgt = np.zeros((self.batch_size, t), np.int32)
            for r, (toks, _) in enumerate(rows):
                inp[r, :len(toks) - 1], tgt[r, :len(toks) - 1] = toks[:-1], toks[1:]
            lp, greedy = (np.asarray(a) for a in self._score(self._params, inp, tgt))
            for r, (i, (toks, n)) in enumerate(zip(idx, rows)):
                end = len(toks) - 1
                out[i] = (float(lp[r, end - n:end].sum(dtype=np.float64)), bool(greedy[r, end - n:end].all()))
        return out

    def _score_state(self, toks, n):
        logits, _ = self.generator.prefill(np.array([toks[:-1]], np.int32), max_len=len(toks) - 1)
        logp = jax.nn.log_softmax(logits[0, -n:].astype(jnp.float32), axis=-1)
        tgt = np.asarray(toks[-n:])
        lp = np.asarray(logp)[np.arange(n), tgt]
        return float(lp.sum(dtype=np.float64)), bool((np.asarray(jnp.argmax(logp, -1)) == tgt).all())

    def _loglikelihood_tokens(self, requests, disable_tqdm: bool = False, **kwargs):
        seqs = [(list(ctx) + list(cont), len(cont)) for _, ctx, cont in requests]
        res = self._rows(seqs)
        for (key, _, _), r in zip(requests, res):
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, r)
        return res

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        out = []
        for req in requests:
            (text,) = req.args
            toks = self.tok_encode(text, add_special_tokens=False)
            if self.long_context == "state" or len(toks) <= self.max_length:
                ll = self._rows([([self.prefix_token_id] + toks, len(toks))])[0][0] if toks else 0.0
            else:
                windows = [make_disjoint_window(w) for w in get_rolling_token_windows(
                    token_list=toks, prefix_token=self.prefix_token_id, max_seq_len=self.max_length,
                    context_len=1)]
                ll = sum(r[0] for r in self._rows([(c + p, len(p)) for c, p in windows]))
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), ll)
            out.append(ll)
        return out

    # ---- generation ----------------------------------------------------------------------------
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        out = []
        for req in requests:
            context, kw = req.args
            kw = dict(kw or {})
            until = kw.pop("until", None) or []
            until = [until] if isinstance(until, str) else list(until)
            n_new = int(kw.pop("max_gen_toks", self.max_gen_toks))
            temperature = float(kw.pop("temperature", 0.0)) if kw.pop("do_sample", True) else 0.0
            ids = self.tok_encode(context)
            limit = (self.max_seq_len if self.long_context == "state" else self.max_length) - n_new
            ids = ids[-max(1, limit):] if len(ids) > limit else ids

            def hit(new, until=until):
                return any(u in self.tok_decode(new[0]) for u in until)

            new = self.generator.generate(np.array([ids]), n_new, temperature, int(kw.pop("top_k", 0)),
                                          float(kw.pop("top_p", 1.0)), int(kw.pop("seed", 0)),
                                          stop_id=self.eot_token_id, stop_fn=hit if until else None)[0]
            new = new.tolist()
            if self.eot_token_id in new:
                new = new[:new.index(self.eot_token_id)]
            text = self.tok_decode(new)
            for u in until:
                text = text.split(u)[0]
            self.cache_hook.add_partial("generate_until", (context, req.args[1]), text)
            out.append(text)
        return out


@lru_cache(maxsize=16)
def _score_fn(graphdef):
    """One jitted scorer per model structure (the checkpoints of a run share its compilations)."""
    return jax.jit(partial(_score_tokens, graphdef))


def _score_tokens(graphdef, params, inputs, targets):
    """inputs, targets [b, t] int32 -> (log p(target) [b, t] float32, target is argmax [b, t] bool)."""
    logits = nnx.merge(graphdef, params)(inputs).astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    lp = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return lp, jnp.argmax(logits, axis=-1) == targets
