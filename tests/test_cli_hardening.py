"""Regression tests for issue 13 (a hostile new-user test): SIGHUP and killed runs leave nothing
behind and their budget reservations can be settled (item 1); non-string and null texts, JSON Lines
rows' own keys (item 5); --no-ledger over a budgeted dataset (item 7); an input that changes between
the two passes (item 8); messages (item 9: /proc outputs, --quiet help, UTF-16 and Latin-1 inputs,
a budget race loser told what is reserved rather than spent)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from textdp.accounting import MetricDP
from textdp.accounting.card import card_path
from textdp.accounting.ledger import Ledger
from textdp.cli.main import app
from textdp.data import io
from textdp.errors import BudgetExceededError, InputError

runner = CliRunner()
WORDS = ["good", "bad", "film", "movie", "great"]


def _run(*args, input=None):
    return runner.invoke(app, [*map(str, args)], input=input)


def _emb(tmp_path) -> Path:
    emb = tmp_path / "tiny.glove.txt"
    emb.write_text("".join(f"{w} {i} 0.5 {i % 2}\n" for i, w in enumerate(WORDS)))
    return emb


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "reviews.txt"
    f.write_text("good film\nbad movie\ngreat film\n")
    return f


def _err_line(r) -> str:
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1, r.output
    return lines[0]


# ---- item 1: SIGHUP like SIGTERM --------------------------------------------------------------

_SANITIZE_THEN_WAIT = textwrap.dedent("""
    import sys, time
    import textdp.cli.main as m
    import textdp.cli.sanitize as s

    def slow(writer, chunks, *a, **k):  # pass 2: write a first chunk, then hang until signalled
        for df, col in chunks():
            writer.write(df)
            break
        print("ready", flush=True)
        time.sleep(60)

    s._sanitize_chunks = slow
    sys.argv = ["textdp", "sanitize", *sys.argv[1:]]
    m.main()
""")


@pytest.mark.parametrize("sig,code,name", [(signal.SIGHUP, 129, "SIGHUP"), (signal.SIGTERM, 143, "SIGTERM")])
def test_sighup_and_sigterm_leave_nothing_behind_and_cancel_the_reservation(tmp_path, data, sig, code, name):
    led = tmp_path / "ledgers"
    Ledger(str(data), led).set_budget(5.0)
    out = tmp_path / "new" / "sub" / "o.txt"
    env = {**os.environ, "TEXTDP_LEDGER_DIR": str(led)}
    p = subprocess.Popen([sys.executable, "-c", _SANITIZE_THEN_WAIT, str(data), "-e", "3", "--embeddings",
                          str(_emb(tmp_path)), "-o", str(out), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, env=env)
    try:
        assert p.stdout.readline().strip() == "ready"
        temps = [f.name for f in out.parent.iterdir()]
        assert len(temps) == 1 and f".{os.getpid()}@" not in temps[0] and f".{p.pid}@" in temps[0], temps
        opened = Ledger(str(data), led).open_reservations()
        assert len(opened) == 1 and opened[0]["pid"] == p.pid and opened[0]["host"] == socket.gethostname()
        assert opened[0]["outputs"] == [str(out), str(card_path(out))]  # what `budget settle` checks
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == code, err
    assert err.strip() == f"error: interrupted ({name}); no output was written"
    assert not (tmp_path / "new").exists()  # the folders it created are gone with the temporary file
    after = Ledger(str(data), led)
    assert after.open_reservations() == [] and after.releases() == []
    assert [e["type"] for e in after.entries()] == ["budget", "reservation", "cancel"] and after.verify()


def test_a_finished_run_ignores_a_late_sighup(monkeypatch):
    import textdp.cli.main as m

    calls = []
    monkeypatch.setattr(m, "app", lambda **kw: 0)
    monkeypatch.setattr(signal, "signal", lambda sig, handler: calls.append((sig, handler)))
    with pytest.raises(SystemExit):
        m.main()
    assert (signal.SIGHUP, m._sigterm_to_interrupt) in calls  # during the run
    calls.clear()
    m._ignore_late_signals()  # the atexit hook of a finished run
    assert (signal.SIGHUP, signal.SIG_IGN) in calls


_WRITE_THEN_WAIT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from textdp.data.io import atomic_output

    with atomic_output(sys.argv[1]) as tmp:
        Path(tmp).write_text("partial")
        print(Path(tmp).name, flush=True)
        time.sleep(60)
""")


