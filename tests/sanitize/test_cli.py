"""End-to-end tests of `textdp sanitize` and `textdp datasets`."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.accounting.card import card_path
from textdp.cli.main import app
from textdp.data import io

runner = CliRunner()

DOCS = ["good film , great movie", "bad movie !\tawful film", "a film nobody saw", "great great good"]


def _run(*args):
    return runner.invoke(app, ["sanitize", *map(str, args)])


def _digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def table(tmp_path):
    return pd.DataFrame({"id": [1, 2, 3, 4], "text": DOCS, "label": ["p", "n", "n", "p"]})


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl", ".parquet", ".txt"])
def test_every_format_roundtrip_keeps_other_columns(tmp_path, table, small_glove_file, suffix):
    src = tmp_path / f"in{suffix}"
    io.write_table(table, src)
    before = _digest(src)
    out = tmp_path / f"out{suffix}"
    r = _run(src, "--mechanism", "santext", "--epsilon", "2", "--embeddings", small_glove_file,
             "--output", out, "--seed", 3, "--json")
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout[r.stdout.index("{"):])
    assert summary["private"]["documents"] == 4 and summary["private"]["tokens"] == 17
    got, col = io.read_table(out)
    assert len(got) == 4
    if suffix != ".txt":
        assert got["label"].tolist() == table["label"].tolist()
        assert got["id"].astype(str).tolist() == ["1", "2", "3", "4"]
    vocab = {"good", "great", "bad", "awful", "film", "movie"}
    for doc in got[col]:
        toks = doc.split()
        assert all(t in vocab for t in toks)  # OOV (",", "!", "a", ...) replaced by vocabulary words
    assert _digest(src) == before  # input untouched
    card = json.loads(card_path(out).read_text())
    assert card["mechanism"] == "santext" and card["guarantee"]["kind"] == "metric-dp"
    assert card["guarantee"]["epsilon"] == 2.0 and card["randomness"]["seeded"] is True
    assert 0 < card["guarantee"]["epsilon0"] < 1e-3 and "float-safe" in card["units"]["epsilon0"]
    assert card["parameters"]["eta"] == 2.0**-20
    assert summary["private"]["oov_tokens"] > 0 and "oov_tokens" not in card["data"]  # the curator's, not the card's
    assert "N_w" in card["statistics"]["plausible_deniability"]
    assert "mean_document_tokens" not in card["statistics"]["per_document"]  # a private length


@pytest.mark.parametrize("mech,extra", [("santext+", ["--w", "0.5", "--p", "0.3"]), ("fbdd", [])])
def test_other_mechanisms_and_oov_policies(tmp_path, table, small_glove_file, mech, extra):
    src = tmp_path / "in.csv"
    io.write_table(table, src)
    for policy in ("uniform", "unk", "drop", "keep"):
        out = tmp_path / f"o-{policy}.csv"
        r = _run(src, "-m", mech, "-e", "1", "--embeddings", small_glove_file, "--oov", policy, "-o", out,
                 "--seed", 1, "-q", *extra)
        assert r.exit_code == 0, r.output
        got = io.read_table(out)[0]["text"].tolist()
        joined = " ".join(got)
        if policy == "keep":
            assert "nobody" in joined
        else:
            assert "nobody" not in joined and "saw" not in joined
        if policy == "unk":
            assert "[UNK]" in joined
        if policy == "drop":
            assert got[2].split() and len(got[2].split()) == 1  # "a film nobody saw" -> one word
    card = json.loads(card_path(tmp_path / "o-keep.csv").read_text())
    assert any("NO privacy protection" in w for w in card["warnings"])
    if mech == "santext+":
        assert card["guarantee"]["kind"] == "umldp" and card["parameters"]["w"] == 0.5


@pytest.mark.parametrize("name", ["rotten-tomatoes", "drug-reviews", "20newsgroups", "reuters-r8", "bbc-news"])
def test_builtin_dataset_slices(tmp_path, name):
    out = tmp_path / "nested" / "dir" / f"{name}.csv"  # missing folders are created
    r = _run(name, "--epsilon", "3", "--limit", "12", "--output", out, "--seed", 0, "--json")
    assert r.exit_code == 0, r.output
    got = io.read_table(out)[0]
    assert len(got) == 12 and {"text", "label"} <= set(got.columns)
    card = json.loads(card_path(out).read_text())
    assert "dataset" not in card["data"] and "documents" not in card["data"]
    assert json.loads(r.stdout[r.stdout.index("{"):])["private"]["documents"] == 12
    assert card["data"]["embeddings"]["vocabulary_size"] == 400_000
    assert card["data"]["output_vocabulary"]["name"] == "glove-6b-top30000-v1"


def test_demo_command_shape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _run("rotten-tomatoes", "--mechanism", "santext", "--epsilon", "3", "--limit", "50",
             "--output", "demo-output/rt.santext.csv", "--overwrite")
    assert r.exit_code == 0, r.output
    assert "privacy card" in r.stdout and "demo-output/rt.santext.csv.card.json" in r.stdout
    assert (tmp_path / "demo-output" / "rt.santext.csv").exists()


BAD = [
    (["--epsilon", "0"], "epsilon"),
    (["--epsilon", "-1"], "epsilon"),
    (["--epsilon", "nan"], "epsilon"),
    (["--epsilon", "inf"], "epsilon"),
    (["--epsilon", "1", "-m", "santext+", "--w", "1.5"], "--w"),
    (["--epsilon", "1", "-m", "santext+", "--p", "-0.1"], "--p"),
    (["--epsilon", "1", "-m", "santext", "--w", "0.5"], "santext+"),
    (["--epsilon", "1", "-m", "nope"], "mechanism"),
    (["--epsilon", "1", "--oov", "leak"], "oov"),
    (["--epsilon", "1", "--text-column", "zzz"], "zzz"),
    (["--epsilon", "1", "-m", "santext+", "--w", "0", "--p", "0.5"], "no sensitive word"),  # fails mid-run
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_parameters_exit_2_without_output(tmp_path, table, small_glove_file, args, needle):
    src = tmp_path / "in.csv"
    io.write_table(table, src)
    before = _digest(src)
    out = tmp_path / "sub" / "out.csv"
    r = _run(src, "--embeddings", small_glove_file, "-o", out, *args)
    assert r.exit_code == 2, r.output
    assert needle in r.output and "Traceback" not in r.output
    assert not out.exists() and not card_path(out).exists() and not (tmp_path / "sub").exists()
    assert _digest(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "tiny.glove.txt"]  # no temp files left


def test_bad_files_exit_2(tmp_path, small_glove_file):
    emb = ["--embeddings", str(small_glove_file), "-e", "1"]
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    r = _run(empty, *emb)
    assert r.exit_code == 2 and "empty" in r.output
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good film\nbad movie\n\xff\xfe broken\n")
    r = _run(bad, *emb)
    assert r.exit_code == 2 and "line 3" in r.output
    blank = tmp_path / "blank.txt"
    blank.write_text("\n\n\n")
    r = _run(blank, *emb)
    assert r.exit_code == 2 and "no words" in r.output
    nocol = tmp_path / "nocol.csv"
    nocol.write_text("a,b\n1,2\n")
    r = _run(nocol, *emb)
    assert r.exit_code == 2 and "text-column" in r.output
    missing = _run(tmp_path / "nothere.csv", *emb)
    assert missing.exit_code == 2 and "neither a file nor a built-in dataset" in missing.output
    for p in (empty, bad, blank, nocol):
        assert not list(tmp_path.glob(p.stem + ".santext*"))


def test_output_equal_to_input_or_existing(tmp_path, table, small_glove_file):
    src = tmp_path / "in.csv"
    io.write_table(table, src)
    before = _digest(src)
    emb = ["--embeddings", str(small_glove_file), "-e", "1"]
    r = _run(src, *emb, "-o", src)
    assert r.exit_code == 2 and "is the input" in r.output and _digest(src) == before
    r = _run(src, *emb, "-o", src, "--overwrite")
    assert r.exit_code == 2 and _digest(src) == before
    out = tmp_path / "out.csv"
    out.write_text("keep me\n")
    r = _run(src, *emb, "-o", out)
    assert r.exit_code == 2 and "already exists" in r.output and out.read_text() == "keep me\n"
    r = _run(src, *emb, "-o", out, "--overwrite", "-q")
    assert r.exit_code == 0 and out.read_text() != "keep me\n"
    default = _run(src, *emb, "-q")  # default output beside the input
    assert default.exit_code == 0 and (tmp_path / "in.santext.csv").exists()


def test_datasets_command():
    r = runner.invoke(app, ["datasets", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert {x["name"] for x in rows} >= {"rotten-tomatoes", "bbc-news"} and all(x["installed"] for x in rows)
    r = runner.invoke(app, ["datasets", "drug-reviews", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["train_documents"] == 600
    r = runner.invoke(app, ["datasets", "nope"])
    assert r.exit_code == 2


def test_poor_embedding_coverage_and_p_zero_are_warned(tmp_path):
    emb = tmp_path / "e.txt"
    emb.write_text("le 0 1\nbad 1 0\nmonde 0.5 0.5\n")
    src = tmp_path / "fr.txt"
    src.write_text("Ceci est un texte avec des mots\nbonjour le monde\n")
    out = tmp_path / "o.txt"
    r = runner.invoke(app, ["sanitize", str(src), "-e", "2", "--embeddings", str(emb), "--no-ledger", "--seed", "1",
                            "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    card = json.loads(card_path(out).read_text())
    # the OOV share is a statistic of the private input: the curator's terminal, never the card
    assert not any("have no embedding" in w for w in card["warnings"]), card["warnings"]
    private = json.loads(r.stdout[r.stdout.index("{"):])["private"]["warnings"]
    assert any("have no embedding" in w and w.startswith("80%") for w in private), private
    r = runner.invoke(app, ["sanitize", str(src), "-e", "2", "--embeddings", str(emb), "--no-ledger", "--seed", "1",
                            "-o", str(tmp_path / "o2.txt")])
    assert "warning (private):" in r.output and "80%" in r.output
    r = runner.invoke(app, ["sanitize", str(src), "-e", "2", "--embeddings", str(emb), "--no-ledger", "--seed", "1",
                            "-o", str(tmp_path / "p0.txt"), "--mechanism", "santext+", "--p", "0", "--json"])
    assert r.exit_code == 0, r.output
    card = json.loads(card_path(tmp_path / "p0.txt").read_text())
    assert any(w.startswith("p = 0") for w in card["warnings"])
    r = runner.invoke(app, ["sanitize", str(src), "-e", "2", "--embeddings", str(emb), "--no-ledger", "--seed", "1",
                            "-o", str(tmp_path / "p3.txt"), "--mechanism", "santext+", "--p", "0.3", "--json"])
    card = json.loads(card_path(tmp_path / "p3.txt").read_text())
    assert not any(w.startswith("p = 0") for w in card["warnings"])


def test_an_error_inside_the_progress_block_is_one_line(tmp_path):
    src = tmp_path / "rag.csv"
    src.write_text("id,text\n1,the movie,extra,cols\n")
    r = runner.invoke(app, ["sanitize", str(src), "-e", "3", "--no-ledger", "-o", str(tmp_path / "o.csv")])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "0/?" not in r.output, r.output


def test_folders_as_input_or_output_get_the_right_message(tmp_path):
    src = tmp_path / "d.txt"
    src.write_text("good film\n")
    (tmp_path / "adir").mkdir()
    r = runner.invoke(app, ["sanitize", str(src), "-e", "1", "--no-ledger", "-o", str(tmp_path / "adir")])
    assert r.exit_code == 2 and "is a folder; give a file name inside it" in r.output, r.output
    # a folder is a dataset of parts since issue 16: an empty one has none
    r = runner.invoke(app, ["sanitize", str(tmp_path / "adir"), "-e", "1", "--no-ledger"])
    assert r.exit_code == 2 and "holds no parts" in r.output, r.output
    assert list((tmp_path / "adir").iterdir()) == []


def test_seeded_output_does_not_depend_on_chunks_blocks_or_workers(tmp_path, table, small_glove_file):
    """Per-record keyed streams (issue 12 item 9): the same seed gives the same bytes for any
    --chunk-size and --block-size, and the card no longer needs to record them."""
    src = tmp_path / "in.csv"
    io.write_table(pd.concat([table] * 5, ignore_index=True), src)
    outs = []
    for i, (chunk, block) in enumerate([(1, 0.001), (2, 0.5), (1000, 32)]):
        for mech in ("santext", "santext+", "fbdd"):
            out = tmp_path / f"{mech}-{i}.csv"
            r = _run(src, "-m", mech, "-e", "2", "--embeddings", small_glove_file, "-o", out, "--seed", 7,
                     "--chunk-size", chunk, "--block-size", block, "-q", "--no-ledger")
            assert r.exit_code == 0, r.output
            outs.append((mech, out))
    for mech in ("santext", "santext+", "fbdd"):
        digests = {_digest(o) for m, o in outs if m == mech}
        assert len(digests) == 1, mech
    card = json.loads(card_path(outs[0][1]).read_text())
    assert "reproduce_with" not in card["randomness"]
    r = _run(src, "-e", "2", "--embeddings", small_glove_file, "-o", tmp_path / "other-seed.csv", "--seed", 8, "-q",
             "--no-ledger")
    assert r.exit_code == 0 and _digest(tmp_path / "other-seed.csv") != _digest(outs[0][1])


@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_final_rename_leaves_no_new_card(tmp_path, table, small_glove_file, monkeypatch, existing):
    """The card is written just before the table's final rename; if that rename fails, no card
    describing the missing output is left (and an --overwrite run puts the previous card back)."""
    import errno

    src = tmp_path / "in.csv"
    io.write_table(table, src)
    out = tmp_path / "out.csv"
    if existing:
        assert _run(src, "-e", "2", "--embeddings", small_glove_file, "-o", out, "-q", "--no-ledger").exit_code == 0
    before = (_digest(out), card_path(out).read_bytes()) if existing else None
    orig_exit = io.TableWriter.__exit__

    def failing_exit(self, et, e, tb):
        if et is None:  # discard the temporary as on failure, then fail like a full disk at the rename
            orig_exit(self, RuntimeError, RuntimeError("x"), None)
            raise OSError(errno.ENOSPC, "No space left on device")
        return orig_exit(self, et, e, tb)

    monkeypatch.setattr(io.TableWriter, "__exit__", failing_exit)
    r = _run(src, "-e", "3", "--embeddings", small_glove_file, "-o", out, "-q", "--no-ledger", "--overwrite")
    assert r.exit_code == 2, r.output
    if existing:
        assert (_digest(out), card_path(out).read_bytes()) == before
    else:
        assert not out.exists() and not card_path(out).exists()


@pytest.mark.parametrize("size", ["inf", "-inf", "nan", "0", "-1", "1e-9"])
def test_block_size_must_be_finite_positive_mib(tmp_path, table, size):
    src = tmp_path / "in.csv"
    io.write_table(table, src)
    out = tmp_path / "out.csv"
    r = _run(src, "-e", "3", "--block-size", size, "-o", out, "--no-ledger")
    assert r.exit_code == 2, r.output
    msg = r.output.strip()
    assert "--block-size must be a finite positive number of MiB" in msg and len(msg.splitlines()) == 1
    assert "MB)" not in msg and "Traceback" not in msg
    assert not out.exists()


def test_workers_gives_the_same_seeded_output_and_bad_values_are_refused(tmp_path, table, small_glove_file):
    src = tmp_path / "in.csv"
    io.write_table(pd.concat([table] * 5, ignore_index=True), src)
    digests = set()
    for w in ("1", "2", "3"):
        out = tmp_path / f"w{w}.csv"
        r = _run(src, "-e", "2", "--embeddings", small_glove_file, "-o", out, "--seed", 7, "--workers", w, "-q",
                 "--no-ledger", "--block-size", "0.001")
        assert r.exit_code == 0, r.output
        digests.add(_digest(out))
    assert len(digests) == 1
    for extra, msg in ((["--workers", "0"], "--workers must be a positive number of threads"),
                       (["--workers", "-2"], "--workers must be a positive number of threads"),
                       (["-m", "1-diffractor", "--workers", "2"], "1-diffractor samples in one thread"),
                       (["-m", "fbdd", "--workers", "2"], None),  # fbdd's search runs on worker threads
                       (["-m", "fbdd", "--workers", "1"], None),
                       (["--workers", "2", "--device", "cpu", "-m", "santext+"], None)):
        out = tmp_path / "bad.csv"
        r = _run(src, "-e", "2", "--embeddings", small_glove_file, "-o", out, "-q", "--no-ledger", *extra)
        if msg is None:
            assert r.exit_code == 0, r.output
            out.unlink()
            card_path(out).unlink()
            continue
        assert r.exit_code == 2 and msg in r.output and len(r.output.strip().splitlines()) == 1, r.output
        assert not out.exists()


def test_a_pipe_as_input_is_refused_at_once(tmp_path):
    import os

    fifo = tmp_path / "in.txt"
    os.mkfifo(fifo)
    out = tmp_path / "out.txt"
    r = _run(fifo, "-e", "3", "-o", out, "--no-ledger")
    assert r.exit_code == 2 and "is not a regular file" in r.output and len(r.output.strip().splitlines()) == 1
    assert not out.exists()
