"""Regression tests: the privacy budget cannot be overspent without --force by a
symlink, a copy, a race, a typo, or by deleting the last ledger line."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest
from typer.testing import CliRunner

from textdp.accounting import MetricDP
from textdp.accounting.ledger import Ledger
from textdp.errors import BudgetExceededError, InputError


def _app():
    from textdp.cli.main import app

    return app


def _spend_two(data, led_dir):
    led = Ledger(str(data), led_dir)
    led.set_budget(5.0)
    led.record(MetricDP(epsilon=3.0), command="sanitize")
    with pytest.raises(BudgetExceededError):
        led.record(MetricDP(epsilon=3.0), command="sanitize")


@pytest.fixture
def data(tmp_path):
    f = tmp_path / "reviews.txt"
    f.write_text("good film\nbad movie\ngreat film\n")
    return f


def test_symlink_shares_the_ledger(tmp_path, data):
    d = tmp_path / "ledgers"
    _spend_two(data, d)
    link = tmp_path / "link.txt"
    os.symlink(data, link)
    led = Ledger(str(link), d)
    assert led.path == Ledger(str(data), d).path  # found by content, not by the link's name
    with pytest.raises(BudgetExceededError):
        led.record(MetricDP(epsilon=3.0))
    hard = tmp_path / "hard.txt"
    os.link(data, hard)
    with pytest.raises(BudgetExceededError):
        Ledger(str(hard), d).check(MetricDP(epsilon=3.0))


def test_copy_shares_the_ledger_and_a_changed_file_does_not(tmp_path, data):
    d = tmp_path / "ledgers"
    _spend_two(data, d)
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    copy = sub / "copy.txt"
    copy.write_bytes(data.read_bytes())
    with pytest.raises(BudgetExceededError):
        Ledger(str(copy), d).record(MetricDP(epsilon=3.0))
    assert len(list(d.glob("*.jsonl"))) == 1
    copy.write_text("another dataset\n")  # a changed file is a different dataset
    assert Ledger(str(copy), d).budget() is None


def test_sanitize_symlink_and_copy_are_refused(tmp_path, data):
    from textdp.embeddings import Embeddings  # noqa: F401  (the CLI loads it)

    words = ["good", "great", "bad", "awful", "film", "movie"]
    emb = tmp_path / "tiny.glove.txt"
    vecs = [[1, 0, 0], [0.9, 0.1, 0], [-1, 0, 0], [-0.9, -0.1, 0], [0, 1, 0], [0, 0.95, 0.05]]
    emb.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in zip(words, vecs)))
    led = str(tmp_path / "ledgers")
    runner = CliRunner()

    def san(inp, out):
        return runner.invoke(_app(), ["sanitize", str(inp), "--embeddings", str(emb), "--ledger-dir", led,
                                      "--seed", "1", "-q", "--epsilon", "3", "-o", str(tmp_path / out)])

    assert runner.invoke(_app(), ["budget", "set", str(data), "--epsilon", "5", "--ledger-dir", led]).exit_code == 0
    assert san(data, "a.txt").exit_code == 0
    link = tmp_path / "link.txt"
    os.symlink(data, link)
    r = san(link, "g.txt")
    assert r.exit_code == 2 and "budget" in r.output, r.output
    assert not (tmp_path / "g.txt").exists()
    copy = tmp_path / "copy.txt"
    copy.write_bytes(data.read_bytes())
    r = san(copy, "h.txt")
    assert r.exit_code == 2 and "budget" in r.output, r.output
    assert not (tmp_path / "h.txt").exists()


def _race_worker(args):
    path, d, barrier = args
    led = Ledger(path, d)
    led.check(MetricDP(epsilon=3.0))  # both pass the early check ...
    barrier.wait()
    try:
        led.record(MetricDP(epsilon=3.0), force=False)  # ... only one passes the locked re-check
        return "ok"
    except BudgetExceededError:
        return "refused"


def test_parallel_releases_cannot_both_spend(tmp_path, data):
    d = str(tmp_path / "ledgers")
    Ledger(str(data), d).set_budget(5.0)
    ctx = mp.get_context("fork")
    with ctx.Manager() as m:
        barrier = m.Barrier(2)
        with ctx.Pool(2) as pool:
            res = pool.map(_race_worker, [(str(data), d, barrier)] * 2)
    assert sorted(res) == ["ok", "refused"]
    led = Ledger(str(data), d)
    assert len(led.releases()) == 1 and led.verify()


def _tiny_emb(tmp_path):
    words = ["good", "bad", "film", "movie", "great"]
    emb = tmp_path / "tiny.glove.txt"
    emb.write_text("".join(f"{w} {i} 0.5 {i % 2}\n" for i, w in enumerate(words)))
    return emb


def test_sanitize_reserves_its_budget_before_working(tmp_path, data, monkeypatch):
    """While a CLI release runs, its budget is reserved: a parallel release is refused, the
    running one completes and its release closes the reservation (no output ever exists
    whose spend is not in the ledger)."""
    emb = _tiny_emb(tmp_path)
    led = str(tmp_path / "ledgers")
    Ledger(str(data), led).set_budget(5.0)
    import textdp.cli.sanitize as san_mod

    real_run = san_mod._run
    seen = {}

    def run_with_parallel_attempt(*a, **k):
        real_reserve = a[-1]

        def reserve_then_parallel_attempt():  # the run reserves after reading its input ...
            real_reserve()
            other = Ledger(str(data), led)
            seen["open_during_run"] = len(other.open_reservations())
            with pytest.raises(BudgetExceededError):  # ... and a parallel release is refused meanwhile
                other.record(MetricDP(epsilon=3.0), command="parallel")

        return real_run(*a[:-1], reserve_then_parallel_attempt, **k)

    monkeypatch.setattr(san_mod, "_run", run_with_parallel_attempt)
    out = tmp_path / "o.txt"
    r = CliRunner().invoke(_app(), ["sanitize", str(data), "--embeddings", str(emb), "--ledger-dir", led,
                                    "--seed", "1", "-q", "--epsilon", "3", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert seen["open_during_run"] == 1 and out.exists()
    final = Ledger(str(data), led)
    assert [e["command"] for e in final.releases()] == ["sanitize --mechanism santext"]
    assert final.open_reservations() == [] and final.verify()
    assert final.releases()[0]["reservation"] == [e for e in final.entries() if e["type"] == "reservation"][0]["id"]


def test_a_failed_run_cancels_its_reservation(tmp_path, data, monkeypatch):
    emb = _tiny_emb(tmp_path)
    led = str(tmp_path / "ledgers")
    Ledger(str(data), led).set_budget(5.0)
    import textdp.cli.sanitize as san_mod

    def boom(*a, **k):
        a[-1]()  # the budget is reserved once the input is read ...
        raise KeyboardInterrupt  # ... then the run is interrupted

    monkeypatch.setattr(san_mod, "_run", boom)
    out = tmp_path / "o.txt"
    r = CliRunner().invoke(_app(), ["sanitize", str(data), "--embeddings", str(emb), "--ledger-dir", led,
                                    "--seed", "1", "-q", "--epsilon", "3", "-o", str(out)])
    assert r.exit_code != 0 and not out.exists()
    after = Ledger(str(data), led)
    assert after.open_reservations() == [] and after.releases() == []
    assert [e["type"] for e in after.entries()] == ["budget", "reservation", "cancel"]
    after.check(MetricDP(epsilon=4.9))  # the whole budget is available again


def test_an_abandoned_reservation_counts_as_spent(tmp_path, data):
    """A run killed without cleanup leaves its reservation open: it stays spent (safe side)."""
    d = tmp_path / "ledgers"
    led = Ledger(str(data), d)
    led.set_budget(5.0)
    rid = led.reserve(MetricDP(epsilon=3.0), command="killed run")
    with pytest.raises(BudgetExceededError):
        led.reserve(MetricDP(epsilon=3.0))
    s = led.summary()
    assert s["open_reservations"] == 1 and s["groups"]["metric/token"]["epsilon"] == pytest.approx(3.0)
    with pytest.raises(Exception, match="not open"):
        led.record(MetricDP(epsilon=1.0), reservation="no-such-id")
    assert led.cancel(rid) is not None and led.cancel(rid) is None  # closing twice is a no-op
    led.reserve(MetricDP(epsilon=3.0))  # fits again


def test_the_release_pays_only_the_excess_over_its_reservation(tmp_path, data):
    d = tmp_path / "ledgers"
    led = Ledger(str(data), d)
    led.set_budget(5.0)
    rid = led.reserve(MetricDP(epsilon=4.0))
    led.record(MetricDP(epsilon=4.5), reservation=rid)  # 4.5 <= 5: fits once the reservation is replaced
    rid2 = led.reserve(MetricDP(epsilon=0.4))
    with pytest.raises(BudgetExceededError):
        led.record(MetricDP(epsilon=0.6), reservation=rid2)  # 4.5 + 0.6 > 5
    assert len(led.open_reservations()) == 1


def test_budget_cli_refuses_unknown_datasets(tmp_path):
    runner = CliRunner()
    d = str(tmp_path / "led")
    for cmd in (["set", str(tmp_path / "nofile.txt"), "--epsilon", "1"], ["set", "nosuchds", "--epsilon", "1"],
                ["show", "nosuchds"], ["verify", "nosuchds"], ["show", str(tmp_path / "nofile.txt")]):
        r = runner.invoke(_app(), ["budget", *cmd, "--ledger-dir", d])
        assert r.exit_code == 2, (cmd, r.output)
        assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "led").exists() or not list((tmp_path / "led").glob("*.jsonl"))
    r = runner.invoke(_app(), ["budget", "set", "rotten-tomatoes", "--epsilon", "1", "--ledger-dir", d])
    assert r.exit_code == 0, r.output


def test_deleting_the_last_line_is_detected(tmp_path, data):
    d = tmp_path / "ledgers"
    led = Ledger(str(data), d)
    led.set_budget(5.0)
    led.record(MetricDP(epsilon=1.0))
    led.record(MetricDP(epsilon=2.0))
    assert led.verify()
    lines = led.path.read_text().splitlines(keepends=True)
    led.path.write_text("".join(lines[:-1]))  # the chain of the rest is still valid
    assert not led.verify()
    r = CliRunner().invoke(_app(), ["budget", "verify", str(data), "--ledger-dir", str(d)])
    assert r.exit_code == 2 and "head" in r.output
    led.path.unlink()  # deleting the whole ledger leaves the head behind
    assert not Ledger(str(data), d).verify()


def test_bad_input_creates_no_ledger_entry(tmp_path):
    """The input is read and validated before the budget is reserved: a refused input leaves
    the ledger untouched (no reservation/cancel pair, no new ledger file)."""
    emb = _tiny_emb(tmp_path)
    led = tmp_path / "ledgers"
    for name, content in (("empty.txt", b""), ("bin.txt", b"\x00\x01\x02 abc\n"), ("latin.txt", "café\n".encode("latin-1"))):
        f = tmp_path / name
        f.write_bytes(content)
        r = CliRunner().invoke(_app(), ["sanitize", str(f), "--embeddings", str(emb), "--ledger-dir", str(led),
                                        "--seed", "1", "-q", "--epsilon", "3", "-o", str(tmp_path / ("o-" + name))])
        assert r.exit_code == 2, (name, r.output)
    assert not led.exists() or not list(led.glob("*.jsonl"))


def _spent_ledger(data, d, epsilon):
    """The ledger of ``data`` in folder ``d`` with a budget of 4 and one release of ``epsilon``."""
    led = Ledger(str(data), d)
    led.set_budget(4.0)
    led.record(MetricDP(epsilon=epsilon))
    return led


def _edit_spend(led):
    """Rewrite the recorded epsilon of every release to 0.1 (the chain then breaks)."""
    led.path.write_text(led.path.read_text().replace('"epsilon": 3.0', '"epsilon": 0.1'))


def test_an_edited_ledger_refuses_every_write(tmp_path, data):
    """A release never relies on an edited spend and never rewrites .head over the evidence."""
    d = tmp_path / "ledgers"
    led = _spent_ledger(data, d, 3.0)
    _edit_spend(led)
    assert not led.verify()
    head = led.head_path.read_text()
    for write in (lambda: led.record(MetricDP(epsilon=2.0)), lambda: led.reserve(MetricDP(epsilon=2.0)),
                  lambda: led.set_budget(10.0), lambda: led.check(MetricDP(epsilon=2.0)),
                  lambda: led.record(MetricDP(epsilon=2.0), force=True)):
        with pytest.raises(InputError, match="hash-chain"):
            write()
    assert led.head_path.read_text() == head and not led.verify()


def test_a_deleted_ledger_refuses_releases_and_keeps_its_head(tmp_path, data):
    d = tmp_path / "ledgers"
    led = _spent_ledger(data, d, 3.0)
    head = led.head_path.read_text()
    led.path.unlink()
    led2 = Ledger(str(data), d)
    with pytest.raises(InputError, match="deleted"):
        led2.reserve(MetricDP(epsilon=3.0))
    assert not led2.path.exists() and led2.head_path.read_text() == head
    r = CliRunner().invoke(_app(), ["budget", "verify", str(data), "--ledger-dir", str(d)])
    assert r.exit_code == 2


def test_sanitize_cli_refuses_a_tampered_ledger(tmp_path, data):
    emb = _tiny_emb(tmp_path)
    d = tmp_path / "ledgers"
    led = _spent_ledger(data, d, 3.0)
    _edit_spend(led)
    before = led.path.read_bytes()
    r = CliRunner().invoke(_app(), ["sanitize", str(data), "--embeddings", str(emb), "--ledger-dir", str(d),
                                    "--seed", "1", "-q", "--epsilon", "2", "-o", str(tmp_path / "e.txt")])
    assert r.exit_code == 2 and "hash-chain" in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "e.txt").exists() and led.path.read_bytes() == before


def test_an_output_inside_the_ledger_folder_is_refused(tmp_path, data):
    emb = _tiny_emb(tmp_path)
    d = tmp_path / "ledgers"
    led = _spent_ledger(data, d, 1.0)
    before = led.path.read_bytes()
    for extra in ([], ["--no-ledger"]):
        r = CliRunner().invoke(_app(), ["sanitize", str(data), "--embeddings", str(emb), "--ledger-dir", str(d),
                                        "--seed", "1", "-q", "--epsilon", "1", "-o", str(led.path), "--overwrite",
                                        *extra])
        assert r.exit_code == 2 and "ledger folder" in r.output, r.output
    assert led.path.read_bytes() == before and led.verify()
    r = CliRunner().invoke(_app(), ["topics", "train", str(data), "-k", "2", "--ledger-dir", str(d),
                                    "-o", str(d / "model"), "-q"])
    assert r.exit_code == 2 and "ledger folder" in r.output, r.output
    assert not (d / "model").exists()


def test_budget_refuses_a_folder(tmp_path):
    for cmd in (["set", str(tmp_path), "--epsilon", "3"], ["show", str(tmp_path)]):
        r = CliRunner().invoke(_app(), ["budget", *cmd, "--ledger-dir", str(tmp_path / "led")])
        assert r.exit_code == 2 and "folder" in r.output, r.output
    assert not (tmp_path / "led").exists()


def test_a_deleted_ledger_is_detected_under_another_name_of_the_dataset(tmp_path, data):
    d = tmp_path / "ledgers"
    led = _spent_ledger(data, d, 3.0)
    led.path.unlink()  # .head stays, under the first file name used
    copy = tmp_path / "other-name.txt"
    copy.write_bytes(data.read_bytes())
    led2 = Ledger(str(copy), d)
    assert not led2.verify()
    with pytest.raises(InputError, match="deleted"):
        led2.reserve(MetricDP(epsilon=3.0))
