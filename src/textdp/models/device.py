"""Device selection for textdp's torch code: ``--device auto|cpu|cuda``.

One rule everywhere (model training and inference in :mod:`textdp.models`, the
attacks, evaluate's models and ``textdp sanitize``'s SanText sampler):

* ``cpu`` (the default of every command and function): the CPU; torch is not
  even imported by :func:`resolve_device` for it;
* ``cuda`` (or ``cuda:N``): a CUDA device, which must be visible to torch
  (``torch.cuda.is_available()``); otherwise :class:`textdp.errors.ParameterError`
  with one line saying so (the CLI exits with code 2, no traceback);
* ``auto``: ``cuda`` when torch sees a CUDA device, else ``cpu`` (also ``cpu``
  when torch is not installed).

Seeded runs are reproducible per device, not across devices: CUDA kernels and
CUDA's random generators differ from the CPU's, so a model trained with the same
seed on ``cuda`` is not bit-identical to one trained on ``cpu``. The sanitizer's
law and its draws are the same on both (:mod:`textdp.sanitize._torch_kernel`).
"""

from __future__ import annotations

import re

from textdp.errors import MissingPackageError, ParameterError

__all__ = ["DEVICES", "DEVICE_HELP", "resolve_device", "torch_device", "module_device", "place", "fork_rng",
           "describe_device"]

#: the values ``--device`` accepts (``cuda:N`` selects the N-th CUDA device)
DEVICES = ("auto", "cpu", "cuda")
#: the help text of every ``--device`` option
DEVICE_HELP = ("auto | cpu | cuda (or cuda:N): where torch computes. auto = cuda when torch sees a CUDA device, "
               "else cpu; cuda without a visible device is refused.")
_CUDA_N = re.compile(r"cuda:(\d+)")


def resolve_device(name: str | None = "cpu") -> str:
    """The device ``name`` selects, as a torch device string: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    name: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (case and surrounding blanks
    ignored; ``None`` means ``"cpu"``) or a ``torch.device``.
    Raises ParameterError for another value, for ``cuda`` when torch sees no CUDA device
    and for ``cuda:N`` past the last device; MissingPackageError for ``cuda`` without torch.
    """
    if name is None:
        return "cpu"
    n = str(name).strip().lower()
    if n == "cpu":
        return "cpu"
    if n not in ("auto", "cuda") and not _CUDA_N.fullmatch(n):
        raise ParameterError(f"--device must be auto, cpu or cuda (or cuda:N), got {str(name)[:40]!r}")
    try:
        import torch
    except ImportError:
        if n == "auto":
            return "cpu"
        raise MissingPackageError(f"--device {n} needs torch with CUDA; run: pip install 'textdp[nlp]' "
                                  "(or use --device cpu)") from None
    available = bool(torch.cuda.is_available())
    if n == "auto":
        return "cuda" if available else "cpu"
    if not available:
        raise ParameterError(f"--device {n}: torch {torch.__version__} sees no CUDA device "
                             "(torch.cuda.is_available() is False); use --device cpu or --device auto")
    m = _CUDA_N.fullmatch(n)
    if m and int(m.group(1)) >= torch.cuda.device_count():
        raise ParameterError(f"--device {n}: torch sees {torch.cuda.device_count()} CUDA device(s) "
                             f"(cuda:0 to cuda:{torch.cuda.device_count() - 1})")
    return n


def torch_device(name=None):
    """:func:`resolve_device` as a ``torch.device``; a ``torch.device`` is returned as it is."""
    import torch

    if isinstance(name, torch.device):
        return name
    return torch.device(resolve_device(name))


def module_device(module):
    """The ``torch.device`` of a module's first parameter (or buffer); CPU for a module with neither."""
    import torch

    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


def place(module, device=None):
    """Move ``module`` to ``device`` (:func:`resolve_device`'s values or a ``torch.device``) and
    return that ``torch.device``; ``device=None`` leaves the module where it is and returns its
    device. Training functions call it once; the module stays there afterwards."""
    if device is None:
        return module_device(module)
    dev = torch_device(device)
    module.to(dev)
    return dev


def fork_rng(device):
    """``torch.random.fork_rng`` over the CPU generator and, for a CUDA ``device``, that device's
    generator: seeding inside the block leaves the caller's random state untouched on both."""
    import torch

    dev = torch_device(device)
    devices = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    return torch.random.fork_rng(devices=devices)


def describe_device(name: str) -> str:
    """One line naming a resolved device for terminals and reports, e.g. ``"cuda (NVIDIA H200)"`` or ``"cpu"``."""
    if not str(name).startswith("cuda"):
        return "cpu"
    import torch

    return f"{name} ({torch.cuda.get_device_name(torch.device(name))})"