def test_a_killed_runs_temporary_file_names_its_process_and_a_later_run_removes_it(tmp_path):
    out = tmp_path / "o.csv"
    p = subprocess.Popen([sys.executable, "-c", _WRITE_THEN_WAIT, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        name = p.stdout.readline().strip()
        assert name.startswith(f".o.csv.{p.pid}@{io._host_tag()}.") and name.endswith(".tmp")
        live = tmp_path / name
        with io.atomic_output(out) as tmp:  # the writer still runs: its file is never touched
            Path(tmp).write_text("x")
        assert live.exists() and out.read_text() == "x"
        p.kill()
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert live.exists()  # SIGKILL: no clean-up ran
    other = tmp_path / f".o.csv.{p.pid}@another-machine.abcdefgh.tmp"  # a shared disk: cannot be checked
    other.write_text("y")
    legacy = tmp_path / ".o.csv.abcdefgh.tmp"
    legacy.write_text("z")
    with io.atomic_output(out) as tmp:
        Path(tmp).write_text("again")
    assert not live.exists() and other.exists() and legacy.exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([other.name, legacy.name, "o.csv"])


def _abandon(data, led, outputs) -> str:
    """A reservation made by a process that then dies without closing it (as SIGKILL would)."""
    code = ("import sys; from textdp.accounting import MetricDP; from textdp.accounting.ledger import Ledger; "
            "print(Ledger(sys.argv[1], sys.argv[2]).reserve(MetricDP(epsilon=2.0), command='sanitize --mechanism "
            "santext', outputs=sys.argv[3:]))")
    r = subprocess.run([sys.executable, "-c", code, str(data), str(led), *map(str, outputs)], capture_output=True,
                       text=True, check=True)
    return r.stdout.strip()


def test_budget_reservations_and_settle(tmp_path, data):
    led = tmp_path / "ledgers"
    Ledger(str(data), led).set_budget(5.0)
    out = tmp_path / "o.txt"
    gone = _abandon(data, led, [out, card_path(out)])  # killed before anything reached disk
    on_disk = _abandon(data, led, [tmp_path / "p.txt", card_path(tmp_path / "p.txt")])
    card_path(tmp_path / "p.txt").write_text(json.dumps({"randomness": {"seeded": True}}))  # its card was written
    running = Ledger(str(data), led).reserve(MetricDP(epsilon=0.5), outputs=[tmp_path / "q.txt"])  # this process
    with pytest.raises(BudgetExceededError):
        Ledger(str(data), led).check(MetricDP(epsilon=1.0))  # 2 + 2 + 0.5 reserved
    r = _run("budget", "reservations", data, "--ledger-dir", led, "--json")
    assert r.exit_code == 0, r.output
    rows = {x["id"]: x for x in json.loads(r.stdout)["open_reservations"]}
    assert rows[gone]["process"] == "gone" and rows[gone]["settle"] == "cancel" and rows[gone]["on_disk"] == []
    assert rows[on_disk]["settle"] == "commit" and rows[on_disk]["on_disk"] == [str(card_path(tmp_path / "p.txt"))]
    assert rows[running]["process"] == "running"
    text = _run("budget", "reservations", data, "--ledger-dir", led)
    assert text.exit_code == 0 and gone[:12] in text.output and "gone (abandoned)" in text.output
    # a live run's reservation is never settled
    line = _err_line(_run("budget", "settle", data, running, "--ledger-dir", led, "--yes"))
    assert "still running" in line
    # declined: nothing changes
    before = Ledger(str(data), led).entries()
    r = _run("budget", "settle", data, gone[:8], "--ledger-dir", led, input="n\n")
    assert r.exit_code == 1 and "nothing was changed" in r.output and "cancel it" in r.output
    assert Ledger(str(data), led).entries() == before
    # confirmed: cancelled (nothing of it on disk), recorded in the ledger
    r = _run("budget", "settle", data, gone[:8], "--ledger-dir", led, input="y\n")
    assert r.exit_code == 0 and "cancelled" in r.output, r.output
    # the one whose card reached disk: committed as a release, with its card
    r = _run("budget", "settle", data, on_disk, "--ledger-dir", led, "--yes", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["settled"] == "committed", r.output
    final = Ledger(str(data), led)
    assert final.verify() and [e["id"] for e in final.open_reservations()] == [running]
    cancel = [e for e in final.entries() if e["type"] == "cancel"][0]
    assert cancel["reservation"] == gone and "nothing was released" in cancel["settled"]["reason"]
    (rel,) = final.releases()
    assert rel["reservation"] == on_disk and rel["settled"]["by"] == "textdp budget settle"
    assert rel["guarantee"]["epsilon"] == 2.0 and rel["seeded"] is True
    final.check(MetricDP(epsilon=2.4))  # 5 - 2 released - 0.5 reserved
    assert "already closed" in _err_line(_run("budget", "settle", data, gone, "--ledger-dir", led, "--yes"))
    show = _run("budget", "show", data, "--ledger-dir", led)
    assert running[:12] in show.output and "budget settle" in show.output


# ---- item 5: non-string and null texts, JSON Lines rows keep their own keys -------------------

def test_jsonl_null_text_passes_through_and_rows_keep_their_own_keys(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"id": 1, "text": "good film"}\n{"text": null, "note": "x"}\n{"text": "bad movie", "n": 2.5}\n')
    out = tmp_path / "o.jsonl"
    r = _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", out, "--seed", 1, "-q")
    assert r.exit_code == 0, r.output
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [list(x) for x in rows] == [["id", "text"], ["text", "note"], ["text", "n"]]
    assert rows[1] == {"text": None, "note": "x"} and rows[2]["n"] == 2.5 and rows[0]["id"] == 1
    assert all(isinstance(x["text"], str) and x["text"] for x in (rows[0], rows[2]))
    for suffix in (".csv", ".txt", ".parquet"):  # other formats: an empty field / line / null
        o = tmp_path / f"o{suffix}"
        assert _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", o, "-q").exit_code == 0
        got = pd.read_parquet(o) if suffix == ".parquet" else None
        if got is not None:
            assert got["text"].isna().tolist() == [False, True, False] and "__textdp_row_keys__" not in got
        elif suffix == ".txt":
            assert o.read_text().split("\n")[1] == ""
        else:
            assert o.read_text().splitlines()[2].startswith(",") and "__textdp" not in o.read_text()


def test_jsonl_row_without_the_text_field_is_refused_with_its_line(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "good film"}\n\n{"other": "bad"}\n')
    r = _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", tmp_path / "o.jsonl")
    assert r.exit_code == 2
    assert "line 3 has no 'text' field" in _err_line(r) and not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("values,kind", [([1, 2], "numeric"), ([1.5, 2.0], "numeric"), ([True, False], "true/false")])
def test_a_non_string_parquet_text_column_is_refused_naming_it(tmp_path, values, kind):
    src = tmp_path / "in.parquet"
    pd.DataFrame({"body": values, "k": ["a", "b"]}).to_parquet(src)
    r = _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "--text-column", "body",
             "-o", tmp_path / "o.parquet")
    assert r.exit_code == 2 and not (tmp_path / "o.parquet").exists()
    line = _err_line(r)
    assert "text column 'body' holds" in line and kind in line and "not strings" in line


@pytest.mark.parametrize("value,kind", [("5", "number"), ("true", "true/false value"), ("3.5", "number")])
def test_a_non_string_jsonl_text_is_refused_with_its_line(tmp_path, value, kind):
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"text": "good film"}}\n{{"text": {value}}}\n')
    with pytest.raises(InputError, match=f"holds a {kind} on line 2, not a string"):
        io.read_table(src)
    r = _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", tmp_path / "o.jsonl")
    assert r.exit_code == 2 and f"holds a {kind} on line 2" in _err_line(r)


