"""Pretrained GPT-2-style generator with the BPE -> WordPiece alignment (spec §5.2).

Everything runs on LOCAL files: a tiny GPT-2 (2 layers, n_embd 16) and a byte-level
BPE tokenizer trained here on built-in texts, both saved with save_pretrained.
"""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from textdp.attacks.inversion.gpt2_generator import (  # noqa: E402
    BpeBridge, HFCausalLMAdapter, build_alignment, generate_texts_bpe, load_generator,
    prepare_pretrained_generator, resolve_generator, wordpiece_pieces,
)
from textdp.errors import InputError, ParameterError  # noqa: E402

EXTRA = ["the zxqv filmmaker , really"] * 30  # a made-up word that BPE merges into one token


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    from textdp.data import load_dataset

    texts = list(load_dataset("rotten-tomatoes").train["text"].head(300)) + EXTRA
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    ft = GPT2TokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                           unk_token="<|endoftext|>")
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    ft.save_pretrained(folder)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cfg = GPT2Config(vocab_size=len(ft), n_positions=64, n_embd=16, n_layer=2, n_head=2,
                         bos_token_id=ft.bos_token_id, eos_token_id=ft.eos_token_id)
        hf = GPT2LMHeadModel(cfg)
        with torch.no_grad():  # less flat than the 0.02 init, so the distribution reacts to the history
            for p in hf.parameters():
                if p.ndim == 2:
                    p.mul_(8.0)
    hf.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def loaded(gpt2_dir, tiny_models, tmp_path_factory):
    clf = tiny_models[0]  # the cached alignment goes to a temporary folder, not the user's cache
    return clf, *prepare_pretrained_generator(clf, str(gpt2_dir), cache=tmp_path_factory.mktemp("align-cache"))


def _row(vocab, clf, bpe_token):
    i = vocab.tokenizer.convert_tokens_to_ids(bpe_token)
    assert vocab.tokenizer.convert_ids_to_tokens(i) == bpe_token, f"{bpe_token!r} is not in the tiny BPE vocabulary"
    r = vocab.alignment.matrix[i]
    return {clf.tokenizer.convert_ids_to_tokens(int(c)): float(v) for c, v in zip(r.indices, r.data)}


def test_alignment_hand_checked_tokens(loaded):
    clf, _, vocab, info = loaded
    # word-initial tokens (leading space) -> the word-initial piece; cased GPT-2 text is lowercased as BERT does
    assert _row(vocab, clf, "Ġfilm") == {"film": 1.0}
    assert _row(vocab, clf, "Ġfilmmaker") == {"filmmaker": 1.0}
    # continuation tokens (no leading space) -> '##' pieces
    assert _row(vocab, clf, "s") == {"##s": 1.0}
    assert _row(vocab, clf, "ally") == {"##ally": 1.0}
    assert _row(vocab, clf, "The") == {"##the": 1.0}  # mid-word here, as after any other token
    # punctuation is its own word in BERT even without a leading space
    assert _row(vocab, clf, ",") == {",": 1.0}
    # nothing left (pure whitespace, a lone UTF-8 lead byte) -> [UNK]; end-of-text -> [SEP]
    assert _row(vocab, clf, "Ġ") == {"[UNK]": 1.0}
    assert _row(vocab, clf, "Ċ") == {"[UNK]": 1.0}
    assert _row(vocab, clf, "Ã") == {"[UNK]": 1.0}
    assert _row(vocab, clf, "<|endoftext|>") == {"[SEP]": 1.0}
    # a multi-piece token: policy 'first' puts all mass on the first piece
    assert clf.tokenizer.tokenize("zxqv") == ["z", "##x", "##q", "##v"]
    assert _row(vocab, clf, "Ġzxqv") == {"z": 1.0}
    assert vocab.alignment.n_pieces[vocab.tokenizer.convert_tokens_to_ids("Ġzxqv")] == 4
    assert info["alignment_stats"]["multi_piece_rows"] >= 1
    assert info["runtime"].startswith("gpt2 -> textdp CausalLM")


