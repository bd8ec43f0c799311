"""One-run audit of DP-SGD with a transformer target and mislabelled canaries
(:func:`textdp.audit.dpsgd.audit_dpsgd` ``model=FOLDER``, ``canary_kind="mislabelled"``).

The transformer is a tiny randomly initialised BERT (2 layers, hidden 32, a 120-token WordPiece
vocabulary of letters and common words) built from a config here and saved to a temporary
folder: nothing is downloaded and no pretrained weights are read. It is fine-tuned with all its
layers by the audit's Opacus DP-SGD path on the CPU for a few steps. Fixed seeds (a simulation,
not a release).
"""

from __future__ import annotations

import json
import math
import os
import string

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.audit.dpsgd import CANARY_KINDS, audit_dpsgd, make_canaries
from textdp.cli.main import app
from textdp.errors import ParameterError

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("opacus")

runner = CliRunner()
WORDS = ("the a an and of to is it in that this film movie story good bad best worst funny dull not but with "
         "as its for be on by all more than too are one about like so his her has from who just").split()
# tiny task: 120 training snippets, expected batch 16, one epoch, 40 canaries, 40 test snippets
TINY = dict(max_examples=120, max_test_examples=40, batch_size=16, epochs=1.0, max_len=16)
CLI_TINY = ["--max-examples", "120", "--max-test-examples", "40", "--batch-size", "16", "--epochs", "1",
            "--max-len", "16", "--canaries", "40", "-e", "2"]


def _tiny_bert(folder, seed: int = 0):
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    chars = string.ascii_lowercase + string.digits
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *("##" + c for c in chars), *WORDS]
    tok = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)}, do_lower_case=True)
    cfg = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64, num_labels=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        BertForSequenceClassification(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    return _tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="module")
def bert_audit(tiny_bert):
    return audit_dpsgd(2.0, 1e-5, 40, model=str(tiny_bert), score="gradient", seed=11, **TINY)


def _n_params(folder) -> int:
    from transformers import AutoModelForSequenceClassification

    return sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(str(folder)).parameters())


def test_transformer_audit_runs_end_to_end_with_accountant_claim(bert_audit, tiny_bert):
    from opacus.accountants import RDPAccountant

    r = bert_audit
    n, m = 120, 40
    assert r.train_examples == n and r.canaries == m and r.canary_kind == "random-tokens"
    assert r.sample_rate == pytest.approx(16 / (n + m / 2)) and r.steps == math.ceil(1.0 / r.sample_rate)
    acct = RDPAccountant()
    acct.history = [(r.sigma, r.sample_rate, r.steps)]
    assert r.claimed_epsilon == pytest.approx(acct.get_epsilon(1e-5), rel=1e-12)  # the accountant's ε for σ
    assert r.claimed_epsilon <= 2.0 + 1e-9 and r.accountant == "Opacus RDP" and r.sigma_used == r.sigma
    a = r.audit
    assert 0.0 <= a.epsilon_lower <= a.attainable <= a.ceiling
    assert a.ceiling == pytest.approx(math.log(0.05 ** (1 / m) / (1 - 0.05 ** (1 / m))))
    assert r.flagged == (a.epsilon_lower > r.claimed_epsilon)
    assert r.canary_scores.shape == (m,) and np.all(np.isfinite(r.canary_scores))
    assert np.unique(r.canary_scores).size > m // 2  # the canaries are told apart (not one constant score)
    assert r.included == int(r.canary_included.sum())
    # all layers fine-tuned: every parameter of the tiny BERT is trained, nothing frozen
    assert r.trainable_parameters == _n_params(tiny_bert) and r.frozen == "nothing" and "all layers" in r.model
    assert r.optimizer == "Adam" and r.device == "cpu" and "white box" in r.threat_model
    assert 0.0 <= r.test_accuracy <= 1.0


