"""sanitize_parts on the local engine (issue 16): a folder/glob of parts released exactly once.

Output identical for any split of the same rows, atomic parts, _SUCCESS last, one reservation and
one record, a failed job leaves nothing and cancels, undeletable parts keep the charge, bad inputs
get one line. E2 runs the same calls on Dask and Spark (tests/engines/test_dask.py, test_spark.py,
test_faults.py).
"""

from __future__ import annotations

import hashlib
import json
import os

import pandas as pd
import pytest

from textdp.accounting.ledger import Ledger
from textdp.data import io
from textdp.data.parts import find_parts, manifest_identity
from textdp.engines import LocalEngine
from textdp.engines import parts as P
from textdp.engines.parts import CARD_NAME, SUCCESS, read_parts_output, sanitize_parts
from textdp.errors import InputError, OutputError, TextDPError
from textdp.sanitize import make_mechanism

TEXTS = [
    "the movie was great fun", None, "a dull , lifeless film", "i loved it !", "",
    "not my cup of tea", "the actors were good but the plot was thin", "what a waste of time",
    "an honest and moving story", "the music carried every scene", "too long by half", "go see it",
]


def _frame(texts=TEXTS):
    return pd.DataFrame({"id": list(range(100, 100 + len(texts))), "text": texts,
                         "label": ["pos" if i % 3 else "neg" for i in range(len(texts))]})


