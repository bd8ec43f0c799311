"""Tiny models made on the fly for the inversion tests (no MiniLM fine-tuning)."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tiny tensors: one intra-op thread avoids OpenMP spin-waiting on a busy machine."""
    torch = pytest.importorskip("torch")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

SENTS = [
    "a great film with a fine story", "the movie is dull and far too long", "a warm and funny movie",
    "the plot is a mess", "great acting and a sharp script", "boring , slow and silly",
] * 3


@pytest.fixture(scope="session")
def tiny_models():
    torch = pytest.importorskip("torch")
    from textdp.models.causal_lm import CausalLM, CausalLMConfig, SharedVocab
    from textdp.models.classifier import tiny_classifier
    from textdp.noise import make_rng

    from textdp.models.classifier import fine_tune

    rng = make_rng(7)
    clf = tiny_classifier(["neg", "pos"], rng=rng, hidden=16, layers=1, heads=2, intermediate=32)
    # a few steps so that the target reacts to its input (a random one is nearly constant)
    fine_tune(clf, SENTS, [1, 0, 1, 0, 1, 0] * 3, epochs=10, lr=1e-2, batch_size=6, rng=rng)
    clf.freeze()
    ids = clf.token_ids(SENTS)
    vocab = SharedVocab.from_corpus(ids, clf.vocab_tokens)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        G = CausalLM(CausalLMConfig(len(vocab), d_model=16, n_layers=2, n_heads=2, max_len=64, dropout=0.0)).eval()
        for p in G.parameters():
            p.requires_grad_(False)
            if p.ndim == 2:
                p.mul_(8.0)  # less flat than the 0.02 init, so sampling is not uniform noise
    return clf, G, vocab


@pytest.fixture(scope="session")
def textdp_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("textdp-cache")