def test_opacus_per_example_gradients_of_every_bert_layer_are_exact(tiny_bert):
    """Opacus's per-example gradients of every parameter, position embeddings included, equal one backward
    pass per example (dropout off). Without the audit's expansion of batch-1 embedding inputs the
    position table gets a (1, ...) gradient and this fails."""
    from opacus import GradSampleModule
    from transformers import AutoModelForSequenceClassification

    from textdp.audit.dpsgd import _expand_batch_one_inputs, _pad_ids

    # train mode (Opacus records activations only in training mode) with dropout off, so both sides are exact
    net = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), hidden_dropout_prob=0.0,
                                                             attention_probs_dropout_prob=0.0).train()
    rows = [[2, 10, 11, 12, 3], [2, 40, 3], [2, 5, 6, 7, 8, 9, 3]]
    ids, mask = _pad_ids(rows, 0)
    y = torch.tensor([0, 1, 1])
    state = {"B": len(rows)}
    handles = _expand_batch_one_inputs(net, state)
    gsm = GradSampleModule(net, loss_reduction="sum")
    torch.nn.functional.cross_entropy(gsm(input_ids=ids, attention_mask=mask).logits, y, reduction="sum").backward()
    per = {k: p.grad_sample.detach().clone() for k, p in net.named_parameters()}
    gsm._close()
    for h in handles:
        h.remove()
    assert "bert.embeddings.position_embeddings.weight" in per
    for i, r in enumerate(rows):
        net.zero_grad(set_to_none=True)
        out = net(input_ids=torch.tensor([r])).logits
        torch.nn.functional.cross_entropy(out, y[i:i + 1]).backward()
        for k, p in net.named_parameters():
            assert per[k].shape[0] == len(rows), k
            torch.testing.assert_close(per[k][i], p.grad, rtol=1e-4, atol=1e-6, msg=k)


def test_white_box_alignment_equals_per_canary_gradients(tiny_bert):
    """The batched forward-mode score equals ⟨Δ, −∇ℓ(θ_0; canary)⟩ from one backward pass per canary."""
    from transformers import AutoModelForSequenceClassification

    from textdp.audit.dpsgd import _alignment_scores

    net = AutoModelForSequenceClassification.from_pretrained(str(tiny_bert)).eval()
    theta0 = {k: p.detach().clone() for k, p in net.named_parameters()}
    g = torch.Generator().manual_seed(3)
    delta = {k: 0.01 * torch.randn(p.shape, generator=g) for k, p in theta0.items()}
    rows = [[2, 10, 11, 12, 3], [2, 40, 3], [2, 5, 6, 7, 8, 9, 3], [2, 60, 61, 3]]
    lab = torch.tensor([0, 1, 1, 0])
    got = _alignment_scores(net, theta0, delta, rows, lab, 0, torch.device("cpu"), chunk=3)
    for j, r in enumerate(rows):
        net.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(input_ids=torch.tensor([r])).logits, lab[j:j + 1]).backward()
        want = -sum(float((p.grad * delta[k]).sum()) for k, p in net.named_parameters())
        assert got[j] == pytest.approx(want, rel=1e-3, abs=1e-7)
    assert np.unique(got).size == len(rows)


def test_cli_transformer_mislabelled_loss_pld_frozen_embeddings(tiny_bert):
    r = runner.invoke(app, ["audit", "dpsgd", *CLI_TINY, "--model", str(tiny_bert), "--canary-kind", "mislabelled",
                            "--score", "loss", "--accountant", "pld", "--freeze-embeddings", "--seed", "4", "-q",
                            "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["canary_kind"] == "mislabelled" and d["train_examples"] == 120 - 40  # the sources are set aside
    assert d["accountant"] == "dp-accounting PLD" and "black box" in d["threat_model"]
    import dp_accounting
    from dp_accounting import pld

    acct = pld.PLDAccountant()
    acct.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(d["sample_rate"], dp_accounting.GaussianDpEvent(d["sigma"])), d["steps"]))
    assert d["claimed_epsilon"] == pytest.approx(acct.get_epsilon(1e-5), rel=1e-9) and d["claimed_epsilon"] <= 2.0
    assert 0.0 <= d["audit"]["epsilon_lower"] <= d["audit"]["ceiling"]
    n_vocab = 5 + 2 * 36 + len(WORDS)
    assert d["frozen"] == "word embeddings" and d["trainable_parameters"] == _n_params(tiny_bert) - n_vocab * 32
    assert "except the word embeddings (frozen)" in d["model"]


def test_cli_text_output_of_a_transformer_run(tiny_bert):
    r = runner.invoke(app, ["audit", "dpsgd", *CLI_TINY, "--model", str(tiny_bert), "--seed", "2", "-q"])
    assert r.exit_code == 0, r.output
    for needle in ("BertForSequenceClassification from", "all layers", "Adam lr 0.0005", "40 canary sentences",
                   "claimed   ε =", "(Opacus RDP accountant;", "ceiling   ln(q/(1−q)) = 2.55", "verdict"):
        assert needle in r.stdout, (needle, r.stdout)