def _write_parts(folder, sizes, fmt="parquet", texts=TEXTS, names=None):
    """The rows of ``texts`` split into consecutive parts of ``sizes`` rows under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    df = _frame(texts)
    start = 0
    for i, n in enumerate(sizes):
        name = names[i] if names else f"in-{i:03d}.{fmt}"
        io.write_table(df.iloc[start:start + n].reset_index(drop=True), folder / name)
        start += n
    assert start == len(texts)
    return folder


def _mech(name="santext", seed=7, **kw):
    return make_mechanism(name, "glove-6b-50d", 3.0, rng=seed, **kw)


def _digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _entries(ledger_dir):
    out = []
    for f in sorted(ledger_dir.glob("*.jsonl")):
        out += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return out


def _fail_from_record(monkeypatch, first: int, exc: BaseException) -> None:
    """Tasks whose first record is ``first`` or later raise ``exc`` (the earlier parts commit)."""
    real = P.sanitize_records

    def failing(plan, texts, first_record):
        if first_record >= first:
            raise exc
        return real(plan, texts, first_record)

    monkeypatch.setattr(P, "sanitize_records", failing)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_seeded_output_does_not_depend_on_the_split(tmp_path, fmt):
    """3 parts, 1 file, and another split give byte-identical texts, equal to the stand-alone call."""
    runs = {}
    for label, sizes in (("three", [4, 5, 3]), ("one", [12]), ("other", [1, 2, 6, 3])):
        src = _write_parts(tmp_path / f"in-{label}", sizes, fmt)
        out = tmp_path / f"out-{label}"
        r = sanitize_parts(src, out, _mech(), ledger=tmp_path / "led")
        assert r.parts == len(sizes) and r.records == len(TEXTS)
        assert sorted(p.name for p in out.iterdir() if p.name.startswith("part-")) == \
            [f"part-{i:05d}.{fmt}" for i in range(len(sizes))]
        runs[label] = read_parts_output(out)
    ref = _mech().sanitize(["" if t is None else t for t in TEXTS])
    expected = [None if t is None else s for s, t in zip(ref, TEXTS)]
    for label, got in runs.items():
        texts = [None if (t is None or (isinstance(t, float) and t != t)) else t for t in got["text"].tolist()]
        if fmt == "csv":  # CSV has no null: a missing text is an empty field
            expected_fmt = ["" if t is None else t for t in expected]
            texts = ["" if t is None else t for t in texts]
        else:
            expected_fmt = expected
        assert texts == expected_fmt, label
        assert got["id"].astype(int).tolist() == list(range(100, 112))  # other columns and row order kept
        assert got["label"].tolist() == _frame()["label"].tolist()
    assert runs["three"]["text"].tolist() == runs["one"]["text"].tolist() == runs["other"]["text"].tolist()


def test_jsonl_rows_keep_their_own_keys_and_nulls(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.jsonl").write_text('{"text": "good film", "k": 1}\n{"text": null, "k": 2}\n', encoding="utf-8")
    (src / "b.jsonl").write_text('{"k": 3, "text": "bad movie", "extra": "x"}\n', encoding="utf-8")
    sanitize_parts(src, tmp_path / "out", _mech(), ledger=False)
    a = [json.loads(x) for x in (tmp_path / "out" / "part-00000.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (tmp_path / "out" / "part-00001.jsonl").read_text().splitlines()]
    assert [list(x) for x in a] == [["text", "k"], ["text", "k"]] and a[1]["text"] is None
    assert list(b[0]) == ["k", "text", "extra"] and b[0]["extra"] == "x"


def test_success_is_last_and_no_partial_part_is_ever_visible(tmp_path, monkeypatch):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    out = tmp_path / "out"
    renamed, seen = [], []
    real_replace = os.replace

    def spy_replace(a, b, *args, **kw):
        renamed.append(os.path.basename(os.fspath(b)))
        return real_replace(a, b, *args, **kw)

    real_records = P.sanitize_records

    def spy_records(plan, texts, first):
        # while tasks run: only complete parts under final names, no card, no _SUCCESS
        names = sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) if out.is_dir() else []
        seen.append(names)
        for n in names:
            if n.startswith("part-"):
                assert len(pd.read_parquet(out / n)) in (4, 5, 3)
        assert SUCCESS not in names and CARD_NAME not in names
        return real_records(plan, texts, first)

    monkeypatch.setattr(os, "replace", spy_replace)
    monkeypatch.setattr(P, "sanitize_records", spy_records)
    sanitize_parts(src, out, _mech(), ledger=False, chunk_size=2)
    assert renamed[-1] == SUCCESS
    assert renamed.index(CARD_NAME) > max(renamed.index(f"part-{i:05d}.parquet") for i in range(3))
    assert seen[-1] == ["part-00000.parquet", "part-00001.parquet"]  # the last task saw the first two parts only
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file is left


def test_budget_reserved_once_and_recorded_once_under_the_manifest(tmp_path):
    src = _write_parts(tmp_path / "lake", [4, 5, 3])
    led_dir = tmp_path / "led"
    r = sanitize_parts(src, tmp_path / "out", _mech(), ledger=led_dir)
    entries = _entries(led_dir)
    kinds = [e["type"] for e in entries]
    assert kinds == ["reservation", "release"]
    assert entries[1]["reservation"] == entries[0]["id"]
    # the identity is the manifest of per-part (size, sha256), not a path
    parts = find_parts(src)
    expect = manifest_identity([(p.stat().st_size, io.file_sha256(p)) for p in parts.paths])
    assert r.dataset_sha256 == expect == entries[1]["input_sha256"]
    assert Ledger(str(src), led_dir).path == r.ledger  # `textdp budget` on the folder finds the same ledger
    moved = tmp_path / "renamed-lake"
    src.rename(moved)
    assert Ledger(str(moved), led_dir).key == r.dataset_sha256[:24]  # moving the folder keeps the identity
    assert Ledger(str(moved / "*.parquet"), led_dir).key == r.dataset_sha256[:24]  # so does a glob of it
    # the card: the engine and the record rule; no count, size, hash or name of an input part
    card = json.loads((tmp_path / "out" / CARD_NAME).read_text())
    assert card["data"]["engine"] == {"engine": "local", "workers": 1}
    assert "global" in card["data"]["records"]
    text = json.dumps(card)
    for private in ["in-000", "lake", r.dataset_sha256, r.dataset_sha256[:24], *(m.sha256 for m in r.manifest)]:
        assert private not in text
    assert card["output"] == "out"


def test_one_part_folder_shares_the_file_ledger(tmp_path):
    src = _write_parts(tmp_path / "lake", [12])
    r = sanitize_parts(src, tmp_path / "out", _mech(), ledger=tmp_path / "led")
    assert r.dataset_sha256 == io.file_sha256(src / "in-000.parquet")
    assert Ledger(str(src / "in-000.parquet"), tmp_path / "led").key == r.dataset_sha256[:24]


def test_card_is_the_same_for_neighbouring_inputs(tmp_path):
    a = _write_parts(tmp_path / "a", [4, 5, 3])
    other = list(TEXTS)
    other[2] = "qwerty xyzzy private words"
    b = _write_parts(tmp_path / "b", [4, 5, 3], texts=other)
    ca = sanitize_parts(a, tmp_path / "out", _mech(), ledger=False).card_data
    cb = sanitize_parts(b, tmp_path / "o2" / "out", _mech(), ledger=False).card_data
    ca.pop("created"), cb.pop("created")
    assert ca == cb


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_failing_task_leaves_nothing_and_cancels_the_reservation(tmp_path, monkeypatch, error):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    before = _digests(src)
    led_dir = tmp_path / "led"
    out = tmp_path / "new" / "out"
    # the third part fails: the first two are committed by then (Ctrl-C: KeyboardInterrupt)
    _fail_from_record(monkeypatch, 9, error("injected task failure"))
    with pytest.raises(error, match="injected"):
        sanitize_parts(src, out, _mech(), ledger=led_dir)
    assert not out.exists() and not out.parent.exists()  # the folders it made are gone too
    assert [e["type"] for e in _entries(led_dir)] == ["reservation", "cancel"]
    assert _digests(src) == before
    assert not list(tmp_path.glob("**/.part-*"))


def test_parts_that_cannot_be_deleted_keep_the_charge(tmp_path, monkeypatch):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    led_dir = tmp_path / "led"
    out = tmp_path / "out"
    real_unlink = type(out).unlink

    def stuck(self, *a, **kw):
        if self.name.startswith("part-"):
            raise PermissionError(13, "Permission denied", str(self))
        return real_unlink(self, *a, **kw)

    _fail_from_record(monkeypatch, 9, RuntimeError("injected task failure"))
    monkeypatch.setattr(type(out), "unlink", stuck)
    with pytest.raises(OutputError) as exc:
        sanitize_parts(src, out, _mech(), ledger=led_dir)
    monkeypatch.undo()
    msg = str(exc.value)
    assert "\n" not in msg and "could not be deleted" in msg and "charged" in msg and "injected" in msg
    entries = _entries(led_dir)
    assert [e["type"] for e in entries] == ["reservation", "release"]
    assert entries[1]["reservation"] == entries[0]["id"] and "could not be deleted" in entries[1]["settled"]["reason"]
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]  # no _SUCCESS


def test_part_changed_between_the_passes_fails_cleanly(tmp_path):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    led_dir = tmp_path / "led"
    out = tmp_path / "out"

    def progress(stage, done, total):
        if stage == "sanitizing" and done == 0:  # after the reading map hashed the parts
            io.write_table(_frame(TEXTS[:6]), src / "in-001.parquet")

    with pytest.raises(InputError, match="in-001.parquet.*changed"):
        sanitize_parts(src, out, _mech(), ledger=led_dir, progress=progress)
    assert not out.exists()
    assert [e["type"] for e in _entries(led_dir)] == ["reservation", "cancel"]


def test_overwrite_replaces_only_on_success(tmp_path, monkeypatch):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    out = tmp_path / "out"
    sanitize_parts(src, out, _mech(seed=1), ledger=False)
    first = _digests(out)
    with pytest.raises(OutputError, match="already exists.*--overwrite"):
        sanitize_parts(src, out, _mech(seed=2), ledger=False)
    _fail_from_record(monkeypatch, 4, RuntimeError("injected"))
    with pytest.raises(RuntimeError):
        sanitize_parts(src, out, _mech(seed=2), ledger=False, overwrite=True)
    assert _digests(out) == first  # the earlier release is untouched by the failed job
    monkeypatch.undo()
    sanitize_parts(src, out, _mech(seed=2), ledger=False, overwrite=True)
    assert _digests(out)["part-00000.parquet"] != first["part-00000.parquet"]
    assert (out / SUCCESS).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


def test_corpus_vocabulary_counts_summed_over_parts(tmp_path):
    """output_vocabulary='corpus': each part's counts come from its task, summed on the driver."""
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    one = _write_parts(tmp_path / "one", [12])
    a = read_parts_output(sanitize_parts(src, tmp_path / "o1", _mech(output_vocabulary="corpus"), ledger=False).output)
    b = read_parts_output(sanitize_parts(one, tmp_path / "o2", _mech(output_vocabulary="corpus"), ledger=False).output)
    m = _mech(output_vocabulary="corpus")
    clean = ["" if t is None else t for t in TEXTS]
    ref = m.fit(clean).sanitize(clean)
    assert a["text"].tolist() == b["text"].tolist() == [None if t is None else s for s, t in zip(ref, TEXTS)]


