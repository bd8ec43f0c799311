"""Topic models with differential privacy: LDA by collapsed Gibbs sampling (numba),
its inherent privacy, and the private trainers of Zhao et al. (IEEE TIFS 2021):
HDP-LDA (central, Laplace on the topic-word statistics), LP-LDA (local,
randomized response) and OLP-LDA (online local, Bayesian denoising).

Quick start::

    from textdp.topics import Corpus, LDA, HDPLDA
    corpus = Corpus.from_texts(texts)   # the public vocabulary wordfreq-en-20k (vocabulary="corpus": not covered)
    model = LDA(n_topics=20, alpha=0.1, beta=0.01, iterations=200, seed=0).fit(corpus)
    model.top_words(10); model.perplexity(test_texts); model.save("my-model")
    LDA(n_topics=20, workers=2).fit(corpus)   # approximate parallel sampler (AD-LDA): not the exact chain
    HDPLDA(20, epsilon=10, engine=textdp.engines.get_engine("dask", workers=2)).fit(corpus)  # exact, same model

See ``docs/topics.md``.
"""

from textdp.mechanisms.registry import MechanismInfo, register
from textdp.topics.corpus import Corpus, tokenize
from textdp.topics.evaluation import fold_in, npmi_coherence, perplexity, top_word_ids
from textdp.topics.lda import LDA, GibbsState, ParallelGibbsState
from textdp.topics.model import TopicModel, load_model
from textdp.topics.privacy import (
    DataDependentPrivacyWarning,
    InherentPrivacy,
    InherentPrivacyMonitor,
    bayes_denoise,
    cgs_inherent_epsilon,
    flip_for_epsilon,
    lp_epsilon,
    reconstruct_corpus,
    rr_encode,
    rr_estimate,
    rr_variance,
)
from textdp.topics.private import HDPLDA, LPLDA, OLPLDA, laplace_composition
from textdp.topics.tradeoff import plot_privacy_utility, privacy_utility
from textdp.topics.vocabulary import Vocabulary, public_vocabulary, read_vocabulary

__all__ = [
    "Corpus", "tokenize", "LDA", "GibbsState", "ParallelGibbsState", "TopicModel", "load_model", "HDPLDA", "LPLDA", "OLPLDA",
    "make_trainer", "fold_in", "perplexity", "npmi_coherence", "top_word_ids",
    "cgs_inherent_epsilon", "InherentPrivacy", "InherentPrivacyMonitor", "DataDependentPrivacyWarning",
    "lp_epsilon", "flip_for_epsilon", "rr_encode", "rr_estimate", "rr_variance", "reconstruct_corpus",
    "bayes_denoise", "laplace_composition", "PRIVACY_METHODS", "privacy_utility", "plot_privacy_utility",
    "Vocabulary", "public_vocabulary", "read_vocabulary",
]

PRIVACY_METHODS = ("none", "hdp", "lp", "olp")


def _hdp_paper(**kw):
    return HDPLDA(unit="token-paper", **kw)


def make_trainer(privacy: str = "none", **kw):
    """The trainer for ``privacy`` in none|hdp|lp|olp with keyword parameters of its class.

    Raises ParameterError for an unknown method.
    """
    from textdp.errors import ParameterError

    classes = {"none": LDA, "hdp": HDPLDA, "lp": LPLDA, "olp": OLPLDA}
    if privacy not in classes:
        raise ParameterError(f"unknown --privacy {privacy!r}; choose one of {', '.join(PRIVACY_METHODS)}")
    return classes[privacy](**kw)


register(MechanismInfo("topics.hdp-lda", HDPLDA, "topics",
                       "HDP-LDA: CGS with Laplace noise on released topic-word counts (ε-DP per document, Δ₁=2L)",
                       tags=("central", "laplace", "lda")))
register(MechanismInfo("topics.hdp-lda-paper", _hdp_paper, "topics",
                       "HDP-LDA with the paper's per-token sensitivity Δ₁=2", broken=True,
                       reason="Δ₁=2 assumes the other tokens' topic assignments do not react to the replaced "
                              "token; under Gibbs sampling its whole document can move, so Δ₁ is 2·(document length)",
                       tags=("central", "laplace", "lda")))
register(MechanismInfo("topics.lp-lda", LPLDA, "topics",
                       "LP-LDA: randomized response on per-document word vectors, ε = 2 ln(2/f − 1) LDP per word",
                       tags=("local", "randomized-response", "lda")))
register(MechanismInfo("topics.olp-lda", OLPLDA, "topics",
                       "OLP-LDA: online LP-LDA with Bayesian denoising and the β^l prior recursion",
                       tags=("local", "randomized-response", "online", "lda")))
