"""Without a working randomgen a release has no secure generator: it must stop, never fall back to PCG64."""

import pytest

from textdp.errors import MissingPackageError
from textdp.noise import rng


def test_secure_generator_refuses_without_chacha_and_seeded_runs_say_pcg64(monkeypatch):
    monkeypatch.setattr(rng, "_CHACHA", [None])  # as if `from randomgen import ChaCha` had failed
    src = rng.random_source(None)
    with pytest.raises(MissingPackageError, match="randomgen"):
        src.generator()
    with pytest.raises(MissingPackageError):
        src.spawn(2)
    with pytest.raises(MissingPackageError):
        rng.make_rng(None)
    seeded = rng.random_source(5)
    seeded.generator().random()  # a research run still works
    assert seeded.describe()["generator"] == "PCG64" and seeded.describe()["seeded"] is True


def test_with_chacha_the_card_names_it():
    if rng._chacha() is None:
        pytest.skip("randomgen not installed")
    assert rng.random_source(None).describe()["generator"] == "ChaCha20"
    assert rng.random_source(3).describe()["generator"] == "ChaCha20"