def test_parquet_null_text_passes_through(tmp_path):
    src = tmp_path / "in.parquet"
    pd.DataFrame({"text": ["good film", None, "bad"], "k": [1, 2, 3]}).to_parquet(src)
    out = tmp_path / "o.parquet"
    assert _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", out, "-q").exit_code == 0
    got = pd.read_parquet(out)
    assert got["text"].isna().tolist() == [False, True, False] and got["k"].tolist() == [1, 2, 3]


# ---- item 7: --no-ledger over a budgeted dataset ------------------------------------------------

def test_no_ledger_over_a_budget_warns_once_and_the_card_says_unrecorded(tmp_path, data):
    led = tmp_path / "ledgers"
    emb = _emb(tmp_path)
    base = ["sanitize", data, "-e", "1", "--embeddings", emb, "--ledger-dir", led, "--no-ledger", "--seed", 1, "-q"]
    r = _run(*base, "-o", tmp_path / "a.txt")  # no budget: nothing to warn about
    assert r.exit_code == 0 and r.output == ""
    Ledger(str(data), led).set_budget(5.0)
    r = _run(*base, "-o", tmp_path / "b.txt")
    assert r.exit_code == 0
    warning = [x for x in r.output.splitlines() if x.strip()]
    assert len(warning) == 1 and "--no-ledger" in warning[0] and "has a budget" in warning[0]
    for name in ("a.txt", "b.txt"):  # a parameter-level statement: on every --no-ledger card
        card = json.loads(card_path(tmp_path / name).read_text())
        assert "not recorded in any privacy-budget ledger" in card["ledger"]
    assert [e["type"] for e in Ledger(str(data), led).entries()] == ["budget"]
    r = _run("sanitize", data, "-e", "1", "--embeddings", emb, "--ledger-dir", led, "-q", "-o", tmp_path / "c.txt")
    assert r.exit_code == 0 and "ledger" not in json.loads(card_path(tmp_path / "c.txt").read_text())