def test_alignment_mean_policy_and_rows_sum_to_one(loaded):
    clf, _, vocab, _ = loaded
    tok = vocab.tokenizer
    for policy in ("first", "mean"):
        al = build_alignment(tok, clf.tokenizer, policy=policy)
        A = al.matrix
        assert A.shape == (len(tok), len(clf.vocab_tokens))
        np.testing.assert_allclose(np.asarray(A.sum(axis=1)).ravel(), 1.0, atol=1e-6)
        assert (A.data > 0).all()
    mean = build_alignment(tok, clf.tokenizer, policy="mean")
    i = tok.convert_tokens_to_ids("Ġzxqv")
    r = mean.matrix[i]
    got = {clf.tokenizer.convert_ids_to_tokens(int(c)): float(v) for c, v in zip(r.indices, r.data)}
    assert got == pytest.approx({"z": 0.25, "##x": 0.25, "##q": 0.25, "##v": 0.25})
    # padded logit rows beyond the tokenizer map to [UNK]
    big = build_alignment(tok, clf.tokenizer, vocab_size=len(tok) + 3)
    assert big.matrix.shape[0] == len(tok) + 3
    assert set(big.matrix[len(tok):].indices.tolist()) == {clf.tokenizer.unk_token_id}
    with pytest.raises(ParameterError, match="policy"):
        build_alignment(tok, clf.tokenizer, policy="max")


def test_wordpiece_pieces_direct(tiny_models):
    tok = tiny_models[0].tokenizer
    ids = lambda s, init: tok.convert_ids_to_tokens(wordpiece_pieces(s, init, tok))  # noqa: E731
    assert ids(" Running", True) == tok.tokenize("running")
    assert ids("ing", False) == ["##ing"]
    assert ids("'s", False) == ["'", "s"]  # BERT splits the apostrophe off: "it's" -> it ' s
    assert ids("  ", True) == []
    assert ids(" \u2603\u2603", True) == tok.tokenize("\u2603\u2603")  # snowmen: BERT's own answer ([UNK] or a piece)


def test_soft_table_and_one_hot_reproduces_piece_embedding(loaded):
    clf, _, vocab, _ = loaded
    br = vocab.bridge(clf)
    E = clf.embedding_matrix().detach()
    assert br.soft_table.shape == (len(vocab), E.shape[1])
    i = vocab.tokenizer.convert_tokens_to_ids("Ġfilm")
    p = torch.zeros(1, len(vocab))
    p[0, i] = 1.0
    torch.testing.assert_close((p @ br.soft_table)[0], E[clf.tokenizer.convert_tokens_to_ids("film")])
    # multi-piece mass diagnostic
    j = vocab.tokenizer.convert_tokens_to_ids("Ġzxqv")
    q = torch.zeros(2, len(vocab))
    q[0, i], q[1, j] = 1.0, 1.0
    assert vocab.alignment.multi_piece_mass(q).tolist() == [0.0, 1.0]


def test_hard_prefix_is_decoded_and_retokenised(loaded):
    clf, _, vocab, _ = loaded
    br = vocab.bridge(clf)
    text = "The filmmaker's zxqv"
    seq = torch.tensor([[vocab.bos] + vocab.encode_text(text)])
    got = br.prefix_cls_ids(seq)
    assert got.tolist() == clf.token_ids([text])
    assert vocab.decode(seq[0].tolist() + [vocab.eos, 5, 6]) == text
    two = torch.tensor([[vocab.bos] + vocab.encode_text("a film")] * 2)
    assert br.prefix_cls_ids(two).shape == (2, len(clf.token_ids(["a film"])[0]))


def test_converted_and_adapter_match_hf_logits_with_history(gpt2_dir):
    from transformers import GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), local_files_only=True).eval()
    conv, tok, _ = load_generator(str(gpt2_dir))
    adapt, _, info = load_generator(str(gpt2_dir), convert_gpt2=False)
    assert isinstance(adapt, HFCausalLMAdapter) and "DynamicCache" in info["runtime"]
    ids = torch.tensor([tok.encode("the film is a great story")])
    with torch.no_grad():
        ref = hf(ids).logits
        for m in (conv, adapt):
            l1, past, _ = m(ids[:, :3])
            l2, _, _ = m(ids[:, 3:], past=past)
            torch.testing.assert_close(torch.cat([l1, l2], 1), ref, atol=1e-5, rtol=1e-5)


