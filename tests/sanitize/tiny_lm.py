"""Tiny RANDOMLY INITIALISED language models for the DP-Prompt / DP-MLM tests (never the real
weights): a Gemma 3 causal LM with a word-level tokenizer, and textdp's own word-level BERT MLM.
Weight initialisation uses torch's seeded generator (test fixtures, not DP noise)."""

from __future__ import annotations

from pathlib import Path

WORDS = ["film", "movie", ".", "do", "n't", "bad", ";", "good", "great", ",", "'s", "(", ")", "plot", "actor",
         "scene", "boring", "fun", "story", "aardvark", "document", ":", "paraphrase", "of", "the", "one", "more"]
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
UNUSED = ["<unused0>", "<unused1>"]


def build_tiny_gemma(folder: Path, seed: int = 0) -> Path:
    """A 2-layer Gemma3ForCausalLM (hidden 32) over a 33-token word-level vocabulary, saved with its
    tokenizer into ``folder``; returns ``folder``."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(SPECIALS + WORDS + UNUSED)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                  unk_token="<unk>", additional_special_tokens=list(UNUSED))
    cfg = Gemma3TextConfig(vocab_size=len(vocab) + 3, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                           sliding_window=32, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    torch.manual_seed(seed)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():  # spread the logits: random init gives logits near 0 (clipping would never bite)
        model.lm_head.weight.normal_(0.0, 3.0)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def build_tiny_mlm(folder: Path, seed: int = 0) -> Path:
    """textdp's word-level BERT MLM (1 layer, hidden 32, 16 positions) over :data:`WORDS`, random
    weights, saved into ``folder``; returns ``folder``."""
    import torch

    from textdp.models.mlm import MLMPreset, MaskedLM, WordVocab

    preset = MLMPreset(hidden=32, layers=1, heads=2, intermediate=64, max_len=16, vocab_size=64, dropout=0.0)
    m = MaskedLM.create(WordVocab(WORDS), preset, seed=seed)
    with torch.no_grad():
        m.model.cls.predictions.decoder.weight.normal_(0.0, 3.0)
    m.model.eval()
    m.save(folder)
    return folder


_BUILT: dict = {}


def tiny_model_env(tmp_path_factory) -> dict:
    """``{env var: folder}`` making the tiny models the defaults of dp-prompt and dp-mlm (built once
    per test session)."""
    if not _BUILT:
        root = tmp_path_factory.mktemp("tiny-lm")
        _BUILT["TEXTDP_CAUSAL_LM"] = str(build_tiny_gemma(root / "gemma"))
        _BUILT["TEXTDP_DP_MLM_MODEL"] = str(build_tiny_mlm(root / "mlm"))
    return dict(_BUILT)


def build_tiny_hf_bert(folder: Path, seed: int = 0) -> Path:
    """A Hugging Face BertForMaskedLM (1 layer, hidden 32) with a WordPiece tokenizer over
    :data:`WORDS` plus two ``##`` continuations and an ``[unused0]`` entry, random weights."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"] + WORDS + ["##s", "##ing"]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = None
    for kw in ("vocab", "vocab_file"):  # transformers 5 takes vocab=, 4.x vocab_file=
        try:
            cand = BertTokenizerFast(**{kw: str(folder / "vocab.txt")}, do_lower_case=True)
        except (TypeError, ValueError, OSError):
            continue
        if len(cand) == len(vocab):
            tok = cand
            break
    assert tok is not None
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128, type_vocab_size=2)
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg).eval()
    with torch.no_grad():
        model.cls.predictions.decoder.weight.normal_(0.0, 3.0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
