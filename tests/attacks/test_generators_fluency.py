"""Issue 18 items 2-3: the larger from-scratch generator, the pretrained path (a Gemma 3
architecture through the shared loader, fine-tuned on public text, banned tokens, cached
alignment, batched rows) and the public n-gram fluency scorer.

Every model here is TINY and RANDOMLY INITIALISED (never the 253 MB Gemma weights): a 2-layer
Gemma3ForCausalLM (hidden 32) over a ~330-token SentencePiece-style BPE trained here on built-in
texts, with Gemma's kinds of added tokens (special <unusedN>, a turn marker, and non-special
markup / newline tokens).
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from textdp.attacks.inversion.fluency import NgramFluencyScorer, words  # noqa: E402
from textdp.attacks.inversion.gpt2_generator import (  # noqa: E402
    cached_alignment, generate_texts_bpe, prepare_pretrained_generator,
)
from textdp.models.finetune import FineTuneConfig, causal_lm_nll, finetune_causal_lm  # noqa: E402
from textdp.noise import make_rng  # noqa: E402

UNUSED = [f"<unused{i}>" for i in range(6)] + ["<start_of_turn>"]
ADDED_PLAIN = ["<h1>", "\n\n"]  # Gemma also has NON-special added tokens (markup, runs of newlines)

# a small grammar: public training texts and held-out texts of the same kind
_SUBJ = ["the film", "the movie", "this story", "the plot", "the cast", "the script"]
_VERB = ["is", "feels", "seems", "looks"]
_ADJ = ["great", "dull", "funny", "boring", "warm", "silly", "sharp", "slow"]
_TAIL = [".", "and far too long .", "from start to finish .", ", really ."]


def _grammar(n, seed):
    rng = np.random.default_rng(seed)  # test data, not DP noise
    return [f"{_SUBJ[rng.integers(len(_SUBJ))]} {_VERB[rng.integers(len(_VERB))]} "
            f"{_ADJ[rng.integers(len(_ADJ))]} {_TAIL[rng.integers(len(_TAIL))]}" for _ in range(n)]


def _build_tiny_gemma(folder, seed=0):
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, PreTrainedTokenizerFast

    from textdp.data import load_dataset

    texts = list(load_dataset("rotten-tomatoes").train["text"].head(200)) + _grammar(200, 1)
    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.normalizer = normalizers.Replace(" ", "\u2581")  # Gemma: spaces become '▁', no prefix space
    tk.pre_tokenizer = pre_tokenizers.Split("\u2581", behavior="merged_with_next")
    tk.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.Fuse()])
    trainer = trainers.BpeTrainer(vocab_size=330, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"],
                                  show_progress=False)
    tk.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                  unk_token="<unk>", mask_token="<mask>", additional_special_tokens=list(UNUSED))
    tok.add_tokens(list(ADDED_PLAIN))
    cfg = Gemma3TextConfig(vocab_size=len(tok) + 2, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
                           sliding_window=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                           bos_token_id=tok.bos_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Gemma3ForCausalLM(cfg).eval()
        with torch.no_grad():  # less flat than the 0.02 init, so the distribution reacts to the history
            model.model.embed_tokens.weight.normal_(0.0, 0.5)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def gemma_dir(tmp_path_factory):
    return _build_tiny_gemma(tmp_path_factory.mktemp("tiny-gemma3") / "m")


@pytest.fixture(scope="module")
def gemma(gemma_dir, tiny_models, tmp_path_factory):
    clf = tiny_models[0]
    cache = tmp_path_factory.mktemp("gen-cache")
    G, vocab, info = prepare_pretrained_generator(clf, str(gemma_dir), cache=cache)
    return clf, G, vocab, info, cache


def _cfg(**kw):
    from textdp.attacks.inversion.config import preset_config

    return preset_config("tiny").with_overrides(**kw)


TEMPLATES = ["the film is", "a great", "this story"]  # different BPE lengths: several groups, ragged prefixes


# ----------------------------------------------------------------------------- TR(step 0) == VTG, every kind
@pytest.mark.parametrize("size", [dict(d_model=16, n_layers=2, n_heads=2), dict(d_model=32, n_layers=4, n_heads=4)],
                         ids=["scratch", "scratch-large-architecture"])
def test_scratch_generators_tr_step_zero_is_vtg(tiny_models, size):
    from textdp.attacks.inversion.pipeline import generate_texts
    from textdp.models.causal_lm import CausalLM, CausalLMConfig

    clf, _, vocab = tiny_models
    with torch.random.fork_rng():
        torch.manual_seed(5)
        G = CausalLM(CausalLMConfig(len(vocab), max_len=64, dropout=0.0, **size)).eval()
        for p in G.parameters():
            p.requires_grad_(False)
            if p.ndim == 2:
                p.mul_(8.0)
    kw = dict(clf=clf, generator=G, vocab=vocab, templates=["a great film", "the plot is"], labels=["neg", "pos"],
              attack_key=5, gen_length=6)
    vtg = generate_texts("vtg", cfg=_cfg(), **kw)
    tr0 = generate_texts("tr", cfg=_cfg(pplm_stepsize=0.0), **kw)
    tr = generate_texts("tr", cfg=_cfg(pplm_stepsize=0.5, pplm_gamma=1.0), **kw)
    assert tr0["text"].tolist() == vtg["text"].tolist()
    assert tr["text"].tolist() != vtg["text"].tolist()  # the steering does something, so the equality is not vacuous


@pytest.mark.parametrize("finetuned", [False, True], ids=["gemma3-as-loaded", "gemma3-lora-finetuned"])
def test_pretrained_gemma_tr_step_zero_is_vtg_and_batching_changes_nothing(gemma, gemma_dir, finetuned):
    clf, G, vocab, info, cache = gemma
    assert "gemma3_text via transformers" in info["runtime"]
    if finetuned:
        pytest.importorskip("peft")
        G, vocab, info = prepare_pretrained_generator(clf, str(gemma_dir), cache=cache, public_texts=_grammar(60, 2),
                                                      finetune=FineTuneConfig(steps=3, batch_size=4, lr=1e-2))
        assert info["finetuned_on_public"] and info["finetune"]["method"] == "lora"
    kw = dict(clf=clf, generator=G, vocab=vocab, templates=TEMPLATES, labels=["neg", "pos"], attack_key=7,
              gen_length=6)
    vtg = generate_texts_bpe("vtg", cfg=_cfg(), batch_size=4, **kw)
    tr0 = generate_texts_bpe("tr", cfg=_cfg(pplm_stepsize=0.0), batch_size=4, **kw)
    assert tr0["text"].tolist() == vtg["text"].tolist()
    assert vtg["text"].tolist() == generate_texts_bpe("vtg", cfg=_cfg(), batch_size=1, **kw)["text"].tolist()
    tr = generate_texts_bpe("tr", cfg=_cfg(pplm_stepsize=0.5, pplm_gamma=1.0), batch_size=4, **kw)
    tr1 = generate_texts_bpe("tr", cfg=_cfg(pplm_stepsize=0.5, pplm_gamma=1.0), batch_size=1, **kw)
    assert tr["text"].tolist() != vtg["text"].tolist()
    assert tr["text"].tolist() == tr1["text"].tolist()  # ragged rows padded and masked: same texts as one by one
    assert list(vtg["label"]) == ["neg"] * 3 + ["pos"] * 3


def test_ragged_target_input_equals_unpadded_rows(gemma):
    """The padded, masked target input of rows of different WordPiece lengths gives each row the
    loss it gets alone (to float rounding), and equal lengths give the unpadded input exactly."""
    from textdp.attacks.inversion.pplm import _classifier_loss

    clf, G, vocab, _, _ = gemma
    br = vocab.bridge(clf)
    seqs = [[vocab.bos] + vocab.encode_text(t) for t in ("the film is a great story", "dull")]
    probs = torch.softmax(torch.randn(2, len(vocab), generator=torch.Generator().manual_seed(0)), -1)
    label = torch.tensor([1, 0])
    rows = [br.prefix_cls_ids(torch.tensor([s])) for s in seqs]
    assert rows[0].shape[1] != rows[1].shape[1]
    alone = torch.cat([_classifier_loss(clf, br, probs[i:i + 1], rows[i], label[i:i + 1]) for i in range(2)])
    T = max(r.shape[1] for r in rows)
    ids = torch.zeros(2, T, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : r.shape[1]] = r[0]
    ragged = _classifier_loss(clf, br, probs, (ids, torch.tensor([r.shape[1] for r in rows])), label)
    torch.testing.assert_close(ragged, alone, atol=1e-5, rtol=1e-5)
    same = _classifier_loss(clf, br, probs[:1], (rows[0], torch.tensor([rows[0].shape[1]])), label[:1])
    assert torch.equal(same, alone[:1])


# ----------------------------------------------------------------------------- banned tokens
def test_banned_ids_cover_special_added_and_padding_rows(gemma):
    from textdp.models.pretrained import banned_token_ids

    _, G, vocab, info, _ = gemma
    tok = vocab.tokenizer
    rows = G.hf.get_output_embeddings().weight.shape[0]
    assert rows == len(tok) + 2  # two padding rows the tokenizer cannot decode
    banned = set(vocab.banned.tolist())
    must = {tok.convert_tokens_to_ids(t) for t in UNUSED + ADDED_PLAIN} | {tok.bos_token_id, tok.pad_token_id,
                                                                              tok.unk_token_id, tok.mask_token_id,
                                                                              rows - 1, rows - 2}
    assert must <= banned and tok.eos_token_id not in banned
    assert info["banned_tokens"] == len(banned) == len(set(tok.added_tokens_decoder) - {tok.eos_token_id}) + 2
    assert banned_token_ids(tok, rows).tolist() == sorted(banned | {tok.eos_token_id})


class _Boost(torch.nn.Module):
    """The generator with some output logits raised by a constant (the rest unchanged)."""

    def __init__(self, G, ids, by=30.0):
        super().__init__()
        self.G, self.by = G, by
        self.ids = torch.as_tensor(ids)
        self.config = G.config

    def forward(self, input_ids=None, inputs_embeds=None, past=None):
        logits, new_past, hidden = self.G(input_ids=input_ids, inputs_embeds=inputs_embeds, past=past)
        return logits.index_add(-1, self.ids, torch.full((len(self.ids),), self.by).expand(*logits.shape[:-1], -1)), \
            new_past, hidden


def test_banned_tokens_never_generated_even_with_the_highest_logit(gemma):
    from textdp.attacks.inversion.pplm import PPLMConfig, generate

    clf, G, vocab, _, _ = gemma
    tok = vocab.tokenizer
    hot = [tok.convert_tokens_to_ids(t) for t in ("<unused3>", "<h1>", "<bos>")]
    B = _Boost(G, hot)
    prefix = torch.tensor([[vocab.bos] + vocab.encode_text("the film is")] * 3)
    cfg = PPLMConfig(stepsize=0.0, num_iterations=1, gen_length=8, top_k=5)
    free = generate(B, None, None, prefix, None, cfg, [1, 2, 3], perturb=False, eos=vocab.eos)
    body = free["ids"][:, prefix.shape[1]:]
    assert bool(torch.isin(body, torch.tensor(hot)).all())  # without the ban the boosted tokens are all it emits
    ban = vocab.banned_ids()
    br = vocab.bridge(clf)
    for out in (generate(B, None, None, prefix, None, cfg, [1, 2, 3], perturb=False, eos=vocab.eos, banned=ban),
                generate(B, clf, br, prefix, 1, PPLMConfig(stepsize=0.5, gamma=1.0, num_iterations=2, gen_length=8,
                                                           top_k=5), [1, 2, 3], eos=vocab.eos, banned=ban)):
        body = out["ids"][:, prefix.shape[1]:]
        assert not bool(torch.isin(body, torch.as_tensor(ban)).any())
        assert body.shape[1] >= 1
    # through the attack's own path: no banned text either
    texts = generate_texts_bpe("tr", clf=clf, generator=B, vocab=vocab, templates=TEMPLATES, labels=["neg", "pos"],
                               cfg=_cfg(pplm_stepsize=0.5, pplm_gamma=1.0), attack_key=3, gen_length=6)["text"]
    assert not any("<h1>" in t or "<unused" in t or "<bos>" in t for t in texts)


# ----------------------------------------------------------------------------- fine-tuning
@pytest.mark.parametrize("method", ["lora", "full"])
def test_finetuning_lowers_heldout_perplexity(gemma_dir, method):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if method == "lora":
        pytest.importorskip("peft")
    tok = AutoTokenizer.from_pretrained(str(gemma_dir), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(gemma_dir), local_files_only=True, dtype=torch.float32)
    train, held = _grammar(200, 10), _grammar(40, 11)

    def ppl(m):
        nll, cnt = causal_lm_nll(m, tok, held, batch_size=16)
        return float(np.exp(nll.sum() / cnt.sum()))

    before = ppl(model)
    lr = 1e-2 if method == "lora" else 3e-3
    model, stats = finetune_causal_lm(model, tok, train, FineTuneConfig(method=method, steps=30, batch_size=16, lr=lr),
                                      rng=make_rng(4))
    after = ppl(model)
    assert after < 0.5 * before, (before, after)
    assert stats["loss_last"] < stats["loss_first"]
    assert not any(p.requires_grad for p in model.parameters())
    assert type(model).__name__ == "Gemma3ForCausalLM"  # LoRA merged: a plain model of the same architecture
    if method == "lora":
        assert stats["trainable_parameters"] < sum(p.numel() for p in model.parameters()) // 2


def test_finetuned_generator_saved_once_and_shared_model_untouched(gemma_dir, tiny_models, tmp_path):
    from textdp.models.pretrained import load_causal_lm

    pytest.importorskip("peft")
    clf = tiny_models[0]
    shared = load_causal_lm(gemma_dir)
    w0 = shared.model.model.embed_tokens.weight.clone()
    ft = FineTuneConfig(steps=4, batch_size=4, lr=1e-2)
    pub = _grammar(50, 3)
    G1, v1, i1 = prepare_pretrained_generator(clf, str(gemma_dir), cache=tmp_path, public_texts=pub, finetune=ft)
    assert torch.equal(shared.model.model.embed_tokens.weight, w0)  # the loader's instance was copied, not trained
    f = i1["finetune"]
    assert not f["cached"] and f["heldout_public_texts"] == 10 and f["heldout_ppl_after"] < f["heldout_ppl_before"]
    folder = tmp_path / next(p.name for p in tmp_path.iterdir() if p.name.startswith("generator-ft-"))
    assert (folder / "config.json").is_file()
    assert json.loads((folder / "textdp-finetune.json").read_text())["config"]["steps"] == 4
    G2, v2, i2 = prepare_pretrained_generator(clf, str(gemma_dir), cache=tmp_path, public_texts=pub, finetune=ft)
    assert i2["finetune"]["cached"] and i2["alignment_stats"]["cached"]
    for a, b in zip(G1.parameters(), G2.parameters()):
        torch.testing.assert_close(a, b)
    # other public texts -> another fine-tune
    _, _, i3 = prepare_pretrained_generator(clf, str(gemma_dir), cache=tmp_path, public_texts=pub[:-1], finetune=ft)
    assert not i3["finetune"]["cached"]


def test_alignment_cached_equals_fresh(gemma, tmp_path):
    from textdp.attacks.inversion.gpt2_generator import build_alignment

    clf, _, vocab, _, _ = gemma
    n = len(vocab)
    fresh = build_alignment(vocab.tokenizer, clf.tokenizer, vocab_size=n)
    a1 = cached_alignment(vocab.tokenizer, clf.tokenizer, vocab_size=n, cache=tmp_path)
    a2 = cached_alignment(vocab.tokenizer, clf.tokenizer, vocab_size=n, cache=tmp_path)
    assert not a1.stats["cached"] and a2.stats["cached"]
    for a in (a1, a2):
        assert (a.matrix != fresh.matrix).nnz == 0 and a.matrix.shape == fresh.matrix.shape
        assert np.array_equal(a.n_pieces, fresh.n_pieces) and np.array_equal(a.word_initial, fresh.word_initial)
    # a word-initial Gemma-style token ('▁film') maps to BERT's word-initial piece
    i = vocab.tokenizer.convert_tokens_to_ids("\u2581film")
    assert clf.tokenizer.convert_ids_to_tokens(int(a2.matrix[i].indices[0])) == "film"


def test_save_folder_of_a_gguf_style_quantized_model(gemma_dir, tmp_path):
    """A model loaded from GGUF carries an hf_quantizer that makes save_pretrained raise; the
    shared save helper removes that state first and the folder loads back."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from textdp.models.pretrained import load_causal_lm, save_causal_lm_folder

    tok = AutoTokenizer.from_pretrained(str(gemma_dir), local_files_only=True)
    m = AutoModelForCausalLM.from_pretrained(str(gemma_dir), local_files_only=True, dtype=torch.float32)
    m.hf_quantizer = SimpleNamespace(quantization_config=SimpleNamespace(quant_method="gguf"))
    m.is_quantized = True
    m.config.quantization_config = {"quant_method": "gguf"}
    with pytest.raises(ValueError, match="not serializable"):
        m.save_pretrained(tmp_path / "plain")
    out = save_causal_lm_folder(m, tok, tmp_path / "saved")
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    back = load_causal_lm(out)
    for a, b in zip(back.model.parameters(), m.parameters()):
        assert torch.equal(a, b)