# ---------------------------------------------------------------- mislabelled canaries and their coins

def _split(n: int, k: int, seed: int = 0):
    g = np.random.default_rng(seed)
    texts = [f"example {i} " + " ".join(g.choice(WORDS, size=5)) for i in range(n)]
    return texts, g.integers(0, k, size=n)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_mislabelled_canaries_are_real_examples_with_another_label(k):
    texts, y = _split(3000, k)
    c = make_canaries("mislabelled", 1000, texts, y, k, np.random.default_rng(1), np.random.default_rng(2))
    assert c.kind == "mislabelled" and len(c.texts) == 1000 and c.words == []
    assert np.unique(c.sources).size == 1000 and c.sources.min() >= 0 and c.sources.max() < 3000
    assert c.texts == [texts[i] for i in c.sources]  # the text is the real example, unchanged
    assert np.array_equal(c.source_labels, y[c.sources])
    assert np.all(c.labels != c.source_labels) and c.labels.min() >= 0 and c.labels.max() < k
    if k == 2:
        assert np.array_equal(c.labels, 1 - c.source_labels)
    else:  # uniform over the k - 1 other labels: each offset (label - source) mod k appears about equally
        from scipy.stats import chisquare

        off = (c.labels - c.source_labels) % k
        assert chisquare(np.bincount(off, minlength=k)[1:]).pvalue > 1e-3


@pytest.mark.parametrize("kind", CANARY_KINDS)
def test_coins_are_fair_and_independent_of_the_canary(kind):
    """Significance 1e-3 for each test, 20,000 canaries: a coin biased by 2 points, or one that follows
    the canary's label or its source's label, fails."""
    from scipy.stats import binomtest, chi2_contingency

    m = 20_000
    texts, y = _split(2 * m, 2, seed=5)
    c = make_canaries(kind, m, texts, y, 2, np.random.default_rng(7), np.random.default_rng(8))
    inc = c.included
    assert inc.dtype == bool and inc.shape == (m,)
    assert binomtest(int(inc.sum()), m, 0.5).pvalue > 1e-3
    table = np.array([[np.sum(inc & (c.labels == v)), np.sum(~inc & (c.labels == v))] for v in (0, 1)])
    assert chi2_contingency(table).pvalue > 1e-3  # the coin does not follow the canary's label
    # the coins come from their own generator: other canaries (the other kind, another canary seed) get the same coins
    other = make_canaries([k for k in CANARY_KINDS if k != kind][0], m, texts, y, 2, np.random.default_rng(99),
                          np.random.default_rng(8))
    assert np.array_equal(other.included, inc)
    if kind == "mislabelled":
        lengths = np.array([len(t) for t in c.texts])
        table = np.array([[np.sum(inc & (lengths > np.median(lengths))), np.sum(~inc & (lengths > np.median(lengths)))],
                          [np.sum(inc & (lengths <= np.median(lengths))), np.sum(~inc & (lengths <= np.median(lengths)))]])
        assert chi2_contingency(table).pvalue > 1e-3


def test_mislabelled_needs_at_most_half_the_split():
    texts, y = _split(100, 2)
    with pytest.raises(ParameterError, match="at most half of it"):
        make_canaries("mislabelled", 51, texts, y, 2, np.random.default_rng(0), np.random.default_rng(1))
    with pytest.raises(ParameterError, match="canary kind must be one of"):
        make_canaries("dirac", 5, texts, y, 2, np.random.default_rng(0), np.random.default_rng(1))


def test_bow_audit_with_mislabelled_canaries():
    r = audit_dpsgd(2.0, 1e-5, 100, canary_kind="mislabelled", max_examples=400, batch_size=32, epochs=1.0,
                    fdp=False, seed=5)
    assert r.train_examples == 300 and r.canary_kind == "mislabelled" and "canary rows" not in r.model
    assert np.all(r.canary_labels == 1 - r.canary_source_labels)
    assert 0.0 <= r.audit.epsilon_lower <= r.audit.ceiling and np.all(np.isfinite(r.canary_scores))


# ---------------------------------------------------------------- bad parameters: one line, exit 2, nothing written