def test_threads_of_the_local_engine_give_the_same_bytes(tmp_path):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    sanitize_parts(src, tmp_path / "a", _mech(), ledger=False)
    sanitize_parts(src, tmp_path / "b", _mech(), ledger=False, engine=LocalEngine(2))
    da, db = _digests(tmp_path / "a"), _digests(tmp_path / "b")
    for i in range(3):
        assert da[f"part-{i:05d}.parquet"] == db[f"part-{i:05d}.parquet"]


def test_glob_input_and_sorted_order(tmp_path):
    src = _write_parts(tmp_path / "in", [4, 5, 3], names=["b.parquet", "c.parquet", "a.parquet"])
    (src / "notes.txt").write_text("not a part\n")
    r = sanitize_parts(str(src / "*.parquet"), tmp_path / "out", _mech(), ledger=False)
    assert [m.relative for m in r.manifest] == ["a.parquet", "b.parquet", "c.parquet"]
    assert [m.first_record for m in r.manifest] == [0, 3, 7]  # a holds the last 3 rows of the frame
    got = read_parts_output(tmp_path / "out")
    assert got["id"].tolist() == [109, 110, 111, 100, 101, 102, 103, 104, 105, 106, 107, 108]


@pytest.mark.parametrize("case", ["empty", "mixed", "subfolder", "garbage", "columns", "exists", "inside",
                                  "no-match"])