# ----------------------------------------------------------------------------- scratch-large knob
def test_scratch_large_generator_uses_its_sizes(tiny_models, textdp_cache, monkeypatch):
    import dataclasses

    from textdp.attacks.inversion import pipeline
    from textdp.attacks.inversion.pipeline import SCRATCH_GENERATORS, prepare_generator, split_data

    monkeypatch.setenv("TEXTDP_CACHE", str(textdp_cache))
    assert SCRATCH_GENERATORS["scratch-large"]["gen_d_model"] > 128 and SCRATCH_GENERATORS["scratch-large"][
        "gen_layers"] > 3
    # the same code path with sizes small enough for a unit test
    monkeypatch.setitem(pipeline.SCRATCH_GENERATORS, "scratch-large", {"gen_d_model": 24, "gen_layers": 3,
                                                                       "gen_heads": 3, "gen_epochs": 1})
    cfg = dataclasses.replace(_cfg(), max_public=60, max_private=30)
    data = split_data("rotten-tomatoes", cfg)
    clf = tiny_models[0]
    small, _, si = prepare_generator(data, clf, cfg)
    large, _, li = prepare_generator(data, clf, cfg.with_overrides(generator="scratch-large"))
    assert (small.config.d_model, small.config.n_layers) == (cfg.gen_d_model, cfg.gen_layers)
    assert (large.config.d_model, large.config.n_layers, li["d_model"]) == (24, 3, 24)


