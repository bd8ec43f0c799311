"""Closed-form per-example gradients and FIL tangents of a lone nn.Linear (textdp.bounds.dpsgd,
``_linear_grads_and_tangents``) against the general torch.func computation and the exact Jacobian."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import textdp.bounds.dpsgd as D  # noqa: E402
from textdp.bounds.dpsgd import train_dpsgd_fil  # noqa: E402


def _raw(model, closed: bool, monkeypatch):
    monkeypatch.setattr(D, "_CLOSED_FORM_LINEAR", closed)
    raw = D._raw_grad_fn(model)
    assert (raw.closed_form_linear is not None) == closed  # the path under test is really taken
    return raw


def _linear(d, K, bias, dtype, seed, sequential=False):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(d, K, bias=bias).to(dtype)
    with torch.no_grad():
        lin.weight.mul_(4.0)  # logits of a few units: residuals far from 0 and from ±1
    return torch.nn.Sequential(lin) if sequential else lin


def _data(B, d, K, dtype, seed):
    r = np.random.default_rng(seed)
    X = r.normal(size=(B, d)) / np.sqrt(d)
    if B > 2:
        X[1] *= 40.0  # a large gradient (clipped hard at small C)
        X[2] *= 1e-3  # a small one
    return torch.from_numpy(X).to(dtype), torch.from_numpy(r.integers(0, K, size=B))


CASES = [  # (B, d, K, bias, probes, sequential)
    (1, 6, 2, True, 1, False),
    (1, 9, 3, False, 4, False),
    (7, 5, 2, True, 3, True),
    (33, 12, 4, True, 1, False),
    (16, 20, 3, False, 8, True),
]


@pytest.mark.parametrize("clip_norm", [1e6, 0.5, 0.02])  # no clipping, moderate, every gradient clipped hard
@pytest.mark.parametrize("case", CASES)
def test_closed_form_equals_torch_func_in_float64(case, clip_norm, monkeypatch):
    B, d, K, bias, m, seq = case
    model = _linear(d, K, bias, torch.float64, seed=B + d, sequential=seq)
    params = {k: v.detach() for k, v in model.named_parameters()}
    X, y = _data(B, d, K, torch.float64, seed=K)
    V = torch.from_numpy(D._rademacher_probes(np.random.Generator(np.random.PCG64(B)), (B, m, d))).double()
    G0, T0 = D._grads_and_tangents(_raw(model, False, monkeypatch), params, X, y, V)
    raw1 = _raw(model, True, monkeypatch)
    G1, T1 = D._grads_and_tangents(raw1, params, X, y, V)
    assert G1.shape == G0.shape and T1.shape == T0.shape == (B, m, G0.shape[1])
    np.testing.assert_allclose(G1.numpy(), G0.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(T1.numpy(), T0.numpy(), rtol=1e-12, atol=1e-14 * float(T0.abs().max()))
    np.testing.assert_allclose(D._per_example_grads(raw1, params, X, y).numpy(), G0.numpy(), rtol=1e-12, atol=1e-15)
    Gc0, sq0 = D._soft_clip_jvp(G0, T0.clone(), clip_norm)
    Gc1, sq1 = D._soft_clip_jvp(G1, T1.clone(), clip_norm)
    np.testing.assert_allclose(Gc1.numpy(), Gc0.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(sq1.numpy(), sq0.numpy(), rtol=1e-10)
    # an independent reference: ‖J v‖² with J = jacfwd of the directly written soft-clipped map
    from torch.func import jacfwd, vmap

    ref_map = D._functions(model, clip_norm)
    J = vmap(lambda x, yy: jacfwd(lambda xx: ref_map(params, xx, yy))(x))(X, y)  # (B, p, d)
    ref_sq = torch.sum(torch.einsum("npd,nmd->nmp", J, V) ** 2, dim=-1)
    np.testing.assert_allclose(sq1.numpy(), ref_sq.numpy(), rtol=1e-9)


@pytest.mark.parametrize("case", CASES[::2])
def test_closed_form_equals_torch_func_in_float32_with_seeded_probes(case, monkeypatch):
    # the training loop's own call (probes drawn from the seeded PCG64 generator), float32 as in training
    B, d, K, bias, m, seq = case
    model = _linear(d, K, bias, torch.float32, seed=d, sequential=seq)
    params = {k: v.detach() for k, v in model.named_parameters()}
    X, y = _data(B, d, K, torch.float32, seed=B)
    out = {}
    for closed in (False, True):
        gen = D._probe_generator(np.random.default_rng(3))
        out[closed] = D._fil_probes(_raw(model, closed, monkeypatch), params, X, y, m, gen, 0.3)
    np.testing.assert_allclose(out[True][0].numpy(), out[False][0].numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(out[True][1].numpy(), out[False][1].numpy(), rtol=1e-5)
    assert np.all(out[True][1].numpy() > 0)


def test_closed_form_exact_traces_equal_torch_func(monkeypatch):
    # the "expected" mode's exact traces (basis vectors as probes, in column chunks)
    model = _linear(11, 3, True, torch.float64, seed=5)
    params = {k: v.detach() for k, v in model.named_parameters()}
    X, y = _data(6, 11, 3, torch.float64, seed=6)
    t0 = D._exact_traces(_raw(model, False, monkeypatch), params, X, y, 0.4, max_floats=300)
    t1 = D._exact_traces(_raw(model, True, monkeypatch), params, X, y, 0.4, max_floats=300)
    np.testing.assert_allclose(t1.numpy(), t0.numpy(), rtol=1e-11)
    monkeypatch.setattr(D, "_CLOSED_FORM_LINEAR", True)
    ex = D.per_example_fil(model.float(), X.float().numpy(), y.numpy(), clip_norm=0.4, exact=True)  # jacfwd
    np.testing.assert_allclose(t1.numpy() / (11 * 0.4**2), ex, rtol=1e-4)


def test_closed_form_only_for_a_plain_linear_map():
    lin = torch.nn.Linear(4, 2)
    assert D._lone_linear(lin) == ("weight", "bias")
    assert D._lone_linear(torch.nn.Linear(4, 3, bias=False)) == ("weight", None)
    assert D._lone_linear(torch.nn.Sequential(torch.nn.Linear(4, 2))) == ("0.weight", "0.bias")
    assert D._lone_linear(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))) is None
    assert D._lone_linear(torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.LogSoftmax(dim=1))) is None

    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2.0 * super().forward(x)

    assert D._lone_linear(Scaled(4, 2)) is None
    hooked = torch.nn.Linear(4, 2)
    h = hooked.register_forward_hook(lambda mod, inp, out: out * 2.0)
    assert D._lone_linear(hooked) is None
    h.remove()
    assert D._lone_linear(hooked) == ("weight", "bias")
    param = torch.nn.Linear(4, 2)
    torch.nn.utils.parametrize.register_parametrization(param, "weight", torch.nn.Tanh())
    assert D._lone_linear(param) is None
    seq = torch.nn.Sequential(torch.nn.Linear(4, 2))
    seq.register_forward_pre_hook(lambda mod, inp: (inp[0] * 3.0,))
    assert D._lone_linear(seq) is None
    patched = torch.nn.Linear(4, 2)
    patched.forward = lambda x: torch.nn.functional.linear(x, patched.weight) * 2.0
    assert D._lone_linear(patched) is None
    back = torch.nn.Linear(4, 2)
    back.register_full_backward_hook(lambda mod, gin, gout: None)
    assert D._lone_linear(back) is None


def _toy(n=120, d=6, seed=0):
    r = np.random.default_rng(seed)
    X = (r.normal(size=(n, d)) / np.sqrt(d)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    return X, y


@pytest.mark.parametrize("mode", ["sampled-1", "sampled-3", "expected", "plain"])
def test_seeded_training_is_the_same_with_and_without_the_closed_form(mode, monkeypatch):
    X, y = _toy()
    X[3] *= 25.0  # one example clipped hard
    calls = {"n": 0}
    closed_fn = D._linear_grads_and_tangents

    def counted(*a, **k):
        calls["n"] += 1
        return closed_fn(*a, **k)

    monkeypatch.setattr(D, "_linear_grads_and_tangents", counted)
    kw = dict(epochs=2, batch_size=20, lr=0.5, clip_norm=0.5, noise_multiplier=1.0, rng=7,
              fil=mode != "plain", subsampling="expected" if mode == "expected" else "sampled",
              probes=3 if mode == "sampled-3" else 1)
    res = {}
    for closed in (False, True):
        monkeypatch.setattr(D, "_CLOSED_FORM_LINEAR", closed)
        before = calls["n"]
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 2)) if mode == "sampled-3" else torch.nn.Linear(6, 2)
        res[closed] = train_dpsgd_fil(model, X, y, **kw)
        assert (calls["n"] > before) == closed  # 12 steps: the closed form is used exactly when switched on
    a, b = res[False], res[True]
    for (k0, w0), (k1, w1) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert k0 == k1
        np.testing.assert_allclose(w1.detach().numpy(), w0.detach().numpy(), rtol=1e-5, atol=1e-6)
    if mode == "plain":
        assert a.eta2 is None and b.eta2 is None
    else:
        assert np.count_nonzero(a.eta2) > 60
        # atol: the hard-clipped example's tangent is nearly parallel to its gradient, and what the clip leaves
        # (its perpendicular part, η² ≈ 4e-5 here against ≈ 1 for the others) carries the float32 rounding of
        # the whole tangent in both computations (a relative difference of 2.5e-4 between them)
        np.testing.assert_allclose(b.eta2, a.eta2, rtol=1e-5, atol=1e-6 * a.eta2.max())
    for h0, h1 in zip(a.history, b.history):
        assert h1.accuracy == h0.accuracy and h1.epsilon == h0.epsilon
        assert h1.eta_median == pytest.approx(h0.eta_median, rel=1e-5, nan_ok=True)
