"""Text Revealer's PPLM perturbation: alpha=0 equivalence, gradient path, window mask, batching."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from textdp.attacks.inversion.pplm import PPLMConfig, SharedBridge, generate, perturb_past, window_mask  # noqa: E402
from textdp.errors import ParameterError  # noqa: E402


def _prefix(vocab, clf, texts):
    rows = [[vocab.bos] + vocab.encode(clf.token_ids([t]))[0] for t in texts]
    assert len({len(r) for r in rows}) == 1
    return torch.tensor(rows)


def test_stepsize_zero_gives_exactly_vtg(tiny_models):
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    prefix = _prefix(vocab, clf, ["a great film", "the plot is", "the movie is"])
    seeds = [11, 12, 13]
    cfg0 = PPLMConfig(stepsize=0.0, num_iterations=3, gen_length=10, top_k=5)
    tr = generate(G, clf, bridge, prefix, 1, cfg0, seeds, perturb=True)
    vtg = generate(G, None, None, prefix, None, cfg0, seeds, perturb=False)
    assert torch.equal(tr["ids"], vtg["ids"])
    assert tr["ids"].shape[1] > prefix.shape[1]
    # and a real step size changes the text (the steering has an effect)
    tr1 = generate(G, clf, bridge, prefix, 1, PPLMConfig(stepsize=0.5, num_iterations=3, gen_length=10, top_k=5,
                                                        gamma=1.0), seeds)
    assert not torch.equal(tr1["ids"], vtg["ids"])


def test_gradient_reaches_past_and_step_lowers_target_loss(tiny_models):
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    prefix = _prefix(vocab, clf, ["a great film", "the plot is"])
    with torch.no_grad():
        _, past, _ = G(prefix[:, :-1])
    last = prefix[:, -1:]
    label = torch.tensor([1, 0])
    # gradient of the classifier CE w.r.t. the past keys/values is non-zero in every layer
    leaves = [(torch.zeros_like(k, requires_grad=True), torch.zeros_like(v, requires_grad=True)) for k, v in past]
    logits, _, _ = G(last, past=[(k + dk, v + dv) for (k, v), (dk, dv) in zip(past, leaves)])
    from textdp.attacks.inversion.pplm import _classifier_loss

    ce = _classifier_loss(clf, bridge, torch.softmax(logits[:, -1], -1), bridge.prefix_cls_ids(prefix), label)
    ce.sum().backward()
    for dk, dv in leaves:
        assert dk.grad.abs().sum() > 0 and dv.grad.abs().sum() > 0
    # small normalised steps lower the loss, iteration after iteration, for every sample
    cfg = PPLMConfig(stepsize=0.05, num_iterations=4, gamma=1.0, window_length=0)
    deltas, losses = perturb_past(G, clf, bridge, past, last, prefix, label, cfg)
    assert losses.shape == (4, 2)
    assert torch.all(losses[1:] < losses[:-1])
    assert all(dk.abs().sum() > 0 for dk, _ in deltas)


def test_window_mask_positions_and_zero_gradient_outside(tiny_models):
    assert window_mask(5, 3, "oldest").tolist() == [1, 1, 1, 0, 0]
    assert window_mask(5, 3, "recent").tolist() == [0, 0, 1, 1, 1]
    assert window_mask(3, 3).tolist() == [1, 1, 1]  # history <= w: full mask
    assert window_mask(4, 0).tolist() == [1, 1, 1, 1]
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    prefix = _prefix(vocab, clf, ["great acting and a sharp script"])
    with torch.no_grad():
        _, past, _ = G(prefix[:, :-1])
    assert past[0][0].shape[2] > 3
    cfg = PPLMConfig(stepsize=0.1, num_iterations=2, window_length=2, window_anchor="oldest")
    deltas, _ = perturb_past(G, clf, bridge, past, prefix[:, -1:], prefix, torch.tensor([1]), cfg)
    for dk, dv in deltas:
        assert dk[:, :, 2:].abs().sum() == 0 and dv[:, :, 2:].abs().sum() == 0
        assert dk[:, :, :2].abs().sum() > 0


def test_batched_equals_unbatched(tiny_models):
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    texts = ["a great film", "the plot is"]
    cfg = PPLMConfig(stepsize=0.05, num_iterations=2, gen_length=6, top_k=5)
    both = generate(G, clf, bridge, _prefix(vocab, clf, texts), [1, 0], cfg, [5, 6])
    one = generate(G, clf, bridge, _prefix(vocab, clf, texts[:1]), 1, cfg, [5])
    two = generate(G, clf, bridge, _prefix(vocab, clf, texts[1:]), 0, cfg, [6])
    n1, n2 = one["ids"].shape[1], two["ids"].shape[1]
    assert both["ids"][0, :n1].tolist() == one["ids"][0].tolist()
    assert both["ids"][1, :n2].tolist() == two["ids"][0].tolist()


def test_expected_embedding_of_one_hot_equals_hard_token(tiny_models):
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    g = 5
    onehot = torch.zeros(1, len(vocab))
    onehot[0, g] = 1.0
    E = clf.embedding_matrix()
    soft = onehot @ bridge.soft_table
    assert torch.allclose(soft[0], E[int(vocab.gen_to_cls[g])])
    ids = torch.tensor([[bridge.cls_id, int(vocab.gen_to_cls[g]), bridge.sep_id]])
    hard = clf.logits(ids)
    via = clf.logits_from_embeds(torch.stack([E[bridge.cls_id], soft[0], E[bridge.sep_id]])[None])
    assert torch.allclose(hard, via, atol=1e-5)


def test_bad_configs():
    with pytest.raises(ParameterError):
        PPLMConfig(window_anchor="middle")
    with pytest.raises(ParameterError):
        PPLMConfig(gm_scale=1.5)
    with pytest.raises(ParameterError):
        PPLMConfig(horizon_length=2)


def test_banned_tokens_never_emitted_and_alpha_zero_still_vtg(tiny_models):
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    prefix = _prefix(vocab, clf, ["a great film", "the plot is", "the movie is"])
    seeds = [21, 22, 23]
    cfg = PPLMConfig(stepsize=0.0, num_iterations=2, gen_length=12, top_k=len(vocab), temperature=3.0)
    free = generate(G, None, None, prefix, None, cfg, seeds, perturb=False)
    gen_part = free["ids"][:, prefix.shape[1]:]
    # the flat tiny model emits [UNK] without the ban (so the ban below is tested on a real case)
    assert bool((gen_part == vocab.unk).any())
    ban = [vocab.bos, vocab.unk]
    vtg = generate(G, None, None, prefix, None, cfg, seeds, perturb=False, banned=ban)
    tr0 = generate(G, clf, bridge, prefix, 1, cfg, seeds, perturb=True, banned=ban)
    assert torch.equal(vtg["ids"], tr0["ids"])
    tr = generate(G, clf, bridge, prefix, 1, PPLMConfig(stepsize=0.5, gamma=1.0, num_iterations=2, gen_length=12,
                                                         top_k=len(vocab), temperature=3.0), seeds, banned=ban)
    for out in (vtg, tr):
        body = out["ids"][:, prefix.shape[1]:]
        assert not bool(((body == vocab.unk) | (body == vocab.bos)).any())


def test_steering_raises_target_probability_of_the_label_on_hard_text(tiny_models):
    """The perturbation moves the *sampled tokens*, not only the soft distribution:
    averaged over rows, the target gives TR's hard texts a higher probability of the
    steered label than the same-seed VTG texts."""
    clf, G, vocab = tiny_models
    bridge = SharedBridge.build(vocab, clf)
    texts = ["a great film", "the plot is", "the movie is", "a warm and"]
    rows = [t for t in texts for _ in range(4)]
    lens = {}
    for t in rows:
        lens.setdefault(len(clf.token_ids([t])[0]), []).append(t)
    probs = {"tr": [], "vtg": []}
    for lab in (0, 1):
        for group in lens.values():
            prefix = _prefix(vocab, clf, group)
            seeds = [100 * lab + i for i in range(len(group))]
            kw = dict(gen_length=8, top_k=10, gamma=1.0, num_iterations=3, window_length=0)
            tr = generate(G, clf, bridge, prefix, lab, PPLMConfig(stepsize=1.0, **kw), seeds, banned=[0, 2])
            vt = generate(G, None, None, prefix, None, PPLMConfig(stepsize=1.0, **kw), seeds, perturb=False,
                          banned=[0, 2])
            for name, out in (("tr", tr), ("vtg", vt)):
                hard = [vocab.decode(r) for r in out["ids"].tolist()]
                probs[name].extend(clf.predict_proba(hard)[:, lab].tolist())
    assert np.mean(probs["tr"]) > np.mean(probs["vtg"]) + 0.02
