"""Exceptions of textdp.

Every error a user can cause (bad parameters, bad files, missing packages) is a
:class:`TextDPError`. Its message is one line saying what is wrong and how to fix
it; the CLI prints it without a traceback and exits with status 2. Anything else
that escapes is a bug (exit status 1).
"""

from __future__ import annotations


class TextDPError(Exception):
    """Base class of user-facing errors (one-line message, CLI exit status 2)."""


class ParameterError(TextDPError, ValueError):
    """An invalid parameter value (e.g. epsilon <= 0, w outside [0, 1])."""


class InputError(TextDPError, ValueError):
    """An input file or dataset that cannot be used (empty, malformed, wrong encoding, missing column)."""


class EmptyInputError(InputError):
    """An input file that holds no rows (a folder of parts passes such a part through as an empty part)."""


class OutputError(TextDPError, OSError):
    """An output that cannot be written (exists without overwrite, equals the input, ...)."""


class MissingPackageError(TextDPError, ImportError):
    """An optional package (data, model or extra) is not installed; the message names the pip command."""


class BudgetExceededError(TextDPError):
    """A release would exceed the privacy budget set for a dataset."""


def excerpt(text: str, limit: int = 40) -> str:
    """A short, marked excerpt of raw input for error messages.

    Raw text never appears in errors beyond ``limit`` characters, and the excerpt
    is marked so a reader knows it was cut: ``«first words…»``.
    """
    text = text.replace("\n", " ").replace("\r", " ")
    if len(text) > limit:
        cut = text[:limit]
        space = cut.rfind(" ")
        if space >= limit // 2 and not text[limit].isspace():  # end on a word boundary when one is near
            cut = cut[:space]
        text = cut.rstrip() + "…"
    return f"«{text}»"