def test_models_from_hf_gpt2_loads_a_local_checkpoint(gpt2_dir, tmp_path):
    """The lower-level loader (models.causal_lm.from_hf_gpt2) shares the conversion: c_attn.bias
    is a parameter, not a mask buffer, and must be loaded; a missing folder is one clear error."""
    from transformers import GPT2LMHeadModel

    from textdp.errors import InputError
    from textdp.models.causal_lm import from_hf_gpt2

    model, tok = from_hf_gpt2(str(gpt2_dir))
    hf = GPT2LMHeadModel.from_pretrained(str(gpt2_dir), local_files_only=True).eval()
    assert torch.equal(model.state_dict()["h.0.attn.c_attn.bias"], hf.transformer.h[0].attn.c_attn.bias)
    ids = torch.tensor([tok.encode("a great film")])
    with torch.no_grad():
        torch.testing.assert_close(model(ids)[0], hf(ids).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(InputError, match="never downloads"):
        from_hf_gpt2(str(tmp_path / "no-such-folder"))


@pytest.mark.parametrize("adapter", [False, True])
def test_gradient_reaches_past_through_alignment(loaded, gpt2_dir, adapter):
    from textdp.attacks.inversion.pplm import PPLMConfig, perturb_past

    clf, G, vocab, _ = loaded
    if adapter:
        G = load_generator(str(gpt2_dir), convert_gpt2=False)[0]
    br = vocab.bridge(clf)
    seq = torch.tensor([[vocab.bos] + vocab.encode_text("the film is a")])
    with torch.no_grad():
        _, past, _ = G(seq[:, :-1])
    deltas = [(torch.zeros_like(k, requires_grad=True), torch.zeros_like(v, requires_grad=True)) for k, v in past]
    logits, _, _ = G(seq[:, -1:], past=[(k + dk, v + dv) for (k, v), (dk, dv) in zip(past, deltas)])
    probs = torch.softmax(logits[:, -1], -1)
    E = clf.embedding_matrix()
    prefix = br.prefix_cls_ids(seq)
    inp = torch.cat([E[br.cls_id].expand(1, 1, -1), E[prefix], (probs @ br.soft_table)[:, None],
                     E[br.sep_id].expand(1, 1, -1)], 1)
    loss = torch.nn.functional.cross_entropy(clf.logits_from_embeds(inp, torch.ones(inp.shape[:2], dtype=torch.long)),
                                             torch.tensor([1]))
    grads = torch.autograd.grad(loss, [t for kv in deltas for t in kv])
    norms = [float(g.norm()) for g in grads]
    assert all(np.isfinite(norms)) and min(norms) > 0
    # PPLM's own update with this bridge: one step lowers the target loss
    cfg = PPLMConfig(stepsize=0.5, num_iterations=2, window_length=0, gamma=1.0)
    _, losses = perturb_past(G, clf, br, past, seq[:, -1:], seq, torch.tensor([1]), cfg)
    assert float(losses[1, 0]) < float(losses[0, 0])


def test_stepsize_zero_gives_vtg_and_tr_differs(loaded):
    from textdp.attacks.inversion.config import preset_config

    clf, G, vocab, _ = loaded
    cfg = preset_config("tiny")
    kw = dict(clf=clf, generator=G, vocab=vocab, templates=["the film is", "a great"], labels=["neg", "pos"],
              attack_key=11, gen_length=6)
    vtg = generate_texts_bpe("vtg", cfg=cfg, **kw)
    tr0 = generate_texts_bpe("tr", cfg=cfg.with_overrides(pplm_stepsize=0.0), **kw)
    tr = generate_texts_bpe("tr", cfg=cfg.with_overrides(pplm_stepsize=0.5), **kw)
    assert len(vtg) == 4 and list(vtg["label"]) == ["neg", "neg", "pos", "pos"]
    assert tr0["text"].tolist() == vtg["text"].tolist()
    assert tr["text"].tolist() != vtg["text"].tolist()
    assert all(t.startswith(tpl) for t, tpl in zip(tr["text"], tr["template"]))
    with pytest.raises(ParameterError):
        generate_texts_bpe("vmi", cfg=cfg, **kw)


def test_resolve_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    with pytest.raises(InputError, match="not in the local Hugging Face cache.*--generator PATH"):
        resolve_generator("gpt2")
    with pytest.raises(InputError, match="does not exist"):
        resolve_generator(str(tmp_path / "no" / "such" / "folder"))
    f = tmp_path / "file.bin"
    f.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        resolve_generator(str(f))
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{}")
    assert resolve_generator(str(tmp_path / "bad")) == tmp_path / "bad"
    with pytest.raises(InputError, match="cannot load a causal language model"):
        load_generator(str(tmp_path / "bad"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="has no config.json"):
        load_generator(str(tmp_path / "empty"))
    # checked before any work (the CLI resolves --generator before training the target)
    with pytest.raises(InputError, match="has no config.json.*must hold config.json, the model weights"):
        resolve_generator(str(tmp_path / "empty"))
    (tmp_path / "empty" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match="has no config.json"):
        resolve_generator(str(tmp_path / "empty"))


def _cli_wired() -> bool:
    """Whether pipeline.py / cli/attack.py route --generator to this module (the wiring edit)."""
    import inspect

    from textdp.attacks.inversion import pipeline
    from textdp.cli import attack

    return "gpt2_generator" in inspect.getsource(pipeline) and "gpt2_generator" in inspect.getsource(attack)


needs_wiring = pytest.mark.skipif(not _cli_wired(), reason="--generator PATH|gpt2 is not wired into pipeline.py / "
                                  "cli/attack.py yet (see docs/attacks.md)")


@needs_wiring
def test_cli_generator_gpt2_not_cached(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    r = CliRunner().invoke(app, ["attack", "invert", "--preset", "tiny", "--generator", "gpt2",
                                 "--output", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 2, r.output
    assert "not in the local Hugging Face cache" in r.output and "--generator PATH" in r.output
    assert not (tmp_path / "out").exists()


@needs_wiring
def test_cli_generator_empty_folder_fails_before_any_work(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import textdp.attacks.inversion as inversion
    from textdp.cli.main import app

    def no_work(*a, **k):
        raise AssertionError("work started before --generator was checked")

    monkeypatch.setattr(inversion, "run_inversion", no_work)
    (tmp_path / "adir").mkdir()
    r = CliRunner().invoke(app, ["attack", "invert", "--preset", "tiny", "--generator", str(tmp_path / "adir"),
                                 "--output", str(tmp_path / "out"), "-q"])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "has no config.json" in r.output, r.output
    assert not (tmp_path / "out").exists()


@needs_wiring
def test_cli_end_to_end_with_local_gpt2(gpt2_dir, textdp_cache, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    # the session cache of the inversion tests: the tiny target and fluency scorer are trained once per session
    monkeypatch.setenv("TEXTDP_CACHE", str(textdp_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    out = tmp_path / "res"
    r = CliRunner().invoke(app, ["attack", "invert", "--dataset", "rotten-tomatoes", "--preset", "tiny",
                                 "--method", "tr,vtg", "--generator", str(gpt2_dir), "--templates", "2",
                                 "--seed", "3", "--seeds", "1", "--output", str(out), "-q", "--json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.stdout)
    assert {row["method"] for row in js["summary"]} == {"tr", "vtg", "tr-vtg"}
    card = json.loads((out / "report.json").read_text())
    assert card["generator"]["alignment"] == "bpe_to_wordpiece (policy first)"
    assert card["generator"]["model_type"] == "gpt2"
    import pandas as pd

    inv = pd.read_csv(out / "inverted.csv", keep_default_na=False)
    assert len(inv) == 2 * 2 * 2  # 2 methods x 2 labels x 2 templates
    assert all(str(t).startswith(tpl) for t, tpl in zip(inv["text"], inv["template"]))