def test_bad_inputs_get_one_line_and_leave_nothing(tmp_path, case):
    src = tmp_path / "in"
    out = tmp_path / "out"
    inp = src
    if case == "empty":
        src.mkdir()
        match = "holds no parts"
    elif case == "mixed":
        _write_parts(src, [6, 6], names=["a.parquet", "b.csv"])
        match = "mix formats"
    elif case == "subfolder":
        _write_parts(src, [12])
        (src / "sub").mkdir()
        match = "subfolder"
    elif case == "garbage":
        _write_parts(src, [6, 6])
        (src / "in-001.parquet").write_bytes(b"this is not parquet")
        match = "in-001.parquet"
    elif case == "columns":
        src.mkdir()
        _frame().rename(columns={"text": "body"}).to_parquet(src / "in-000.parquet")
        _frame().rename(columns={"text": "review"}).to_parquet(src / "in-001.parquet")
        match = "different text columns"
    elif case == "exists":
        _write_parts(src, [12])
        out.mkdir()
        (out / "keep.txt").write_text("x")
        match = "already exists"
    elif case == "inside":
        _write_parts(src, [12])
        out = src / "out"
        match = "inside the input"
    else:
        src.mkdir()
        inp = str(src / "*.parquet")
        match = "no file matches"
    before = _digests(src)
    listing = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(TextDPError, match=match) as exc:
        sanitize_parts(inp, out, _mech(), ledger=tmp_path / "led")
    assert "\n" not in str(exc.value)
    assert _digests(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no output, no ledger entry, nothing new


def test_overwrite_whose_record_fails_puts_the_earlier_release_back(tmp_path, monkeypatch):
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    out = tmp_path / "out"
    led_dir = tmp_path / "led"
    sanitize_parts(src, out, _mech(seed=1), ledger=led_dir)
    first = _digests(out)

    def refuse(self, *a, **kw):
        raise InputError("injected: the ledger refuses the final record")

    monkeypatch.setattr(Ledger, "record", refuse)
    with pytest.raises(InputError, match="injected"):
        sanitize_parts(src, out, _mech(seed=2), ledger=led_dir, overwrite=True)
    assert _digests(out) == first  # the new release was removed, the earlier one is back
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert [e["type"] for e in _entries(led_dir)] == ["reservation", "release", "reservation", "cancel"]


def test_a_parquet_part_split_by_row_group_gives_the_same_texts(tmp_path):
    """A large Parquet part runs as several tasks of whole row groups; record index = part offset +
    earlier row groups' rows, so the texts are those of one task per part."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = tmp_path / "in"
    src.mkdir()
    df = _frame()
    df.iloc[:2].to_parquet(src / "a.parquet", index=False)
    pq.write_table(pa.Table.from_pandas(df.iloc[2:].reset_index(drop=True), preserve_index=False),
                   src / "b.parquet", row_group_size=3)  # 10 rows in row groups of 3, 3, 3, 1
    whole = sanitize_parts(src, tmp_path / "whole", _mech(), ledger=False, task_rows=None)
    assert whole.output_parts == 2
    expected = read_parts_output(tmp_path / "whole")
    assert expected["id"].tolist() == list(range(100, 112))
    for task_rows, rows in ((4, [2, 6, 4]), (3, [2, 3, 3, 3, 1])):  # runs of whole row groups of >= task_rows
        out = tmp_path / f"split-{task_rows}"
        split = sanitize_parts(src, out, _mech(), ledger=False, task_rows=task_rows)
        assert split.output_parts == len(rows) and split.parts == 2
        assert [len(pd.read_parquet(out / f"part-{i:05d}.parquet")) for i in range(len(rows))] == rows
        assert read_parts_output(out).equals(expected)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "tsv", "jsonl"])
def test_a_part_without_rows_passes_through_as_an_empty_part(tmp_path, fmt):
    """An input part without rows (a Spark job's empty partition) gives an empty output part of the same
    format and columns, and shifts no record index: the seeded release equals the one without that part."""
    from textdp.errors import EmptyInputError

    with_empty = _write_parts(tmp_path / "a", [4, 0, 5, 3], fmt)
    without = _write_parts(tmp_path / "b", [4, 5, 3], fmt)
    ra = sanitize_parts(with_empty, tmp_path / "oa", _mech(seed=3), ledger=False)
    rb = sanitize_parts(without, tmp_path / "ob", _mech(seed=3), ledger=False)
    assert ra.output_parts == 4 and rb.output_parts == 3 and ra.records == rb.records == 12
    assert [m.rows for m in ra.manifest] == [4, 0, 5, 3]
    pd.testing.assert_frame_equal(read_parts_output(tmp_path / "oa"), read_parts_output(tmp_path / "ob"))
    empty = sorted((tmp_path / "oa").glob(f"part-*.{fmt}"))[1]
    with pytest.raises(EmptyInputError):
        list(io.iter_table_chunks(empty))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(empty)
        assert schema.names == ["id", "text", "label"] and not schema.metadata  # nothing copied but the columns
    elif fmt in ("csv", "tsv"):
        assert empty.read_text("utf-8").strip() == ("id,text,label" if fmt == "csv" else "id\ttext\tlabel")


def test_a_folder_whose_every_part_is_empty_is_refused(tmp_path):
    from textdp.errors import EmptyInputError

    src = _write_parts(tmp_path / "in", [0, 0], texts=[])
    with pytest.raises(EmptyInputError, match="every part is empty"):
        sanitize_parts(src, tmp_path / "out", _mech(), ledger=False)
    assert not (tmp_path / "out").exists()


def test_an_empty_part_without_the_text_column_is_refused_and_its_metadata_is_not_copied(tmp_path):
    """An empty part is checked like the others (its columns must include the text column), and its output
    keeps only column names and types: no schema or field metadata of the input."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = _write_parts(tmp_path / "in", [4, 8])
    pq.write_table(pa.table({"ssn": pa.array([], pa.string())}), src / "in-000b.parquet")
    with pytest.raises(InputError, match="in-000b.parquet: no column 'text'"):
        sanitize_parts(src, tmp_path / "out", _mech(), ledger=False)
    assert not (tmp_path / "out").exists()
    (src / "in-000b.parquet").unlink()
    field = pa.field("text", pa.string(), metadata={"note": "alice@example.com"})
    schema = pa.schema([field, pa.field("id", pa.int64()), pa.field("label", pa.string())],
                       metadata={"owner": "alice@example.com"})
    pq.write_table(schema.empty_table(), src / "in-000b.parquet")
    r = sanitize_parts(src, tmp_path / "out", _mech(), ledger=False)
    out = pq.read_schema(tmp_path / "out" / "part-00001.parquet")
    assert out.names == ["text", "id", "label"] and not out.metadata
    assert all(not f.metadata for f in out)
    assert set(r.other_columns) == {"id", "label"}


def test_parquet_outputs_carry_no_pandas_attrs_of_the_input(tmp_path):
    import pyarrow.parquet as pq

    df = _frame()
    df.attrs = {"owner": "alice@example.com"}
    (tmp_path / "in").mkdir()
    df.to_parquet(tmp_path / "in" / "a.parquet")
    sanitize_parts(tmp_path / "in", tmp_path / "out", _mech(), ledger=False)
    md = pq.read_schema(tmp_path / "out" / "part-00000.parquet").metadata or {}
    assert not any(b"alice" in v for v in md.values())


def test_a_folder_left_by_a_killed_job_is_replaced_with_overwrite(tmp_path, monkeypatch):
    """A job killed mid-way (no cleanup ran: simulated by a failing task and no deletion) leaves parts without
    _SUCCESS; the folder carries textdp's marker from the start, so a rerun with --overwrite replaces it."""
    src = _write_parts(tmp_path / "in", [4, 5, 3])
    out = tmp_path / "out"
    _fail_from_record(monkeypatch, 4, RuntimeError("killed"))
    monkeypatch.setattr(P, "_remove_release", lambda *a, **k: [])  # the process died: nothing was cleaned up
    with pytest.raises(RuntimeError):
        sanitize_parts(src, out, _mech(), ledger=False)
    monkeypatch.undo()
    assert (out / io.OUTPUT_MARKER).exists() and not (out / SUCCESS).exists()
    assert (out / "part-00000.parquet").exists()
    with pytest.raises(OutputError, match="--overwrite"):
        sanitize_parts(src, out, _mech(), ledger=False)
    r = sanitize_parts(src, out, _mech(), ledger=False, overwrite=True)
    assert (out / SUCCESS).exists() and r.records == 12 and len(list(out.glob("part-*"))) == 3


def test_a_stored_pandas_index_stays_a_column_and_is_named(tmp_path):
    """A Parquet file written by pandas with an index stores it as columns: they are data, so they are kept
    (as columns) and named among the columns released unchanged, not silently dropped."""
    df = _frame().set_index(pd.Index([f"p{i}@x.org" for i in range(len(TEXTS))], name="email"))
    (tmp_path / "in").mkdir()
    df.to_parquet(tmp_path / "in" / "a.parquet")
    r = sanitize_parts(tmp_path / "in", tmp_path / "out", _mech(), ledger=False)
    out = read_parts_output(tmp_path / "out")
    assert "email" in out.columns and out["email"].tolist() == list(df.index)
    assert "email" in r.other_columns
