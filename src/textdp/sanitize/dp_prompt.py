"""DP-Prompt: a document paraphrased by a causal language model, every generated token drawn from
the clipped, tempered softmax (document-level local DP).

Paper: Utpala, Hooker, Chen. *Locally Differentially Private Document Generation Using Zero Shot
Prompting.* Findings of EMNLP 2023, Sec. 3 (the mechanism and its Theorem: generation with logits
clipped to ``[b_1, b_2]`` and temperature ``T`` is ``2(b_2 − b_1)/T``-LDP per generated token, and
``n``-fold composition over ``n`` generated tokens).

Law (one document ``x``, prompt ``P(x)`` = the paper's zero-shot template
``"Document : {x}\\nParaphrase of the document :"``): for ``t = 1 .. N`` (``N = max_new_tokens``)

    y_t ~ softmax(clip(logits(P(x), y_<t), b_l, b_u) / T)    over the allowed vocabulary

stopping after an end-of-text token (which is one of the allowed outcomes, so the output LENGTH is
itself sampled: it is covered by the same bound; :mod:`textdp.sanitize.document` for the sampler).

Guarantee (as data, :attr:`DPPrompt.guarantee`): for ANY two documents ``x, x'`` and any output,
``P[y | x] <= exp(N (2(b_u − b_l)/T + epsilon0)) P[y | x']`` -- each step is a
``2(b_u − b_l)/T``-LDP exponential mechanism given the prefix (clipped utility, sensitivity
``b_u − b_l``), composed adaptively over at most ``N`` steps; stopping early is post-processing.
``epsilon0`` is the float-safe sampler's accounted cost per draw.

``epsilon`` (the CLI's ``--epsilon``) is the PER-DOCUMENT epsilon: it sets the temperature
``T = N · 2(b_u − b_l) / epsilon``. Passing ``temperature`` instead (API) gives
``epsilon = N · 2(b_u − b_l) / T``; both at once must agree.

Differences from the reference code (``sjmeis/DPMLM`` ``LLMDP.py``, class ``DPPrompt``): there
``max_new_tokens`` is the INPUT's token count (so the bound, and the output's maximal length,
depend on the private document) and ``epsilon`` is per token; sampling is ``torch`` multinomial in
float (no float-safety), with no banned-token list. Here ``N`` is a parameter and ``epsilon`` is per
document.

Model: any local causal LM folder or GGUF file (``model=``), by default the offline Gemma 3 270M
(:func:`textdp.models.pretrained.load_causal_lm`; ``$TEXTDP_CAUSAL_LM`` overrides the default).
The card names it by its folder or file name and a short hash of its configuration and tokenizer
files (:func:`textdp.sanitize.document.model_identity`), never by its local path; the curator's
terminal shows the path.
Utility needs a small T, i.e. a large epsilon per document: with the defaults (``b_l=-14``,
``b_u=22``, ``N=64``) ``T = 1`` means epsilon = 64 x 72 = 4608 per document.
"""

from __future__ import annotations

import math

import numpy as np

from textdp.errors import ParameterError
from textdp.noise import DEFAULT_ETA
from textdp.sanitize.document import DocumentSanitizer, check_clip, clipped_draw

__all__ = ["DPPrompt", "PROMPT"]

#: the paper's zero-shot paraphrase prompt (Utpala et al. 2023, Sec. 4; the reference code's template)
PROMPT = "Document : {document}\nParaphrase of the document :"


