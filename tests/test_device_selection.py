"""``--device auto|cpu|cuda`` (textdp.models.device): one resolution rule for every torch path.
Runs on the CPU; CUDA's presence is simulated where the rule depends on it."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from textdp.cli.main import app
from textdp.errors import ParameterError
from textdp.models.device import resolve_device

torch = pytest.importorskip("torch")


def _cuda(monkeypatch, available: bool, count: int = 1):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count if available else 0)


def test_resolution(monkeypatch):
    assert resolve_device("cpu") == resolve_device(None) == resolve_device(" CPU ") == "cpu"
    _cuda(monkeypatch, False)
    assert resolve_device("auto") == "cpu"
    _cuda(monkeypatch, True, 2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda") == "cuda" and resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ParameterError, match=r"cuda:2: torch sees 2 CUDA device"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("bad", ["tpu", "gpu", "cuda:x", "mps", ""])
def test_unknown_device_is_refused(bad):
    with pytest.raises(ParameterError, match="--device must be auto, cpu or cuda"):
        resolve_device(bad)


def test_cuda_without_a_device_is_one_clear_line(monkeypatch):
    _cuda(monkeypatch, False)
    with pytest.raises(ParameterError) as e:
        resolve_device("cuda")
    msg = str(e.value)
    assert "\n" not in msg and "sees no CUDA device" in msg and "--device cpu" in msg


@pytest.mark.parametrize("args", [
    ["attack", "invert", "--device", "cuda", "-o", "{tmp}/inv"],
    ["evaluate", "--device", "cuda", "--model", "minilm", "-o", "{tmp}/ev"],
    ["evaluate", "--device", "cuda", "--attacks", "mask", "-o", "{tmp}/ev"],
])
def test_cli_refuses_cuda_without_a_device(monkeypatch, tmp_path, args):
    _cuda(monkeypatch, False)
    import textdp.attacks.inversion
    import textdp.data.datasets

    def forbidden(*a, **k):
        raise AssertionError("work started before --device was checked")

    monkeypatch.setattr(textdp.data.datasets, "load_dataset", forbidden)
    monkeypatch.setattr(textdp.attacks.inversion, "run_inversion", forbidden)
    r = CliRunner().invoke(app, [a.format(tmp=tmp_path) for a in args])
    assert r.exit_code == 2, r.output
    assert "--device cuda: torch" in r.output and "sees no CUDA device" in r.output


def test_evaluate_refuses_device_it_would_not_use(tmp_path):
    r = CliRunner().invoke(app, ["evaluate", "--device", "cpu", "--attacks", "bayes", "-o", str(tmp_path / "ev")])
    assert r.exit_code == 2 and "--device places the torch models" in r.output


def test_sweep_cache_key_unchanged_on_cpu(monkeypatch):
    from textdp.evaluate import SweepConfig

    a = SweepConfig(dataset="rotten-tomatoes").validate()
    b = SweepConfig(dataset="rotten-tomatoes", device="auto")
    _cuda(monkeypatch, False)
    assert b.validate().device == "cpu" and a.cell_hash() == b.cell_hash()
    _cuda(monkeypatch, True)
    c = SweepConfig(dataset="rotten-tomatoes", device="cuda").validate()
    assert c.cell_hash() != a.cell_hash()  # a GPU's cells are cached apart


def test_training_on_the_resolved_device(monkeypatch):
    """device="auto" on a machine without CUDA trains on the CPU and leaves the model there."""
    pytest.importorskip("transformers")
    from textdp.models.causal_lm import CausalLMConfig, train_causal_lm
    from textdp.models.device import module_device
    from textdp.models.mlm import MaskedLM, MLMPreset

    _cuda(monkeypatch, False)
    docs = [["a", "b", "c", "d", "a", "b"]] * 8
    m = MaskedLM.train_new(docs, preset=MLMPreset(hidden=16, layers=1, heads=2, intermediate=32, max_len=16,
                                                  vocab_size=50, min_count=1, steps=2, batch_size=4, warmup=1),
                           device="auto")
    assert module_device(m.model).type == "cpu" and len(m.info["losses"]) == 2
    assert m.predict_masked(docs, [(0, 1)], k=1)[0][0] in m.vocab.words
    g = np.random.default_rng(0)  # test data
    model, stats = train_causal_lm([[3, 4, 5, 6]] * 8, CausalLMConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2,
                                                                       max_len=16), epochs=1, batch_size=4,
                                   block_size=8, rng=g, device="auto")
    assert module_device(model).type == "cpu" and stats["steps"] == 2
    with pytest.raises(ParameterError):
        m.train(docs, steps=1, device="cuda")