def test_force_over_a_budget_warns_once_and_is_recorded(tmp_path, data):
    led = tmp_path / "ledgers"
    Ledger(str(data), led).set_budget(1.0)
    r = _run("sanitize", data, "-e", "3", "--embeddings", _emb(tmp_path), "--ledger-dir", led, "--force", "-q",
             "-o", tmp_path / "o.txt")
    assert r.exit_code == 0
    warning = [x for x in r.output.splitlines() if x.strip()]
    assert len(warning) == 1 and "--force" in warning[0]
    assert json.loads(card_path(tmp_path / "o.txt").read_text())["forced"] is True
    assert Ledger(str(data), led).releases()[-1]["forced"] is True


# ---- item 8: an input that changes between the passes ------------------------------------------

def _between_passes(monkeypatch, action):
    """Run ``action`` when sanitize has read its input once (pass 1), before pass 2."""
    import textdp.cli.sanitize as san_mod

    real_run = san_mod._run

    def run(*a, **k):
        real_reserve = a[-1]

        def reserve_then_change():
            real_reserve()
            action()

        return real_run(*a[:-1], reserve_then_change, **k)

    monkeypatch.setattr(san_mod, "_run", run)


def test_documents_appended_between_the_passes_are_refused(tmp_path, data, monkeypatch):
    led = tmp_path / "ledgers"
    Ledger(str(data), led).set_budget(5.0)
    _between_passes(monkeypatch, lambda: data.open("a").write("awful film\n"))
    out = tmp_path / "o.txt"
    r = _run("sanitize", data, "-e", "1", "--embeddings", _emb(tmp_path), "--ledger-dir", led, "-o", out, "-q")
    assert r.exit_code == 2
    line = _err_line(r)
    assert "changed while it was being read" in line and "size" in line and "nothing was written" in line
    assert not out.exists() and not card_path(out).exists()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["ledgers", "reviews.txt", "tiny.glove.txt"]
    # the reservation is cancelled; a later run reads the completed file (under its new content hash)
    entries = [json.loads(x) for f in led.glob("*.jsonl") for x in f.read_text().splitlines()]
    assert [e["type"] for e in entries] == ["budget", "reservation", "cancel"]


def test_a_same_size_same_mtime_change_is_caught_by_the_hash(tmp_path, data, monkeypatch):
    def rewrite():
        st = data.stat()
        data.write_bytes(data.read_bytes().replace(b"good", b"baad"))
        os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))

    _between_passes(monkeypatch, rewrite)
    out = tmp_path / "o.txt"
    r = _run("sanitize", data, "-e", "1", "--embeddings", _emb(tmp_path), "--no-ledger", "-o", out, "-q")
    assert r.exit_code == 2 and "its content (SHA-256) differs" in _err_line(r)
    assert not out.exists() and not card_path(out).exists()