# ----------------------------------------------------------------------------- fluency scorer
@pytest.fixture(scope="module")
def scorer_and_heldout():
    from textdp.data import load_dataset

    ds = load_dataset("rotten-tomatoes")
    return NgramFluencyScorer(list(ds.train["text"].head(3000))), list(ds.test["text"].head(40))


def test_fluency_scorer_ranks_fluent_above_shuffled_and_is_deterministic(scorer_and_heldout):
    sc, held = scorer_and_heldout
    rng = np.random.default_rng(0)  # the shuffles (test data, not DP noise)
    wins = 0
    shuffled = []
    for t in held:
        ws = words(t)
        perm = list(ws)
        while len(set(ws)) > 1 and perm == ws:
            perm = [ws[i] for i in rng.permutation(len(ws))]
        shuffled.append(" ".join(perm))
        wins += sc.perplexity([t]) < sc.perplexity([shuffled[-1]])
    assert wins >= 38, wins  # held-out reviews, each against its own words shuffled
    assert sc.perplexity(held) * 3 < sc.perplexity(shuffled)
    # a fluent public sentence vs its shuffled words (the example of the issue)
    s = "the film is a great story"
    assert sc.perplexity([s]) < sc.perplexity(["story great film the a is"])
    # deterministic: the same numbers from the same scorer and from a second one trained alike
    from textdp.data import load_dataset

    again = NgramFluencyScorer(list(load_dataset("rotten-tomatoes").train["text"].head(3000)))
    assert sc.nll(held)[0].tolist() == sc.nll(held)[0].tolist() == again.nll(held)[0].tolist()


