"""ReRo bounds beside Guo's MSE bounds and the measured attacks (the figure of ``textdp bounds rero --plot``).

Two games, both with a prior of known baseline κ, so that a bound on success and a measured
success sit on the same axes:

* **Tokens** (:func:`token_game`): a uniform prior over a public vocabulary of |V| GloVe words
  (κ = 1/|V|); a sanitizer's (SanText by default) exact per-token success (the Bayes optimum,
  :func:`textdp.bounds.rero.token_reconstruction`) at its plain-DP ε over that vocabulary, and
  |V|-ary randomized response's, against the ReRo bound of ε-DP and the exact bound of |V|-ary
  randomized response. Guo's bounds concern the mean squared error of a real-valued record and
  say nothing about guessing a word, so this panel has none.
* **Features** (:func:`glm_candidate_game`): output-perturbed logistic regression (Guo et al.
  §5, :class:`textdp.bounds.OutputPerturbation`) on TF-IDF features; the informed adversary
  knows the other n − 1 records, the target is one of m candidate records drawn uniformly
  (κ = 1/m, the kind of discrete prior of Hayes et al. 2023's experiments). Two attacks: Balle et al.'s GLM informed
  reconstruction followed by the nearest candidate (the attack of ``textdp bounds glm``), and
  the likelihood attack (the candidate whose exact weights are nearest to the released ones:
  the Bayes-optimal guess for this prior and Gaussian noise). Their success is set against the
  ReRo bound of the Gaussian mechanism (μ = Δ₂/σ, replace-one sensitivity), and their MSE
  against Guo's RDP and dFIL bounds, at the same σ.

The noise of the simulated releases comes from :func:`textdp.noise.simulation_rng` (PCG64DXSM,
not cryptographic): nothing here is released.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from textdp.errors import InputError, ParameterError

__all__ = ["TokenGame", "token_game", "GLMCandidateGame", "glm_candidate_game", "plot_rero"]


# --------------------------------------------------------------------------- tokens


@dataclass
class TokenGame:
    """Per-token success against a uniform prior over ``vocab_size`` public words (κ = 1/|V|).

    ``rows``: one :meth:`TokenReconstruction.to_dict` per ε of the sanitizer ``sanitizer``
    (``epsilons``: its own ε, e.g. SanText's ε per unit of embedding distance);
    ``rr_epsilons`` ``(r,)`` and ``rr_bayes`` ``(r,)``: the exact Bayes success of |V|-ary
    randomized response with ε per token (:func:`textdp.attacks.bayes.bayes_optimum` on its
    channel matrix)."""

    sanitizer: str
    vocab_size: int
    kappa: float
    embeddings: str
    epsilons: list
    rows: list
    rr_epsilons: np.ndarray
    rr_bayes: np.ndarray

    def to_dict(self) -> dict:
        return {"sanitizer": self.sanitizer, "vocab_size": self.vocab_size, "kappa": self.kappa,
                "embeddings": self.embeddings,
                "rows": [dict(r, epsilon=e) for e, r in zip(self.epsilons, self.rows)],
                "randomized_response": [{"epsilon": float(e), "bayes_top1": float(b)}
                                        for e, b in zip(self.rr_epsilons, self.rr_bayes)]}


def token_game(epsilons=(0.5, 1.0, 2.0, 3.0, 5.0), vocab_size: int = 200, mechanism: str = "santext",
               rr_epsilons=None, embeddings: str = "glove-6b-50d") -> TokenGame:
    """A token sanitizer and |V|-ary randomized response on the ``vocab_size`` most frequent words
    of ``embeddings`` (public data: GloVe's own frequency order), uniform prior over them.

    ``mechanism``: a textdp token sanitizer with an exact law (``textdp.sanitize.MECHANISMS``:
    santext, santext+, custext, tem, ...), built with that output vocabulary; ``epsilons``: its
    ε values (each gives one exact :func:`textdp.bounds.rero.token_reconstruction`);
    ``rr_epsilons``: ε per token of randomized response (default 40 values from 0.1 to 20).
    Cost: two or three passes over |V|² channel entries per ε (well under a second for
    |V| = 200 after the embeddings load). ParameterError for a bad size or mechanism."""
    from textdp.attacks.bayes import MatrixChannel, bayes_optimum
    from textdp.bounds.rero import token_reconstruction
    from textdp.embeddings import load_embeddings
    from textdp.sanitize import canonical_name, make_mechanism

    if isinstance(vocab_size, bool) or int(vocab_size) != vocab_size or int(vocab_size) < 2:
        raise ParameterError(f"vocab_size must be a whole number ≥ 2, got {vocab_size!r}")
    V = int(vocab_size)
    name = canonical_name(mechanism)
    emb = load_embeddings(embeddings)
    if V > len(emb.words):
        raise ParameterError(f"vocab_size {V} is more than the {len(emb.words)} words of {embeddings}")
    vocab = list(emb.words[:V])
    rows = []
    for e in epsilons:
        mech = make_mechanism(name, emb, float(e), rng=0, output_vocabulary=vocab)
        if hasattr(mech, "fit"):
            mech.fit([" ".join(vocab)])  # public words only: nothing private is fitted
        rows.append(token_reconstruction(mech).to_dict())
    re = np.linspace(0.1, 20.0, 40) if rr_epsilons is None else np.asarray(rr_epsilons, dtype=np.float64)
    names = [str(i) for i in range(V)]
    rb = []
    for e in re:
        r = 1.0 / (math.exp(e) + V - 1)
        P = np.full((V, V), r)
        np.fill_diagonal(P, 1.0 - (V - 1) * r)
        rb.append(bayes_optimum(MatrixChannel(P, names, names, name="randomized-response"), np.ones(V), k=1).top1)
    return TokenGame(name, V, 1.0 / V, embeddings, [float(e) for e in epsilons], rows, re, np.asarray(rb))


# --------------------------------------------------------------------------- features


@dataclass
class GLMCandidateGame:
    """Outcome of :func:`glm_candidate_game`; arrays ``(s,)`` over ``sigmas``.

    ``kappa`` = 1/m; ``sensitivity``: replace-one L2 sensitivity Δ₂ of the weights;
    ``mu`` = Δ₂/σ; ``rero_bound``: Φ(Φ⁻¹(κ) + μ); ``weight_radius``: min over reference candidates
    c₀ of max_c ‖θ_c − θ_c₀‖ (how far apart these candidates' exact weights really are, at most
    Δ₂); ``rero_bound_instance``: Φ(Φ⁻¹(κ) + radius/σ), the ReRo bound of this candidate set
    (valid for it alone: the reference is N(θ_c₀, σ²I), every pair a Gaussian shift ≤ radius;
    data-dependent); ``success_likelihood`` /
    ``success_reconstruction``: measured success of the likelihood attack and of the GLM
    informed reconstruction + nearest candidate (over m × ``trials`` games per σ);
    ``attack_mse``: the reconstruction's per-coordinate MSE (mean over the valid draws; the
    reconstruction divides by a noisy coordinate, so its error is heavy-tailed and this mean is
    noisy); ``attack_median_error``: the median per-draw per-coordinate squared error; ``rdp_mse_bound``:
    Guo's Theorem 1 at ε₂ = Δ₂²/σ²; ``fil_mse_bound``: median over the candidates of Guo's
    unbiased dFIL bound 1/η² (data-dependent: keep private); ``zero_noise_error``: the
    reconstruction's largest error at σ = 0 (it is exact)."""

    dataset: str
    n: int
    d: int
    m: int
    lam: float
    trials: int
    kappa: float
    sensitivity: float
    sigmas: np.ndarray
    mu: np.ndarray
    rero_bound: np.ndarray
    weight_radius: float
    rero_bound_instance: np.ndarray
    success_likelihood: np.ndarray
    success_reconstruction: np.ndarray
    attack_mse: np.ndarray
    attack_median_error: np.ndarray
    rdp_mse_bound: np.ndarray
    fil_mse_bound: np.ndarray
    zero_noise_error: float
    info: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        out = {}
        for k, v in self.__dict__.items():
            out[k] = v.tolist() if isinstance(v, np.ndarray) else v
        return out


def glm_candidate_game(features=None, *, n: int = 400, m: int = 10, lam: float = 1e-2, sigmas=None,
                       trials: int = 100, rng=None, max_features: int = 100,
                       dataset: str = "rotten-tomatoes") -> GLMCandidateGame:
    """The informed adversary's m-candidate reconstruction game on output-perturbed logistic regression.

    ``features``: a :class:`textdp.bounds.TextFeatures` (rows with norm ≤ ``norm_bound``), or
    None to build TF-IDF features (``max_features`` terms) of the first n + 3m records of
    ``dataset``. The first n − 1 rows are the known records D₋; the candidates are the next m
    rows with pairwise distinct feature vectors (κ = 1/m exactly). For each candidate c the
    exact weights θ_c of D₋ ∪ {c} are fitted (:func:`textdp.bounds.fit_glm`); each game draws c
    uniformly, releases θ_c + N(0, σ²I) and lets the two attacks guess. Every candidate is
    played ``trials`` times per σ (``sigmas``: default 8 values, log-spaced over Δ₂/μ for μ from
    0.3 to 300). ``rng``: seed or Generator of :func:`textdp.noise.simulation_rng` (the simulated
    releases are never released).

    Returns :class:`GLMCandidateGame`. Raises ParameterError (n < 3, m < 2, trials < 1, σ ≤ 0)
    and InputError (too few distinct candidate rows).
    """
    from textdp.bounds.fil import fil_mse_bound
    from textdp.bounds.glm import _attack_core, fit_glm, output_perturbation_sensitivity, per_sample_fil
    from textdp.bounds.rdp import epsilon2_gaussian, rdp_mse_lower_bound
    from textdp.bounds.rero import gaussian_rero_bound
    from textdp.noise import simulation_rng

    for v, name, lo in ((n, "n", 3), (m, "m", 2), (trials, "trials", 1)):
        if isinstance(v, bool) or int(v) != v or int(v) < lo:
            raise ParameterError(f"{name} must be a whole number ≥ {lo}, got {v!r}")
    n, m, trials = int(n), int(m), int(trials)
    if features is None:
        from textdp.bounds.features import text_features

        features = text_features(dataset, max_features=max_features, n_records=n + 3 * m)
    import scipy.sparse as sp

    X = sp.csr_matrix(features.X, dtype=np.float64)  # CSR: the fits' Hessians are X^T W X
    y = np.asarray(features.y, dtype=np.float64)
    if X.shape[0] < n:
        raise InputError(f"the features have {X.shape[0]} rows; the game needs n = {n} plus {m} candidates")
    known = X[: n - 1]
    cand, cand_y, seen = [], [], set()
    for i in range(n - 1, X.shape[0]):
        row = X[i].toarray().ravel()
        key = row.tobytes()
        if key in seen:
            continue
        seen.add(key)
        cand.append(row)
        cand_y.append(y[i])
        if len(cand) == m:
            break
    if len(cand) < m:
        raise InputError(f"only {len(cand)} distinct candidate records after the first {n - 1}; lower m or add data")
    C = np.asarray(cand)
    p = X.shape[1]
    sens = output_perturbation_sensitivity(n, lam, "logistic", float(features.norm_bound))
    if sigmas is None:
        sigmas = sens / np.geomspace(0.3, 300.0, 8)
    sig = np.atleast_1d(np.asarray(sigmas, dtype=np.float64))
    if not (np.isfinite(sig).all() and (sig > 0).all()):
        raise ParameterError("every sigma must be a positive finite number")
    g = simulation_rng(rng)
    fits, data = [], []
    zero_err = 0.0
    for c in range(m):
        Xc = sp.vstack([known, sp.csr_matrix(C[c:c + 1])], format="csr")
        yc = np.concatenate([y[: n - 1], [cand_y[c]]])
        f = fit_glm(Xc, yc, lam)
        fits.append(f)
        data.append((Xc, yc))
        xh0, _ = _attack_core(Xc, yc, f.theta[:, None], lam, np.array([n - 1]))
        zero_err = max(zero_err, float(np.nanmax(np.abs(xh0[0, 0] - C[c]))))
    thetas = np.stack([f.theta for f in fits])  # (m, p)
    gaps = np.sqrt(((thetas[:, None, :] - thetas[None, :, :]) ** 2).sum(axis=2))
    radius = float(gaps.max(axis=1).min())  # the best reference candidate's farthest other candidate
    kappa = 1.0 / m
    s_like, s_rec, mse, med, rdp, fil = [], [], [], [], [], []
    for s in sig:
        hit_like = hit_rec = games = 0
        errs = []
        for c in range(m):
            Xc, yc = data[c]
            noisy = thetas[c][:, None] + s * g.standard_normal((p, trials))  # (p, T)
            dist = ((thetas[:, :, None] - noisy[None, :, :]) ** 2).sum(axis=1)  # (m, T)
            hit_like += int(np.sum(dist.argmin(axis=0) == c))
            xh, _ = _attack_core(Xc, yc, noisy, lam, np.array([n - 1]))  # (T, 1, p)
            xh = xh[:, 0, 1:]
            ok = np.isfinite(xh).all(axis=1)
            dx = ((xh[ok, None, :] - C[None, :, 1:]) ** 2).sum(axis=2)  # (T_ok, m)
            hit_rec += int(np.sum(dx.argmin(axis=1) == c)) if ok.any() else 0
            errs.append(dx[:, c] / (p - 1))
            games += trials
        s_like.append(hit_like / games)
        s_rec.append(hit_rec / games)  # an undefined reconstruction (B₀ = 0) counts as a miss
        errs = np.concatenate(errs)
        mse.append(float(errs.mean()) if errs.size else float("nan"))
        med.append(float(np.median(errs)) if errs.size else float("nan"))
        rdp.append(rdp_mse_lower_bound(epsilon2_gaussian(float(s), sens), features.diam))
        fil.append(float(np.median([fil_mse_bound(per_sample_fil(f, dc[0], float(s), indices=[n - 1]))[0]
                                    for f, dc in zip(fits, data)])))
    mu = sens / sig
    return GLMCandidateGame(
        dataset=str(features.info.get("data", dataset)), n=n, d=p - 1, m=m, lam=float(lam), trials=trials,
        kappa=kappa, sensitivity=sens, sigmas=sig, mu=mu,
        rero_bound=np.array([float(gaussian_rero_bound(kappa, float(u))) for u in mu]),
        weight_radius=radius,
        rero_bound_instance=np.array([float(gaussian_rero_bound(kappa, radius / float(x))) for x in sig]),
        success_likelihood=np.asarray(s_like), success_reconstruction=np.asarray(s_rec), attack_mse=np.asarray(mse),
        attack_median_error=np.asarray(med),
        rdp_mse_bound=np.asarray(rdp), fil_mse_bound=np.asarray(fil), zero_noise_error=zero_err,
        info={"norm_bound": float(features.norm_bound), "diam": float(features.diam),
              "noise": "simulation_rng (PCG64DXSM), simulated releases only"})


# --------------------------------------------------------------------------- figure


def plot_rero(path, curves, kappas, tokens: TokenGame | None = None, glm: GLMCandidateGame | None = None,
              title: str | None = None) -> None:
    """The ReRo figure, written atomically to ``path`` (PNG, PDF or SVG by suffix).

    ``curves``: list of ``(label, ReRoBound)`` drawn against ``kappas`` (a 1-D array in (0, 1),
    log axis) with the baseline κ as a dotted line; ``tokens``: the token game (success against
    plain-DP ε per token); ``glm``: the feature game (success and MSE against σ, sharing the σ
    axis). Panels without data are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from textdp.bounds.rero import approx_dp_rero_bound, gaussian_rero_bound, randomized_response_rero_bound
    from textdp.data.io import atomic_output

    k = np.asarray(kappas, dtype=np.float64)
    panels = 1 + (tokens is not None) + (2 if glm is not None else 0)
    ncol = 2 if panels > 1 else 1
    nrow = math.ceil(panels / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.2 * nrow + (0.8 if glm is not None else 0)), dpi=110,
                             squeeze=False)
    axs = list(axes.ravel())
    ax = axs.pop(0)
    for label, c in curves:
        ax.plot(k, c.bound(k), lw=1.5, label=label)
    ax.plot(k, k, "k:", lw=1, label="baseline κ (no output)")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("baseline success κ of the prior")
    ax.set_ylabel("reconstruction success ≤")
    ax.set_title("ReRo bound 1 − f(κ)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    if tokens is not None:
        ax = axs.pop(0)
        kap = tokens.kappa
        finite = [r["epsilon_pairs"] for r in tokens.rows if math.isfinite(r["epsilon_pairs"])]
        e = np.linspace(0.0, max([20.0] + [x + 1 for x in finite]), 200)[1:]
        ax.plot(e, [float(approx_dp_rero_bound(kap, x)) for x in e], "k-", lw=1.2, label="ReRo bound, any ε-DP")
        ax.plot(e, [float(randomized_response_rero_bound(kap, x, tokens.vocab_size)) for x in e], "C0--", lw=1.2,
                label=f"ReRo bound, {tokens.vocab_size}-ary RR (exact)")
        ax.plot(tokens.rr_epsilons, tokens.rr_bayes, "C0.", ms=4, label=f"Bayes attack on {tokens.vocab_size}-ary RR")
        pts = [(x, r, se) for x, r, se in zip([r["epsilon_pairs"] for r in tokens.rows], tokens.rows, tokens.epsilons)
               if math.isfinite(x)]
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1]["bayes_top1"] for p in pts], "C3o", ms=6, label=f"Bayes attack on {tokens.sanitizer}")
        ax.plot(xs, [p[1]["bound_reference"] for p in pts], "C3v", ms=5, mfc="none",
                label=f"{tokens.sanitizer} bound (best reference word)")
        for x, r, se in pts:
            ax.annotate(f"{se:g}", (x, r["bayes_top1"]), textcoords="offset points", xytext=(4, -9), fontsize=7,
                        color="C3")
        ax.axhline(kap, color="gray", ls=":", lw=1)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("plain-DP ε per token over the vocabulary")
        ax.set_ylabel("per-token success (exact)")
        ax.set_title(f"tokens: uniform prior over {tokens.vocab_size} words, κ = {kap:.3g}", fontsize=10)
        ax.set_xlim(0, e[-1] * 1.35)  # room on the right, below the curves at 1, for the legend
        ax.legend(fontsize=7, loc="lower right")
    if glm is not None:
        ax = axs.pop(0)
        s = glm.sigmas
        se = np.sqrt(np.maximum(glm.success_likelihood * (1 - glm.success_likelihood), 1e-12) / (glm.m * glm.trials))
        sd = np.geomspace(s.min(), s.max(), 200)
        ax.plot(sd, [float(gaussian_rero_bound(glm.kappa, glm.sensitivity / x)) for x in sd], "k-", lw=1.2,
                label="ReRo bound (Gaussian, μ = Δ₂/σ)")
        ax.plot(sd, [float(gaussian_rero_bound(glm.kappa, glm.weight_radius / x)) for x in sd], "k--", lw=1,
                label="ReRo bound of these candidates (their weights' radius)")
        ax.errorbar(s, glm.success_likelihood, yerr=1.96 * se, fmt="C2o-", ms=4, lw=1, capsize=2,
                    label="likelihood attack (Bayes)")
        ax.plot(s, glm.success_reconstruction, "C1s-", ms=4, lw=1, label="GLM informed attack + nearest")
        ax.axhline(glm.kappa, color="gray", ls=":", lw=1, label=f"baseline κ = 1/{glm.m}")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("noise σ on the weights")
        ax.set_ylabel("reconstruction success")
        ax.set_title(f"features: {glm.dataset} TF-IDF, n = {glm.n}, d = {glm.d}, m = {glm.m}", fontsize=10)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # below: no empty corner
        ax2 = axs.pop(0)
        ax2.plot(s, glm.attack_mse, "C1s-", ms=4, lw=1, label="GLM informed attack, mean sq. error")
        ax2.plot(s, glm.attack_median_error, "C1s:", ms=3, lw=1, mfc="none", label="... median sq. error")
        pos = glm.rdp_mse_bound > 0
        ax2.plot(s[pos], glm.rdp_mse_bound[pos], "k--", lw=1.2, label="Guo Thm 1 (RDP) bound")
        ax2.plot(s, glm.fil_mse_bound, "k-.", lw=1.2, label="Guo dFIL bound (median)")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        shown = np.concatenate([glm.attack_mse, glm.attack_median_error, glm.fil_mse_bound])
        shown = shown[np.isfinite(shown) & (shown > 0)]
        if shown.size:  # Guo's RDP bound falls to 1e-100 and below where ε₂ is large: cut the axis there
            ax2.set_ylim(shown.min() / 30, shown.max() * 30)
        ax2.set_xlabel("noise σ on the weights")
        ax2.set_ylabel("per-coordinate MSE")
        ax2.set_title("same game: error, with Guo's lower bounds", fontsize=10)
        ax2.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    for a in axs:
        a.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    suffix = str(path).rsplit(".", 1)[-1].lower()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, format=suffix if suffix in ("png", "pdf", "svg") else "png")
    plt.close(fig)