def test_the_ledger_records_the_hash_of_the_released_bytes(tmp_path, data):
    led = tmp_path / "ledgers"
    r = _run("sanitize", data, "-e", "1", "--embeddings", _emb(tmp_path), "--ledger-dir", led, "-q",
             "-o", tmp_path / "o.txt")
    assert r.exit_code == 0
    import hashlib

    assert Ledger(str(data), led).releases()[0]["input_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()


# ---- item 9: messages -----------------------------------------------------------------------------

@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("target", ["/proc/textdp-none/o.txt", "/proc/o.txt"])
def test_an_output_under_proc_is_not_told_to_create_its_folder(tmp_path, data, target):
    r = _run("sanitize", data, "-e", "1", "--embeddings", _emb(tmp_path), "--no-ledger", "-o", target)
    assert r.exit_code == 2
    line = _err_line(r)
    assert "create its folder first" not in line and "does not accept new files" in line and "'/proc'" in line


def test_quiet_help_says_where_things_go():
    r = runner.invoke(app, ["sanitize", "--help"], terminal_width=400)
    text = " ".join(r.output.split())
    assert "No progress bars or summaries on stderr" not in text
    assert "summary (stdout)" in text


def test_quiet_run_prints_nothing(tmp_path, data):
    r = _run("sanitize", data, "-e", "1", "--embeddings", _emb(tmp_path), "-q", "-o", tmp_path / "o.txt")
    assert r.exit_code == 0 and r.output == ""


@pytest.mark.parametrize("suffix", [".txt", ".jsonl", ".csv"])
@pytest.mark.parametrize("encoding,named,iconv", [
    ("utf-16", "UTF-16 (it starts with a UTF-16 byte-order mark)", "iconv -f utf-16 -t utf-8"),
    ("utf-16-le", "UTF-16 little-endian", "iconv -f utf-16le -t utf-8"),
    ("utf-16-be", "UTF-16 big-endian", "iconv -f utf-16be -t utf-8"),
    ("latin-1", "Latin-1", "iconv -f latin1 -t utf-8"),
    ("cp1252", "Windows-1252", "iconv -f windows-1252 -t utf-8"),
])
def test_utf16_and_latin1_inputs_name_the_encoding_and_the_iconv_line(tmp_path, suffix, encoding, named, iconv):
    text = {".txt": "café film\n“good” movie\n", ".jsonl": '{"text": "café film"}\n{"text": "“good”"}\n',
            ".csv": "text\ncafé film\n“good” movie\n"}[suffix]
    if encoding == "latin-1":
        text = text.replace("“", '"').replace("”", '"')
    src = tmp_path / f"in{suffix}"
    src.write_bytes(text.encode(encoding))
    r = _run("sanitize", src, "-e", "1", "--embeddings", _emb(tmp_path), "-o", tmp_path / f"o{suffix}")
    assert r.exit_code == 2
    line = _err_line(r)
    assert named in line and f"{iconv} in{suffix} > in.utf8{suffix}" in line, line


def test_a_race_loser_is_told_what_is_reserved_not_spent(tmp_path, data):
    led = tmp_path / "ledgers"
    Ledger(str(data), led).set_budget(5.0)
    Ledger(str(data), led).reserve(MetricDP(epsilon=3.0), command="another run")
    with pytest.raises(BudgetExceededError) as e:
        Ledger(str(data), led).reserve(MetricDP(epsilon=3.0))
    msg = str(e.value)
    assert "0 already spent and 3 reserved by an open reservation" in msg and "3 already spent" not in msg
    assert "textdp budget reservations" in msg
    r = _run("sanitize", data, "-e", "3", "--embeddings", _emb(tmp_path), "--ledger-dir", led, "-o",
             tmp_path / "o.txt")
    assert r.exit_code == 2 and "0 already spent and 3 reserved" in _err_line(r)


# ---- final review findings (issue 13): binary files, strict-JSON ledger ---------------------------------------
@pytest.mark.parametrize("head", [b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4, b"\x1f\x8b\x08\x00" + bytes(300),
                                  bytes((i * 37 + 11) % 256 for i in range(5000))])
def test_binary_file_is_called_binary_not_an_encoding(tmp_path, head):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    src = tmp_path / "data.csv"
    src.write_bytes(head)
    r = CliRunner().invoke(app, ["sanitize", str(src), "-e", "3", "--no-ledger", "-o", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and "looks like a binary file" in r.output and "iconv" not in r.output, r.output
    assert not (tmp_path / "o.csv").exists()


def test_latin1_file_still_gets_its_iconv_line(tmp_path):
    from typer.testing import CliRunner

    from textdp.cli.main import app

    src = tmp_path / "lat.csv"
    src.write_bytes(b"id,text\n1,caf\xe9 cr\xe8me\n")
    r = CliRunner().invoke(app, ["sanitize", str(src), "-e", "3", "--no-ledger", "-o", str(tmp_path / "o.csv")])
    assert r.exit_code == 2 and "Latin-1" in r.output and "iconv -f latin1" in r.output, r.output


def test_ledger_lines_are_strict_json_with_infinite_terms(tmp_path):
    import json
    import math

    from textdp.accounting import UMLDP
    from textdp.accounting.ledger import Ledger

    led = Ledger("rotten-tomatoes", tmp_path)
    led.record(UMLDP(epsilon=1.0, epsilon0=math.inf, worst_case_epsilon=math.inf), card={"x": math.inf}, command="t")

    def refuse(token):
        raise ValueError(token)

    for line in led.path.read_text(encoding="utf-8").splitlines():
        json.loads(line, parse_constant=refuse)  # no bare Infinity / NaN
    assert [g.epsilon0 for g in led.guarantees()] == [math.inf] and led.verify()