class DPPrompt(DocumentSanitizer):
    """DP-Prompt (Utpala et al. 2023): see the module docstring for the law and the guarantee.

    model: a local causal-LM folder, a ``.gguf`` file, or None (the offline Gemma 3 270M; the
        environment variable ``TEXTDP_CAUSAL_LM`` names another default).
    epsilon: per-document epsilon (sets ``T = max_new_tokens · 2(b_u − b_l)/epsilon``).
    b_l, b_u: logit clipping bounds, ``b_l < b_u``. Defaults -14, 22: measured with Gemma 3 270M
        on the paraphrase prompts of 6 BBC News test documents (public; last 40 positions each,
        256k logits per position): 1 % quantile of the logits -13.7, median of each position's
        largest logit 21.9 (5 %: 16.2, 95 %: 29.7).
    temperature: T > 0, instead of ``epsilon`` (both: they must agree).
    max_new_tokens: N >= 1, the most tokens generated (the per-document epsilon scales with it).
    max_input_tokens: the document is cut to its first so many model tokens (a function of the
        document only, covered by the local-DP guarantee); at least 1.
    prompt: the template, with ``{document}`` where the document goes (public).

    Raises ParameterError (one line) for T <= 0, b_l >= b_u, max_new_tokens < 1 and the like,
    before any model is loaded.
    """

    name = "dp-prompt"
    paper = ("Utpala, Hooker, Chen. Locally Differentially Private Document Generation Using Zero Shot Prompting. "
             "Findings of EMNLP 2023, Sec. 3")

    def __init__(self, embeddings=None, epsilon: float | None = None, *, model: str | None = None,
                 b_l: float = -14.0, b_u: float = 22.0, temperature: float | None = None, max_new_tokens: int = 64,
                 max_input_tokens: int = 512, prompt: str = PROMPT, output_vocabulary="public", oov: str = "uniform",
                 unk_token: str = "[UNK]", rng=None, block_bytes: int | None = None, workers: int | None = None,
                 eta: float = DEFAULT_ETA, device: str = "cpu"):
        self.b_l, self.b_u, t = check_clip(b_l, b_u, temperature)
        try:
            n = int(max_new_tokens)
            if n != max_new_tokens:
                raise ValueError
        except (TypeError, ValueError):
            raise ParameterError(f"max_new_tokens must be a whole number >= 1, got {max_new_tokens!r}") from None
        if n < 1:
            raise ParameterError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        if int(max_input_tokens) < 1:
            raise ParameterError(f"max_input_tokens must be >= 1, got {max_input_tokens!r}")
        if not isinstance(prompt, str) or prompt.count("{document}") != 1:
            raise ParameterError("prompt must contain '{document}' exactly once")
        self.max_new_tokens = n
        self.max_input_tokens = int(max_input_tokens)
        self.prompt = prompt
        span = 2.0 * (self.b_u - self.b_l)
        if t is None and epsilon is None:
            raise ParameterError("dp-prompt needs epsilon (per document) or temperature")
        if t is None:
            t = n * span / float(epsilon)
            if not (math.isfinite(t) and t > 0):
                raise ParameterError(f"epsilon={epsilon!r} gives temperature {t!r}; use a finite positive epsilon")
        implied = n * span / t
        if epsilon is not None and not math.isclose(float(epsilon), implied, rel_tol=1e-9):
            raise ParameterError(f"epsilon {float(epsilon):g} and temperature {t:g} disagree: with b_l={self.b_l:g}, "
                                 f"b_u={self.b_u:g}, max_new_tokens={n}, T={t:g} means epsilon {implied:.6g} per "
                                 "document (give one of them)")
        self.temperature = t
        self.epsilon = float(epsilon) if epsilon is not None else implied
        self.epsilon_token = span / t
        super().__init__(embeddings, self.epsilon, output_vocabulary=output_vocabulary, oov=oov, unk_token=unk_token,
                         rng=rng, block_bytes=block_bytes, workers=workers, eta=eta, device=device)
        from textdp.models.pretrained import load_causal_lm

        self.model_arg = None if model is None else str(model)
        self.lm = load_causal_lm(model, self.device)
        from textdp.sanitize.document import model_identity

        #: the model's full path: the curator's terminal only (it may hold a user name)
        self.model_path = str(self.lm.path)
        #: its public name on the card: folder/file name + hash of its config and tokenizer files
        self.model_id = model_identity(self.lm.path)
        self._setup_vocabulary()

    # ------------------------------------------------------------------ vocabulary
    def _setup_vocabulary(self) -> None:
        """Allowed tokens (the model's outputs less special, unused and padding tokens: from the
        tokenizer alone) and the end-of-text tokens (allowed; drawing one ends the document)."""
        tok, lm = self.lm.tokenizer, self.lm.model
        v_model = int(lm.get_output_embeddings().weight.shape[0])
        banned = np.zeros(v_model, dtype=bool)
        banned[min(len(tok), v_model):] = True  # rows the tokenizer cannot decode
        for i in getattr(tok, "all_special_ids", []) or []:
            if 0 <= i < v_model:
                banned[i] = True
        for i, at in (getattr(tok, "added_tokens_decoder", {}) or {}).items():
            content = str(getattr(at, "content", at))
            if 0 <= i < v_model and (getattr(at, "special", False) or content.startswith("<unused")):
                banned[i] = True
        eos = set()
        for cand in (tok.eos_token_id, getattr(getattr(lm, "generation_config", None), "eos_token_id", None)):
            if cand is None:
                continue
            for e in (cand if isinstance(cand, (list, tuple)) else [cand]):
                if 0 <= int(e) < v_model:
                    eos.add(int(e))
        if not eos:
            raise ParameterError(f"the model {self.lm.path!r} has no end-of-text token: dp-prompt cannot end a "
                                 "document")
        for e in eos:
            banned[e] = False
        self.eos_ids = frozenset(eos)
        self.allowed_tokens = np.flatnonzero(~banned).astype(np.int64)
        self.n_banned = int(banned.sum())

    @property
    def output_words(self) -> list[str]:
        """The allowed output tokens (model token strings), in id order."""
        return list(self.lm.tokenizer.convert_ids_to_tokens(self.allowed_tokens.tolist()))

    # ------------------------------------------------------------------ generation
    def prompt_ids(self, text: str) -> list[int]:
        """Model token ids of the prompt for ``text`` (the document cut to ``max_input_tokens``)."""
        tok = self.lm.tokenizer
        pre, post = self.prompt.split("{document}")
        doc = tok(text, add_special_tokens=False)["input_ids"][: self.max_input_tokens]
        head = tok(pre, add_special_tokens=True)["input_ids"]
        eos = tok.eos_token_id
        if eos is not None and len(head) > 0 and head[-1] == eos:  # some tokenizers append an end token
            head = head[:-1]
        tail = tok(post, add_special_tokens=False)["input_ids"]
        return list(head) + list(doc) + list(tail)

    def next_logits(self, ids: list[int]) -> np.ndarray:
        """float64 ``(V,)`` logits of the token after ``ids`` (no cache; for tests and audits)."""
        import torch

        with torch.no_grad():
            x = torch.tensor([ids], dtype=torch.long, device=self.lm.device)
            return self.lm.model(input_ids=x).logits[0, -1].double().cpu().numpy()

    def _cache_kw(self) -> str:
        """The keyword of the key/value cache in the model's forward (``cache`` in transformers >= 5.2x,
        ``past_key_values`` before)."""
        kw = getattr(self, "_cache_kw_name", None)
        if kw is None:
            import inspect

            params = inspect.signature(self.lm.model.forward).parameters
            kw = self._cache_kw_name = "cache" if "cache" in params else "past_key_values"
        return kw

    def _sanitize_document(self, text, key, record):
        import torch

        ids = self.prompt_ids(text)
        lm = self.lm.model
        dev = self.lm.device
        kw = self._cache_kw()
        out: list[int] = []
        with torch.no_grad():
            res = lm(input_ids=torch.tensor([ids], dtype=torch.long, device=dev), use_cache=True, logits_to_keep=1)
            for t in range(self.max_new_tokens):
                logits = res.logits[0, -1].float().cpu().numpy()
                y = int(clipped_draw(logits[None, :], self.allowed_tokens, self.b_l, self.b_u, self.temperature,
                                     key, [record], [t], self.eta)[0])
                if y in self.eos_ids:
                    break
                out.append(y)
                if t + 1 < self.max_new_tokens:
                    past = getattr(res, "cache", None) or res.past_key_values
                    res = lm(input_ids=torch.tensor([[y]], dtype=torch.long, device=dev), use_cache=True,
                             logits_to_keep=1, **{kw: past})
        text_out = self.lm.tokenizer.decode(out, skip_special_tokens=True).strip()
        #: model tokens generated so far by this object (the curator's statistic, for speed figures)
        self.generated_tokens = getattr(self, "generated_tokens", 0) + len(out)
        return text_out, 0, 0

    def sanitize_with_stats(self, texts, progress=None, first_record=None):
        out, stats = super().sanitize_with_stats(texts, progress=progress, first_record=first_record)
        stats.changed_tokens = stats.tokens  # every document is regenerated
        return out, stats

    # ------------------------------------------------------------------ guarantee and card
    @property
    def guarantee(self):
        from textdp.accounting.guarantees import LocalDP

        return LocalDP(epsilon=self.max_new_tokens * (self.epsilon_token + self.sampling_epsilon0), unit="document",
                       neighbours="any two documents")

    def parameters(self) -> dict:
        p = {"epsilon": self.epsilon, "eta": self.eta, "b_l": self.b_l, "b_u": self.b_u,
             "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
             "max_input_tokens": self.max_input_tokens, "prompt": self.prompt,
             "epsilon_per_token": self.epsilon_token}
        if self.model_arg is not None:
            p["model"] = self.model_id  # never the local path (it may hold a user name)
        return p

    def model_info(self) -> dict:
        info = dict(self.lm.info)
        info["path"] = self.model_id  # name + content hash of config/tokenizer files, never the local path
        info["name"] = info.get("model_type") or "causal-lm"
        return info

    def card_units(self) -> dict:
        e0 = self.sampling_epsilon0
        return {
            "epsilon": f"per document, local DP over ANY two documents: max_new_tokens x 2(b_u - b_l)/T = "
                       f"{self.max_new_tokens} x {self.epsilon_token:.6g} (the guarantee adds max_new_tokens x "
                       f"epsilon0)",
            "per_token": "each generated token is a 2(b_u - b_l)/T-LDP exponential mechanism given the prompt and "
                         "the tokens before it (clipped logits: sensitivity b_u - b_l for any context)",
            "per_document": "adaptive composition over at most max_new_tokens draws; the output length is sampled "
                            "token by token (end of text is one of the outcomes), so it is covered; the prompt "
                            "template and the model are public",
            "neighbours": "any two documents (local DP; no length condition)",
            "epsilon0": f"additive per generated token ({e0:.3g}): {self.epsilon0_meaning()}",
        }

    def card_warnings(self) -> list[str]:
        return [f"DP-Prompt's epsilon is per document and scales with max_new_tokens ({self.max_new_tokens}): "
                f"fluent paraphrases need T near 1, i.e. epsilon near {self.max_new_tokens * 2 * (self.b_u - self.b_l):g} "
                "per document with these bounds"]


REGISTERED = (
    ("dp-prompt", DPPrompt,
     "DP-Prompt (Utpala et al. 2023): paraphrase by a causal LM, each token from softmax(clip(logits)/T); "
     "max_new_tokens x 2(b_u-b_l)/T LDP per document", ("sanitize", "document-level", "ldp", "language-model")),
)
