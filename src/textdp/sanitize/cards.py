"""The privacy card of a sanitized release (one file, a folder of parts or an in-memory frame).

:func:`sanitizer_card` is the one place that assembles it (``textdp sanitize`` for a file, and
:func:`textdp.engines.parts.sanitize_parts` for a folder of parts, call it): parameters, the
guarantee and facts computed from public data only (issue 12; design.md, "Everything the
output reveals is part of the release"). No count, size, length, hash or name of the private
input goes in: those are the curator's (terminal, budget ledger).
"""

from __future__ import annotations

__all__ = ["sanitizer_card", "card_warnings", "other_columns_warning", "NOT_IN_THIS_CARD"]

#: the card's statement of what it leaves out
NOT_IN_THIS_CARD = ("no statistic of the private input (counts, lengths, vocabulary, input file name or hash): "
                    "those are the curator's (terminal, budget ledger); 'output' is the released file's own name")

#: how a token sanitizer rebuilds text (the card's ``data.detokenization``)
DETOKENIZATION = ("token spans replaced in place, whitespace kept; tokens that touch in the input stay glued only "
                  "where the OUTPUT tokens read well glued (punctuation, clitics), never depending on whether a "
                  "token was kept (word vocabularies); WordPieces joined (## glued) for BERT vocabularies; text "
                  "normalised to Unicode NFC")


def card_warnings(mech) -> list[str]:
    """The card's warnings: statements that follow from the parameters alone (never from the data)."""
    warnings = []
    if mech.oov == "keep":
        warnings.append("out-of-vocabulary tokens are released unchanged (--oov keep): they have NO privacy "
                        "protection")
    elif mech.oov in ("unk", "drop"):
        warnings.append(f"--oov {mech.oov}: whether a token has an embedding is released (its position "
                        f"{'holds the unk token' if mech.oov == 'unk' else 'is removed'}): outside every guarantee")
    if mech.output_vocabulary == "corpus":
        from textdp.sanitize.base import CORPUS_VOCABULARY_WARNING

        warnings.append(CORPUS_VOCABULARY_WARNING)
    warnings.extend(mech.card_warnings())
    return warnings


def other_columns_warning(other_columns) -> list[str]:
    """The warning for columns released unchanged beside the text (none: ``[]``)."""
    if not other_columns:
        return []
    return [f"the other columns of the table ({', '.join(map(str, other_columns))}) are released unchanged: they "
            "are outside the guarantee (remove them before sanitizing if they are private)"]


def sanitizer_card(mech, output: str, *, other_columns=(), data: dict | None = None, build=None,
                   statistics=None) -> dict:
    """The privacy card (a JSON-ready dict) of a release by sanitizer ``mech``.

    ``output``: the released file's or folder's own name (never a path of the private input);
    ``other_columns``: columns released unchanged (a warning names them); ``data``: extra public
    facts appended to the card's ``data`` (e.g. the engine); ``build``: the card builder
    (default :func:`textdp.accounting.card.build_card`; the CLI passes one that adds its
    ``--force``/``--no-ledger`` fields); ``statistics``: the statistics function (default
    :func:`textdp.sanitize.stats.privacy_statistics`). A token sanitizer's statistics are
    computed from the mechanism and public data only; a corpus-dependent law
    (``output_vocabulary="corpus"``) gets only the composition rule and the table's bound.
    """
    if build is None:
        from textdp.accounting.card import build_card as build
    # the order matters: the statistics prepare the mechanism, and some warnings count what it prepared
    g = mech.guarantee
    if getattr(mech, "document_level", False):  # a language model instead of an embedding table
        d = {"model": mech.model_info(), "output_vocabulary": mech.output_vocabulary_info(),
             "not_in_this_card": NOT_IN_THIS_CARD}
        d.update(data or {})
        stats = mech.card_statistics()
        return build(mechanism=mech.name, parameters=mech.parameters(), guarantee=g, units=mech.card_units(),
                     data=d, randomness=mech.seed_info, statistics=stats, output=output,
                     warnings=card_warnings(mech) + other_columns_warning(other_columns), paper=mech.paper)
    if statistics is None:
        from textdp.sanitize.stats import privacy_statistics as statistics
    stats = statistics(mech)
    d = {"embeddings": mech.embeddings.describe(), "output_vocabulary": mech.output_vocabulary_info(),
         "detokenization": DETOKENIZATION, "not_in_this_card": NOT_IN_THIS_CARD}
    d.update(data or {})
    return build(mechanism=mech.name, parameters=mech.parameters(), guarantee=g, units=mech.card_units(), data=d,
                 randomness=mech.seed_info, statistics=stats, output=output,
                 warnings=card_warnings(mech) + other_columns_warning(other_columns), paper=mech.paper)
