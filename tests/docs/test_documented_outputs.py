"""The outputs shown in README.md and docs/*.md are what the commands print today.

Every block that shows output (an untagged or json fence) or seeded code is listed in
tests/docs/manifest.toml: ``fast`` blocks run here, ``slow`` ones under ``-m slow``
(`make test-all`), ``none`` ones carry the reason they cannot be rerun (no seed, benchmark timings,
files outside the repository). Conventions: tests/docs/docblocks.py; to see a block's real output
and its difference from the docs: ``python tests/docs/docblocks.py run ID``.
"""

from __future__ import annotations

import pytest

from .docblocks import MANIFEST, Block, Entry, all_blocks, compare, find_block, load_manifest, run_entry

BLOCKS = all_blocks()
ENTRIES = load_manifest()


def _params():
    out = []
    for e in ENTRIES:
        if e.check == "fast":
            out.append(pytest.param(e, id=e.id))
        elif e.check == "slow":
            out.append(pytest.param(e, id=e.id, marks=pytest.mark.slow))
    return out


def test_every_output_block_is_in_the_manifest():
    listed = {(e.file, e.first.strip()) for e in ENTRIES}
    missing = [f"{b.file}:{b.line}: {b.first[:90]}" for b in BLOCKS if b.needs_entry and (b.file, b.first) not in listed]
    assert not missing, (
        f"blocks that show output or seeded code but are not in {MANIFEST.name}; add each with "
        f"check = fast|slow (run) or none (with the reason it cannot be rerun):\n  " + "\n  ".join(missing))


def test_manifest_entries_are_well_formed():
    ids = [e.id for e in ENTRIES]
    assert len(ids) == len(set(ids)), f"duplicate ids: {sorted(i for i in ids if ids.count(i) > 1)}"
    problems = []
    for e in ENTRIES:
        if find_block(e, BLOCKS) is None:
            hits = sum(b.file == e.file and b.first == e.first.strip() for b in BLOCKS)
            problems.append(f"{e.id}: {hits} blocks of {e.file} start with {e.first[:70]!r} (need exactly 1)")
        if e.check not in ("fast", "slow", "none"):
            problems.append(f"{e.id}: check must be fast, slow or none, not {e.check!r}")
        if e.check in ("slow", "none") and not e.reason.strip():
            problems.append(f"{e.id}: a {e.check} entry needs its reason")
        if e.match not in ("exact", "excerpt"):
            problems.append(f"{e.id}: match must be exact or excerpt")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("entry", _params())
def test_documented_output(entry: Entry):
    block = find_block(entry, BLOCKS)
    assert block is not None, f"{entry.id}: block not found in {entry.file}"
    # the runner's own short temporary folder (/tmp/textdp-docs-XXXXXXXX), as `docblocks.py run` uses: pytest's
    # tmp_path grows with its run counter (pytest-99 -> pytest-100), and a longer path wraps an 80-column line
    results = run_entry(entry, block)
    failures = [f"$ {r.command}\n{r.problem}" for r in results if r.problem]
    assert not failures, (f"{entry.file}:{block.line} ({entry.id}) no longer shows what the code prints; "
                          f"run `python tests/docs/docblocks.py run {entry.id}` and paste the real output:\n\n"
                          + "\n\n".join(failures))


# ---- the checker itself

def _entry(**kw) -> Entry:
    return Entry(id="t", file="README.md", first="x", check="fast", **kw)


def test_compare_exact_gaps_prefixes_and_excerpts():
    real = ["a", "b 1.0", "c", "d; long tail", "e"]
    assert compare(real, real, "exact") is None
    assert compare(["a", "b 1.0", "c", "d; long tail"], real, "exact") is not None        # a line missing
    assert compare(["a", "b 1.1", "c", "d; long tail", "e"], real, "exact") is not None   # one digit differs
    assert compare(["a", "...", "d; ...", "e"], real, "exact") is None                    # gap and prefix
    assert compare(["a", "...", "c"], real, "exact") is not None                          # last chunk is anchored
    assert compare(["b 1.0", "e"], real, "excerpt") is None
    assert compare(["e", "b 1.0"], real, "excerpt") is not None                           # order matters


def test_transcript_steps_exit_codes_and_normalisation():
    from .docblocks import normalise, split_transcript

    block = Block("README.md", 1, "", ["$ textdp a \\", "    --b 1", "out", "[exit 2]", "$ textdp c", "exit=0"])
    steps = split_transcript(block, _entry())
    assert [(s.command, s.expected, s.exit) for s in steps] == [("textdp a --b 1", ["out"], 2), ("textdp c", [], 0)]
    e = _entry(normalize=[[r"\d+\.\d s", "<t> s"]])
    assert normalise(["sweep ━━━━ 100/100 0:00:10 0:00:00", "took 3.5 s  ", "at 2026-01-02T10:11:12.5+00:00", ""], e) \
        == ["took <t> s", "at <date and time>"]