@pytest.mark.parametrize("args,needle", [
    (["--model", "./no/such/model"], "does not exist"),
    (["--canary-kind", "dirac"], "--canary-kind must be one of"),
    (["--accountant", "moments"], "accountant must be one of"),
    (["--max-len", "32"], "--max-len applies to a transformer --model"),
    (["--freeze-embeddings"], "--freeze-embeddings applies to a transformer --model"),
    (["--device", "cpu"], "--device applies to a transformer --model"),
    (["--max-test-examples", "0"], "--max-test-examples must be a whole number"),
    (["--lr", "0"], "lr must be a finite number"),
    (["--canary-kind", "mislabelled", "--canaries", "1500", "--max-examples", "2000"], "at most half of it"),
])
def test_cli_bad_parameters_one_line_nothing_written(args, needle, tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        r = runner.invoke(app, ["audit", "dpsgd", *args])
    finally:
        os.chdir(cwd)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.output, r.output
    assert list(tmp_path.iterdir()) == []


def test_cli_max_len_beyond_the_model_positions_is_one_line(tiny_bert):
    r = runner.invoke(app, ["audit", "dpsgd", "--max-examples", "120", "--canaries", "40", "--batch-size", "16",
                            "--max-len", "65", "--model", str(tiny_bert)])
    assert r.exit_code == 2 and "--max-len 65 is more than the 64 positions" in r.output, r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.strip()]) == 1


def test_cli_hash_bits_refused_for_a_transformer(tiny_bert, tmp_path):
    r = runner.invoke(app, ["audit", "dpsgd", "--model", str(tiny_bert), "--hash-bits", "10"])
    assert r.exit_code == 2 and "--hash-bits applies to the bag-of-words model" in r.output, r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.strip()]) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cli_cuda_without_a_device_is_one_line(tiny_bert):
    r = runner.invoke(app, ["audit", "dpsgd", "--model", str(tiny_bert), "--device", "cuda"])
    assert r.exit_code == 2 and "sees no CUDA device" in r.output, r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.strip()]) == 1


def test_bag_of_words_gradient_threat_line_follows_the_canary_kind():
    """Mislabelled canaries share hashed rows with the training examples: the white-box line must not claim
    that the final parameters equal observing every step (it does for random-token canaries' own rows)."""
    from textdp.audit.dpsgd import MISLABELLED_BOW_GRADIENT, THREAT_MODELS

    kw = dict(max_examples=200, batch_size=32, epochs=1.0, fdp=False, seed=3, score="gradient")
    mis = audit_dpsgd(2.0, 1e-5, 40, canary_kind="mislabelled", **kw)
    assert mis.threat_model == MISLABELLED_BOW_GRADIENT and "every step" not in mis.threat_model
    rnd = audit_dpsgd(2.0, 1e-5, 40, canary_kind="random-tokens", **kw)
    assert rnd.threat_model == THREAT_MODELS["gradient"]


def test_unseeded_audit_says_its_generator_is_a_simulation_one():
    r = runner.invoke(app, ["audit", "dpsgd", "--max-examples", "200", "--batch-size", "32", "--canaries", "20", "--epochs", "1", "-e", "2",
                            "--json", "-q"])
    assert r.exit_code == 0, r.output
    import json

    note = json.loads(r.stdout)["seed_note"]
    assert "not a CSPRNG" in note and "randomness from the OS's CSPRNG" not in note


def test_cli_messages_name_flags_not_python_parameters():
    from textdp.cli.audit_dpsgd import _as_flags

    assert _as_flags("batch_size 256 is larger than the 200 training examples") == \
        "--batch-size 256 is larger than the 200 training examples"
    assert _as_flags("sample rate batch_size/(n + m/2) = 1.2 must be below 1; lower batch_size") == \
        "sample rate --batch-size/(n + m/2) = 1.2 must be below 1; lower --batch-size"
    assert _as_flags("delta must be in (0, 1) (e.g. 1e-5), got 2.0").startswith("--delta must")
    # a plain word is a flag only as the message's subject; prose keeps it
    assert _as_flags("mislabelled canaries take 40 examples") == "mislabelled canaries take 40 examples"
    r = runner.invoke(app, ["audit", "dpsgd", "--max-examples", "200", "--canaries", "20", "-e", "2"])
    assert r.exit_code == 2 and "--batch-size 256 is larger" in r.output and "batch_size" not in r.output
