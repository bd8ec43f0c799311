"""Configuration and presets of ``textdp attack invert``.

Presets (``preset_config(name)``):

* ``paper`` — the paper's settings where they are known (Zhang et al. 2022 App.
  A.3): target fine-tuned 5 epochs, batch 8, AdamW 5e-5; templates with
  frequency > 20 (220 phrase+adjective templates for short texts, 320 3-8-grams
  for long ones); TR window 3, KL 0, other PPLM knobs at the PPLM code defaults;
  generated length = mean private length; VMI 50 steps with one restart per
  template. The generator is a from-scratch causal LM on the target's WordPiece
  ids (no GPT-2 weights exist offline). Hours on a CPU.
* ``cpu`` — the same pipeline sized for a 2-core CPU: MiniLM cut to its first 3
  layers, 3 epochs, a 3-layer d=128 generator (3 epochs, 8k WordPieces), 50
  frequent 2-4-gram templates, generated length capped at 20 tokens (about 100
  texts per method); TR knobs alpha 0.3, gamma 1, window 0 (whole history),
  tuned on public data for this small generator (PPLM's alpha 0.02 / gamma 1.5 /
  window 3 gives far less fluent text here).
* ``tiny`` — a plumbing check in well under a minute: small random BERT target
  and tiny generator on a few hundred texts, 4 templates, 8 tokens.
* ``memorising`` — the ``cpu`` preset with a target that memorises (issue 18):
  ALL 6 layers of the packaged MiniLM (embeddings included) fine-tuned for 20
  epochs (AdamW 2e-4, batch 16, no dropout, no weight decay) on a small private
  split of 200 reviews (100 per label for a two-label dataset) plus 32
  random-token **canary** sentences (:mod:`textdp.attacks.inversion.canaries`:
  ``"My secret code is w1 w2"``, the words drawn from a keyed generator out of a
  pool of 16 frequent label-neutral public words, 16 canaries per label, each
  word once per slot and label), so that its
  training accuracy reaches 1.0 with a clear gap to held-out accuracy. No label
  noise. How much it memorises is measured, not assumed:
  :mod:`textdp.attacks.inversion.memorisation` (train and held-out accuracy,
  loss-based membership-inference AUC with a confidence interval, on the
  reviews; the canaries are measured apart) runs on every target and lands in
  ``report.json``. Generator and templates are the ``cpu`` preset's; the TR
  knobs are the ``cpu`` preset's unless a public-data tuning selection is
  passed (``benchmarks/bench_attacks.py --tune`` / ``--verdict``). Measured
  figures: docs/attacks.md, "A memorising target".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from textdp.attacks.inversion.pplm import PPLMConfig
from textdp.errors import ParameterError

__all__ = ["InversionConfig", "preset_config", "PRESETS", "MEMORISING_PRIVATE", "MEMORISING_CANARIES"]

PRESETS = ("cpu", "paper", "tiny", "memorising")
#: private texts (all labels together, canaries not counted) of the ``memorising`` preset's target
MEMORISING_PRIVATE = 200
#: canary sentences inserted into the ``memorising`` preset's private split
MEMORISING_CANARIES = 32


@dataclass
class InversionConfig:
    """Every knob of the attack pipeline (see the module docstring for presets)."""

    preset: str = "cpu"
    # data
    public_fraction: float = 0.8
    max_public: int | None = None
    max_private: int | None = None
    max_len: int = 64  # classifier tokens
    split_seed: int = 20220921  # deterministic public/private split (not a privacy seed)
    model_seed: int = 0  # seed of target/generator/scorer training (cached by it)
    # target
    target_model: str = "minilm"  # "minilm", a local folder, a hub name, or "tiny"
    target_layers: int | None = 3
    target_epochs: int = 3
    target_lr: float = 1e-4  # cpu preset (truncated MiniLM, few steps); paper preset: 5e-5
    target_batch: int = 16
    target_pooling: str = "cls"  # cls (HF [CLS] pooler head; the benchmarks so far) | mean | auto
    tiny_target: dict = field(default_factory=lambda: {"hidden": 32, "layers": 2, "heads": 2, "intermediate": 64})
    target_dropout: float | None = None  # None: the model's own dropout (0.1 for MiniLM); 0.0 turns it off
    target_weight_decay: float = 0.01  # AdamW weight decay of the target's fine-tuning (not on biases/LayerNorm)
    # canaries (textdp.attacks.inversion.canaries): random-token sentences added to the private split
    canaries: int = 0  # how many are inserted (0 = none); as many again are drawn as never-inserted references
    canary_seed: int = 18  # key of the canary draw (a seeded ChaCha20 stream, never the global RNG)
    canary_pool: int = 16  # words the secrets are drawn from (frequent public words)
    canary_secret_len: int = 2  # words per secret: canary_pool ** canary_secret_len possible fillings
    # generator (from scratch on the target's WordPiece ids) and fluency scorer
    generator: str = "scratch"
    gen_d_model: int = 128
    gen_layers: int = 3
    gen_heads: int = 4
    gen_epochs: int = 3
    gen_lr: float = 2e-3
    gen_batch: int = 32
    gen_block: int = 48
    gen_min_count: int = 2
    gen_max_vocab: int | None = 8000
    scorer_seed_offset: int = 1000  # scorer = same recipe, another seed (never the generator itself)
    scorer_epochs: int | None = 2  # None = gen_epochs; 2 keeps the cpu preset's one-off training short
    # (scorer_*: unused since the fluency scorer is the public word n-gram model, attacks.inversion.fluency)
    # generator "scratch-large": pipeline.SCRATCH_GENERATORS; a pretrained generator (a folder, a .gguf file,
    # "gemma") is fine-tuned on the public split first (textdp.models.finetune): none | lora | full, saved once
    # under gen_cache (None: $TEXTDP_CACHE/attack-invert) with the cached BPE -> WordPiece alignment
    gen_finetune: str = "lora"
    gen_finetune_steps: int = 200
    gen_finetune_batch: int = 8
    gen_finetune_tokens: int = 48  # model tokens per row, begin- and end-of-text included
    gen_finetune_lr: float = 2e-4
    gen_lora_r: int = 8  # LoRA alpha = 2 r
    gen_cache: str | None = None
    # templates
    template_style: str = "ngram"
    template_n_min: int = 2
    template_n_max: int = 4
    template_min_freq: int = 20
    n_templates: int = 50
    template_drop_contained: bool = True
    template_fraction: float = 1.0
    adjective_source: str = "label_pmi"
    num_samples: int = 1  # texts per (label, template)
    # attack
    # cpu preset: alpha 0.3, gamma 1, whole-history window, tuned for the small from-scratch generator on the
    # PUBLIC split only (a public-trained evaluator, the target's probability, scorer perplexity; tuning seeds
    # 101-102, never the private ground truth); see docs/attacks.md. The paper preset keeps PPLM's code defaults.
    pplm: PPLMConfig = field(default_factory=lambda: PPLMConfig(stepsize=0.3, num_iterations=3, window_length=0,
                                                                kl_scale=0.0, gamma=1.0, gm_scale=0.9, top_k=10,
                                                                sample=True, gen_length=20))
    gen_length: str | int = "avg"  # "avg" = mean private length in WordPiece tokens
    gen_length_cap: int | None = 20
    batch_size: int = 25
    vmi_steps: int = 50
    vmi_lr: float = 0.05
    # metrics
    matcher: str = "lcs"
    kendall_p: float = 0.5
    kendall_k: tuple = (10, 100)
    # defences
    # DP-SGD defence: a DP linear probe (head only, on frozen mean-pooled MiniLM features). Measured on the
    # 2,049 private reviews at eps 8: held-out 0.748 (the non-private target: 0.74); one trainable encoder
    # layer + [CLS] pooler (Opacus' BERT tutorial recipe, lr 5e-4, clip 0.1, batch 32, 3 epochs) stayed at
    # the majority class, and MiniLM's [CLS] pooler features carry no sentiment (docs/attacks.md).
    dp_epsilon: float = 8.0
    dp_delta: float | None = None
    dp_epochs: int = 20
    dp_lr: float = 1e-2
    dp_batch: int = 128
    dp_max_grad_norm: float = 1.0
    dp_trainable_layers: int = 0
    dp_pooling: str = "auto"  # "auto" = mean for MiniLM (how it was trained), cls | mean
    # SanText defence: at eps 3 (85% of tokens replaced) the cpu-preset target stayed at the majority class;
    # at eps 5 (14% replaced) it kept its held-out accuracy (docs/attacks.md, Defences)
    santext_epsilon: float = 5.0
    santext_embeddings: str = "glove-6b-50d"

    def validate(self) -> "InversionConfig":
        """Check every numeric knob (finite, sensible sign/range) before any work.

        Raises ParameterError naming the offending CLI option; returns ``self``.
        """
        def num(name: str, v, *, lo: float | None = None, lo_open: bool = False, hi: float | None = None,
                hi_open: bool = False, integer: bool = False, opt: str | None = None) -> None:
            label = opt or "--" + name.replace("_", "-")
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise ParameterError(f"{label} must be a number, got {v!r}")
            if integer and not float(v).is_integer():
                raise ParameterError(f"{label} must be a whole number, got {v!r}")
            if not math.isfinite(float(v)):
                raise ParameterError(f"{label} must be a finite number, got {v!r}")
            if lo is not None and (v <= lo if lo_open else v < lo):
                raise ParameterError(f"{label} must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
            if hi is not None and (v >= hi if hi_open else v > hi):
                raise ParameterError(f"{label} must be {'<' if hi_open else '<='} {hi:g}, got {v!r}")

        pp = self.pplm
        num("stepsize", pp.stepsize, lo=0, lo_open=True)
        num("num_iterations", pp.num_iterations, lo=1, integer=True)
        num("window_length", pp.window_length, lo=0, integer=True)
        num("kl_scale", pp.kl_scale, lo=0)
        num("gm_scale", pp.gm_scale, lo=0, hi=1)
        num("gamma", pp.gamma, lo=0, lo_open=True, opt="pplm gamma")
        num("top_k", pp.top_k, lo=1, integer=True, opt="pplm top_k")
        num("temperature", pp.temperature, lo=0, lo_open=True, opt="pplm temperature")
        num("gen_length", pp.gen_length, lo=1, integer=True)
        if self.gen_length != "avg":
            num("gen_length", self.gen_length, lo=1, integer=True)
        if self.gen_length_cap is not None:
            num("gen_length", self.gen_length_cap, lo=1, integer=True)
        num("templates", self.n_templates, lo=1, integer=True)
        if self.target_layers is not None:
            num("target_layers", self.target_layers, lo=1, integer=True)
        num("dp_epsilon", self.dp_epsilon, lo=0, lo_open=True)
        if self.dp_delta is not None:
            num("dp_delta", self.dp_delta, lo=0, lo_open=True, hi=1, hi_open=True, opt="dp_delta")
        num("santext_epsilon", self.santext_epsilon, lo=0, lo_open=True)
        num("public_fraction", self.public_fraction, lo=0, lo_open=True, hi=1, hi_open=True, opt="public_fraction")
        for name in ("target_lr", "gen_lr", "vmi_lr", "dp_lr", "dp_max_grad_norm"):
            num(name, getattr(self, name), lo=0, lo_open=True, opt=name)
        if self.target_pooling not in ("auto", "cls", "mean"):
            raise ParameterError(f"target_pooling must be auto, cls or mean, got {self.target_pooling!r}")
        if self.dp_pooling not in ("auto", "cls", "mean"):
            raise ParameterError(f"dp_pooling must be auto, cls or mean, got {self.dp_pooling!r}")
        num("dp_trainable_layers", self.dp_trainable_layers, lo=0, integer=True, opt="dp_trainable_layers")
        if self.target_dropout is not None:
            num("target_dropout", self.target_dropout, lo=0, hi=1, hi_open=True, opt="target_dropout")
        num("target_weight_decay", self.target_weight_decay, lo=0, opt="target_weight_decay")
        num("canaries", self.canaries, lo=0, integer=True, opt="canaries")
        num("canary_pool", self.canary_pool, lo=2, integer=True, opt="canary_pool")
        num("canary_secret_len", self.canary_secret_len, lo=1, integer=True, opt="canary_secret_len")
        num("canary_seed", self.canary_seed, lo=0, integer=True, opt="canary_seed")
        if self.canaries and 2 * self.canaries > self.canary_pool ** self.canary_secret_len:
            raise ParameterError(f"{self.canaries} canaries (and as many references) do not fit in "
                                 f"{self.canary_pool}^{self.canary_secret_len} secrets; raise canary_pool")
        for name in ("target_epochs", "target_batch", "gen_epochs", "gen_batch", "batch_size", "dp_epochs",
                     "dp_batch", "num_samples", "max_len"):
            num(name, getattr(self, name), lo=1, integer=True, opt=name)
        if not str(self.target_model).strip():
            raise ParameterError("--target is empty; use minilm, a local model folder or a hub name you have locally")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kendall_k"] = list(self.kendall_k)
        return d

    def with_overrides(self, **kw) -> "InversionConfig":
        """A copy with fields replaced; ``pplm_<knob>=`` sets a PPLM knob. Unknown names raise ParameterError."""
        names = {f.name for f in fields(self)}
        pknobs = {f.name for f in fields(PPLMConfig)}
        top, pp = {}, {}
        for k, v in kw.items():
            if v is None:
                continue
            if k.startswith("pplm_") and k[5:] in pknobs:
                pp[k[5:]] = v
            elif k in names:
                top[k] = v
            else:
                raise ParameterError(f"unknown attack setting {k!r}")
        out = replace(self, **top)
        if pp:
            out = replace(out, pplm=replace(out.pplm, **pp))
        return out


def preset_config(name: str, *, long_texts: bool = False) -> InversionConfig:
    """The configuration of a preset (``cpu``, ``paper``, ``tiny`` or ``memorising``).

    ``long_texts`` switches the paper preset to the long-text template recipe
    (3-8-grams, 320 templates). Raises ParameterError for an unknown preset.
    """
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise ParameterError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    base = InversionConfig(preset=key)
    if key == "cpu":
        return base
    if key == "memorising":
        # whole MiniLM (target_layers None = all 6 layers, nothing frozen), many epochs at a higher learning rate
        # without dropout or weight decay on a small private split with canaries: a target with a real
        # train/held-out gap, so the inversion has memorisation to reveal. The first recipe (400 texts, 10 epochs,
        # AdamW 1e-4, dropout 0.1, weight decay 0.01) reached loss MIA AUC 0.824 only (docs/attacks.md).
        return replace(base, max_private=MEMORISING_PRIVATE, target_layers=None, target_epochs=20, target_lr=2e-4,
                       target_batch=16, target_dropout=0.0, target_weight_decay=0.0, canaries=MEMORISING_CANARIES)
    if key == "paper":
        c = replace(base, target_layers=None, target_epochs=5, target_batch=8, target_lr=5e-5,
                    gen_d_model=256, gen_layers=4, gen_heads=4, gen_epochs=10, gen_max_vocab=None, gen_block=128,
                    scorer_epochs=None,
                    template_min_freq=20, gen_length="avg", gen_length_cap=None, vmi_steps=50, max_len=128,
                    batch_size=32, pplm=PPLMConfig(stepsize=0.02, num_iterations=3, window_length=3, kl_scale=0.0,
                                                   gamma=1.5, gm_scale=0.9, top_k=10, sample=True, gen_length=20))
        if long_texts:
            return replace(c, template_style="ngram", template_n_min=3, template_n_max=8, n_templates=320,
                           max_len=256)
        return replace(c, template_style="phrase_adj", n_templates=220, adjective_source="label_pmi")
    # tiny
    return replace(base, max_public=400, max_private=120, max_len=48, target_model="tiny", target_layers=None,
                   target_epochs=10, target_lr=2e-3, target_batch=16,
                   gen_d_model=32, gen_layers=1, gen_heads=2, gen_epochs=2, gen_lr=5e-3, gen_block=40,
                   gen_max_vocab=3000, gen_min_count=1,
                   template_n_min=2, template_n_max=3, template_min_freq=3, n_templates=4,
                   pplm=replace(base.pplm, num_iterations=2, gen_length=8), gen_length=8, gen_length_cap=8,
                   batch_size=8, vmi_steps=5, dp_epochs=2, dp_batch=16, kendall_k=(10,))
