"""FIL accountant for DP-SGD (spec A.6–A.7). Tiny torch models only."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from textdp.bounds.dpsgd import (  # noqa: E402
    dpsgd_rdp,
    per_example_fil,
    soft_clip_factor_max,
    train_dpsgd_fil,
)
from textdp.errors import ParameterError  # noqa: E402


def _toy(n=120, d=6, seed=0):
    r = np.random.default_rng(seed)
    X = (r.normal(size=(n, d)) / np.sqrt(d)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    return X, y


def _mlp(d, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(d, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))


def test_soft_clip_constant():
    assert soft_clip_factor_max() == pytest.approx(1.1152, abs=1e-4)


def test_trace_estimator_unbiased_confidence_interval():
    # Hutchinson with distinct Rademacher probes vs the exact trace from jacfwd.
    # 99.9 % CI on the mean of 40 independent estimates (8 probes each) per example.
    X, y = _toy(n=6)
    model = _mlp(X.shape[1])
    exact = per_example_fil(model, X, y, clip_norm=0.5, exact=True)
    R = 40  # each example repeated R times: R independent estimates from one batched call
    reps = per_example_fil(model, np.tile(X, (R, 1)), np.tile(y, R), clip_norm=0.5, probes=8, seed=1).reshape(R, -1)
    mean, se = reps.mean(axis=0), reps.std(axis=0, ddof=1) / np.sqrt(len(reps))
    assert np.all(np.abs(mean - exact) <= 3.3 * se + 1e-12)
    assert np.all(se > 0)  # the probes really differ (the official code reused one key)


def test_logistic_regression_exact_fil_closed_form():
    # linear softmax model, no clipping effect (C huge): ∂g/∂x has a closed form; check exact mode
    X, y = _toy(n=4, d=3)
    torch.manual_seed(1)
    lin = torch.nn.Linear(3, 2)
    C, sigma = 1e6, 1.0
    ex = per_example_fil(lin, X, y, clip_norm=C, noise_multiplier=sigma, exact=True)
    W = lin.weight.detach().double().numpy()
    b = lin.bias.detach().double().numpy()
    for i in range(4):
        x = X[i].astype(np.float64)
        z = W @ x + b
        p = np.exp(z - z.max())
        p /= p.sum()
        e = np.eye(2)[y[i]]
        r = p - e  # ∂ℓ/∂z
        S = np.diag(p) - np.outer(p, p)  # ∂r/∂z
        # g_W = r xᵀ (2×3), g_b = r; J = ∂[vec(g_W), g_b]/∂x
        JW = np.zeros((2, 3, 3))
        for a in range(2):
            for j in range(3):
                JW[a, j, :] = (S @ W)[a, :] * x[j] + r[a] * np.eye(3)[j]
        Jb = S @ W
        J = np.concatenate([JW.reshape(6, 3), Jb], axis=0)
        g_norm = np.sqrt(np.sum((np.outer(r, x)) ** 2) + np.sum(r**2))
        assert g_norm < C
        ref = np.sum(J**2) / (3 * (sigma * C) ** 2)
        assert ex[i] == pytest.approx(ref, rel=1e-3)


def test_training_logreg_and_mlp_on_text_like_features():
    X, y = _toy(n=120, d=6)
    for model in (torch.nn.Linear(6, 2), _mlp(6)):
        res = train_dpsgd_fil(model, X, y, epochs=2, batch_size=30, lr=0.5, clip_norm=1.0, noise_multiplier=1.0,
                              probes=2, rng=7)
        t = res.table()
        assert list(t["epoch"]) == [1, 2]
        assert np.all(np.diff(t["eta_median"]) > 0)  # composition: η² only grows
        assert np.all(t["eta_max"] >= t["eta_median"])
        assert np.all(np.diff(t["rdp_epsilon2"]) > 0)
        assert res.eta2.shape == (120,) and np.all(res.eta2 >= 0)
        assert res.guarantee.epsilon_at(2.0) == pytest.approx(t["rdp_epsilon2"].iloc[-1])
        assert res.seed["seeded"] is True


def test_reproducible_with_seed_and_fil_off_matches_updates():
    X, y = _toy()
    r1 = train_dpsgd_fil(_mlp(6), X, y, epochs=1, batch_size=40, rng=3, probes=1)
    r2 = train_dpsgd_fil(_mlp(6), X, y, epochs=1, batch_size=40, rng=3, probes=1)
    np.testing.assert_allclose(r1.eta2, r2.eta2)
    w1 = [p.detach().numpy() for p in r1.model.parameters()]
    w2 = [p.detach().numpy() for p in r2.model.parameters()]
    for a, b in zip(w1, w2):
        np.testing.assert_allclose(a, b)
    r3 = train_dpsgd_fil(_mlp(6), X, y, epochs=1, batch_size=40, rng=3, fil=False)
    assert r3.eta2 is None and np.isnan(r3.table()["eta_median"].iloc[0])


def test_subsampling_factor_wmax_reduces_fil():
    X, y = _toy()
    a = train_dpsgd_fil(_mlp(6), X, y, epochs=1, batch_size=12, rng=5, noise_multiplier=10.0)
    b = train_dpsgd_fil(_mlp(6), X, y, epochs=1, batch_size=12, rng=5, noise_multiplier=10.0, subsampling="wmax")
    w = b.config["subsampling_factor"]
    assert 0 < w < 1
    np.testing.assert_allclose(b.eta2, w * a.eta2, rtol=1e-5)


def test_rdp_accounting_of_run():
    r = dpsgd_rdp(1000, 10, 1.0, 100, 1e-5)
    assert 0 < r["epsilon2"] < r["epsilon"] + 1e3
    # replace-one (sensitivity 2κC) is never cheaper than Opacus's add/remove (κC) for the same run
    assert r["epsilon"] >= r["epsilon_opacus_add_remove"]


def test_bad_inputs():
    X, y = _toy()
    bn = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))
    with pytest.raises(ParameterError, match="batch norm"):
        train_dpsgd_fil(bn, X, y)
    for kw in (dict(noise_multiplier=0.0), dict(clip_norm=-1.0), dict(delta=1.5), dict(batch_size=0),
               dict(noise_multiplier=float("nan")), dict(delta=0.5)):
        with pytest.raises(ParameterError):
            train_dpsgd_fil(_mlp(6), X, y, **kw)


def test_sampled_mode_is_an_estimate_with_unsampled_zeros_expected_mode_is_not():
    # one epoch, B/n = 1/10: about (1 - 1/10)^10 ≈ 35 % of the examples are never sampled
    X, y = _toy(n=100, d=4)
    a = train_dpsgd_fil(_mlp(4), X, y, epochs=1, batch_size=10, rng=3, noise_multiplier=2.0)
    assert a.config["subsampling"] == "sampled" and a.config["fil"].startswith("estimate")
    assert 0.2 < np.mean(a.eta2 == 0) < 0.5
    b = train_dpsgd_fil(_mlp(4), X, y, epochs=1, batch_size=10, rng=3, noise_multiplier=2.0, subsampling="expected")
    assert np.all(b.eta2 > 0) and b.config["fil"].startswith("bound")
    # the old name still selects the estimate
    c = train_dpsgd_fil(_mlp(4), X, y, epochs=1, batch_size=10, rng=3, noise_multiplier=2.0, subsampling="convexity")
    assert c.config["subsampling"] == "sampled"


def test_expected_mode_charges_q_times_the_exact_trace_every_step():
    # one step with lr = 0 (θ fixed): expected mode = q · exact one-step dFIL for every example
    X, y = _toy(n=20, d=3)
    model = _mlp(3)
    exact = per_example_fil(model, X, y, clip_norm=0.7, noise_multiplier=1.5, exact=True)
    r = train_dpsgd_fil(model, X, y, epochs=1, batch_size=20, lr=1e-300, momentum=0.0, clip_norm=0.7,
                        noise_multiplier=1.5, rng=0, subsampling="expected")
    assert r.eta2 == pytest.approx(exact * 1.0, rel=1e-4)  # q = B/n = 1, one step


def test_noisy_clipped_sum_is_float_safe():
    from textdp.bounds.dpsgd import noisy_clipped_sum
    from textdp.noise import make_rng
    from textdp.noise.samplers import gaussian_granularity

    rng = np.random.default_rng(0)
    G = rng.normal(size=(8, 50)).astype(np.float32)
    G /= np.linalg.norm(G, axis=1, keepdims=True)  # norm 1 (float32: may exceed 1 by an ulp)
    out = noisy_clipped_sum(torch.from_numpy(G), 1.0, 0.3, make_rng(1))
    g = gaussian_granularity(0.3)
    assert np.all(out / g == np.round(out / g))  # every released value is a lattice point
    # the rounding only shrinks: each rounded row keeps norm ≤ bound, so the sum moves by < B·√p·g
    assert np.abs(out - G.sum(axis=0)).max() < 0.3 * 8
    # the same seed gives the same release; the input's low-order bits do not reach the output
    G2 = G.copy()
    G2[0, 0] = np.nextafter(G2[0, 0], np.float32(0))  # one ulp toward zero
    a = noisy_clipped_sum(torch.from_numpy(G), 1.0, 0.3, make_rng(2))
    b = noisy_clipped_sum(torch.from_numpy(G2), 1.0, 0.3, make_rng(2))
    assert np.array_equal(a, b) or np.abs(a - b).max() == g


def _old_soft_clipped_map(model, clip_norm):
    """The soft-clipped per-example gradient written as the original implementation did (autograd
    through torch's cross_entropy, the norm and the GELU): the reference for the closed form."""
    from torch.func import functional_call, grad

    def loss_fn(params, x, y):
        logits = functional_call(model, params, (x.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(logits, y.unsqueeze(0))

    def clipped(params, x, y):
        g = grad(loss_fn)(params, x, y)
        flat = torch.cat([t.reshape(-1) for t in g.values()])
        nrm = torch.sqrt(torch.sum(flat * flat)) + 1e-7
        return flat / (torch.nn.functional.gelu(nrm / clip_norm - 1.0) + 1.0)

    return clipped


@pytest.mark.parametrize("clip_norm", [1e6, 0.5, 0.02])  # no clipping, moderate, every gradient clipped hard
def test_closed_form_clip_tangents_equal_the_exact_jacobian(clip_norm):
    # the training loop's one-pass computation (jvp of the batched raw gradients + closed-form soft-clip
    # derivative) against J = jacfwd of the original soft-clipped map, with the same explicit probes
    from torch.func import jacfwd, vmap

    from textdp.bounds.dpsgd import _grads_and_tangents, _raw_grad_fn, _soft_clip_jvp

    X, y = _toy(n=7, d=5, seed=2)
    X[0] *= 30.0  # a large gradient
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    params = {k: v.detach() for k, v in model.named_parameters()}
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y % 3)
    ref_map = _old_soft_clipped_map(model, clip_norm)
    J = vmap(lambda x, yy: jacfwd(lambda xx: ref_map(params, xx, yy))(x))(Xt, yt).double()  # (n, p, d)
    gen = torch.Generator().manual_seed(0)
    V = torch.randint(0, 2, (7, 3, 5), generator=gen).float() * 2 - 1  # 3 distinct probes per example
    G, T = _grads_and_tangents(_raw_grad_fn(model), params, Xt, yt, V)
    Gc, sq = _soft_clip_jvp(G, T, clip_norm)
    ref_sq = torch.sum(torch.einsum("npd,nmd->nmp", J, V.double()) ** 2, dim=-1)  # ‖J v‖² per probe
    np.testing.assert_allclose(sq.double().numpy(), ref_sq.numpy(), rtol=2e-5, atol=1e-12)
    ref_g = torch.stack([ref_map(params, Xt[i], yt[i]) for i in range(7)])
    np.testing.assert_allclose(Gc.numpy(), ref_g.numpy(), rtol=1e-5, atol=1e-9)
    # the basis vectors as probes give the exact trace, as per_example_fil(exact=True) does
    fil = per_example_fil(model, X, y % 3, clip_norm=clip_norm, noise_multiplier=1.0, exact=True)
    np.testing.assert_allclose(fil, torch.sum(J**2, dim=(1, 2)).numpy() / (5 * clip_norm**2), rtol=2e-5)


def test_probe_estimate_matches_the_old_direct_computation_probe_for_probe():
    # the probes per_example_fil draws for a seed, fed to the original computation (per-example jvp
    # through the directly written soft-clipped map): the same ‖J v‖² up to float rounding
    from torch.func import jvp, vmap

    from textdp.bounds.dpsgd import _probe_generator, _rademacher_probes
    from textdp.noise import make_rng

    X, y = _toy(n=9, d=4, seed=3)
    model = _mlp(4)
    params = {k: v.detach() for k, v in model.named_parameters()}
    new = per_example_fil(model, X, y, clip_norm=0.3, probes=4, seed=11)
    V = torch.from_numpy(_rademacher_probes(_probe_generator(make_rng(11)), (9, 4, 4)))
    ref_map = _old_soft_clipped_map(model, 0.3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)

    def one(x, yy, v):
        return jvp(lambda xx: ref_map(params, xx, yy), (x,), (v,))[1]

    tang = vmap(vmap(one, in_dims=(None, None, 0)))(Xt, yt, V)  # (n, probes, p)
    old = torch.sum(tang.double() ** 2, dim=2).mean(dim=1).numpy() / (4 * 0.3**2)
    np.testing.assert_allclose(new, old, rtol=2e-5)


def test_rademacher_probes_are_fair_independent_signs():
    # the probe law: every entry ±1; each sign with probability 1/2 and neighbouring bits
    # independent (chi-square on pairs, 4 cells, 3 d.o.f., 99.9 % quantile 16.27)
    from textdp.bounds.dpsgd import _rademacher_probes

    v = _rademacher_probes(np.random.Generator(np.random.PCG64(5)), (1000, 3, 67))  # 201,000: not a multiple of 8
    assert v.shape == (1000, 3, 67) and v.dtype == np.float32 and set(np.unique(v)) == {-1.0, 1.0}
    flat = v.reshape(-1)
    n = flat.size
    assert abs(np.mean(flat)) < 3.3 / np.sqrt(n)
    pairs = (flat[0::2] > 0).astype(int) * 2 + (flat[1::2] > 0)
    counts = np.bincount(pairs, minlength=4)
    expected = len(pairs) / 4
    assert np.sum((counts - expected) ** 2 / expected) < 16.27


def test_saturated_example_gives_finite_fil():
    # a record so far from the boundary that softmax saturates in float32: g = 0 exactly. Autograd
    # through ‖g‖ gave 0·∞ = NaN there; the closed form takes the limit (∂ĝ/∂x = (∂g/∂x)/f(0)).
    lin = torch.nn.Linear(2, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
        lin.bias.zero_()
    X = np.array([[200.0, 0.0], [0.3, 0.1]], dtype=np.float32)
    y = np.array([0, 1])
    v = per_example_fil(lin, X, y, probes=4, seed=0)
    assert np.all(np.isfinite(v)) and v[0] == 0.0 and v[1] > 0


def test_device_selection_defaults_to_cpu_and_refuses_absent_cuda():
    X, y = _toy(n=40, d=4)
    r = train_dpsgd_fil(_mlp(4), X, y, epochs=1, batch_size=20, rng=1)
    assert r.config["device"] == "cpu"
    a = train_dpsgd_fil(_mlp(4), X, y, epochs=1, batch_size=20, rng=1, device="auto")
    assert a.config["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    if a.config["device"] == "cpu":  # the same seeded run on the same device
        np.testing.assert_array_equal(a.eta2, r.eta2)
    with pytest.raises(ParameterError):
        train_dpsgd_fil(_mlp(4), X, y, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ParameterError, match="CUDA"):
            train_dpsgd_fil(_mlp(4), X, y, device="cuda")


def test_noisy_clipped_sum_float32_rounding_equals_the_float64_path():
    # float32 gradients are rounded in float32 (grid units); rows near or over the bound and float64 input
    # take the float64 path. The release must be the same lattice point either way, for the same noise draws.
    from textdp.bounds.dpsgd import noisy_clipped_sum
    from textdp.noise import make_rng

    r = np.random.default_rng(4)
    for trial in range(40):
        B, p = int(r.integers(1, 40)), int(r.choice([1, 7, 300, 5000]))
        G = r.normal(size=(B, p)).astype(np.float32) * np.float32(10.0 ** r.uniform(-5, 0))
        if trial % 2 == 0:  # every row within ±3e-4 of the bound: some rescaled, some just below
            G /= np.linalg.norm(G, axis=1, keepdims=True)
            G *= (1.2 * (1 + r.uniform(-3e-4, 3e-4, size=(B, 1)))).astype(np.float32)
        sd = float(10.0 ** r.uniform(-2, 1))
        a = noisy_clipped_sum(torch.from_numpy(G), 1.2, sd, make_rng(trial))
        b = noisy_clipped_sum(G.astype(np.float64), 1.2, sd, make_rng(trial))
        assert np.array_equal(a, b), trial