def test_fluency_scorer_is_a_distribution_and_normalises_case_and_spacing(scorer_and_heldout):
    sc, _ = scorer_and_heldout
    # every context's next-word probabilities sum to 1 over the vocabulary
    for ctx in [("<s>", "<s>"), ("the", "film"), ("zzqx", "<unk>"), ("<s>", "a")]:
        u, v = ctx
        total = sum(sc._p3(u, v, w) for w in sc.vocab)
        assert abs(total - 1) < 1e-9, (ctx, total)
    # case, accents and spacing around punctuation are not scored (the generators differ in them)
    assert sc.text_nll("It's a GREAT film.") == sc.text_nll("it ' s a great film .")
    assert words("Café, naïve!") == ["cafe", ",", "naive", "!"]
    # an unseen made-up word costs more than a seen one, and more than its <unk> class alone
    nll_seen, _ = sc.text_nll("a great film")
    nll_made, _ = sc.text_nll("a great zqxvtw")
    assert nll_made > nll_seen + 5
    assert sc.name and "KN" in sc.name


# ----------------------------------------------------------------------------- CLI
def test_cli_finetune_options_checked_before_any_work(tmp_path, monkeypatch, gemma_dir):
    from typer.testing import CliRunner

    import textdp.attacks.inversion as inversion
    from textdp.cli.main import app

    def no_work(*a, **k):
        raise AssertionError("work started before the options were checked")

    monkeypatch.setattr(inversion, "run_inversion", no_work)
    base = ["attack", "invert", "--preset", "tiny", "--output", str(tmp_path / "out"), "-q"]
    for extra, msg in ([["--generator", "scratch-large", "--finetune", "lora"], "--finetune fine-tunes a pretrained"],
                       [["--finetune-steps", "5"], "--finetune-steps fine-tunes a pretrained"],
                       [["--generator", str(gemma_dir), "--finetune", "qlora"], "--finetune must be lora, full or none"],
                       [["--generator", str(gemma_dir), "--finetune-steps", "0"], "--finetune-steps must be >= 1"]):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code == 2, r.output
        assert len(r.output.strip().splitlines()) == 1 and msg in r.output, r.output
    assert not (tmp_path / "out").exists()
