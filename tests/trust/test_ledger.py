"""Composition rules, the budget ledger and `textdp budget`."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from textdp.accounting import RDP, UMLDP, ApproxDP, LocalDP, MetricDP, NoPrivacy, PureDP
from textdp.accounting.composition import (
    compose,
    compose_by_group,
    group_key,
    metric_to_document,
    rdp_to_epsilon,
    spent_epsilon,
)
from textdp.accounting.ledger import Ledger, dataset_id, hash_input
from textdp.errors import BudgetExceededError, ParameterError


# ------------------------------------------------------------------ composition


def test_pure_epsilons_add():
    g = compose([PureDP(epsilon=1.0, unit="document"), PureDP(epsilon=0.5, unit="document")])
    assert isinstance(g, PureDP) and g.epsilon == pytest.approx(1.5) and g.unit == "document"
    assert isinstance(compose([LocalDP(epsilon=1.0), LocalDP(epsilon=2.0)]), LocalDP)


def test_approx_adds_epsilon_and_delta():
    g = compose([ApproxDP(epsilon=1.0, delta=1e-6), PureDP(epsilon=0.5)])
    assert isinstance(g, ApproxDP)
    assert g.epsilon == pytest.approx(1.5) and g.delta == pytest.approx(1e-6)


def test_metric_per_token_adds_and_umldp_adds_epsilon0():
    g = compose([MetricDP(epsilon=3.0), MetricDP(epsilon=2.0)])
    assert isinstance(g, MetricDP) and g.epsilon == 5.0 and g.unit == "token"
    u = compose([UMLDP(epsilon=1.0, epsilon0=0.2), MetricDP(epsilon=2.0)])
    assert isinstance(u, UMLDP) and u.epsilon == 3.0 and u.epsilon0 == pytest.approx(0.2)


def test_groups_are_never_mixed():
    assert group_key(MetricDP(epsilon=1)) != group_key(PureDP(epsilon=1))
    both = compose([MetricDP(epsilon=1.0, metric="glove"), MetricDP(epsilon=2.0, metric="minilm")])
    assert both.epsilon == 3.0 and both.metric == "max(glove, minilm)"  # different metrics still add
    assert group_key(PureDP(epsilon=1, unit="token")) != group_key(PureDP(epsilon=1, unit="document"))
    with pytest.raises(ParameterError):
        compose([MetricDP(epsilon=1.0), PureDP(epsilon=1.0)])
    groups = compose_by_group([MetricDP(epsilon=1.0), PureDP(epsilon=1.0), MetricDP(epsilon=1.0)])
    assert len(groups) == 2 and groups["metric/token"].epsilon == 2.0


def test_rdp_composes_orderwise_and_converts():
    # Gaussian mechanism RDP: alpha / (2 sigma^2); two of them = one with sigma / sqrt(2)
    orders = (2.0, 4.0, 8.0, 16.0, 32.0)
    one = RDP(orders=orders, epsilons=tuple(a / 2 for a in orders))
    two = compose([one, one])
    assert isinstance(two, RDP) and two.epsilons == tuple(a for a in orders)
    eps2 = rdp_to_epsilon(two.orders, two.epsilons, 1e-5)
    eps1 = rdp_to_epsilon(one.orders, one.epsilons, 1e-5)
    assert eps1 < eps2 < 2 * eps1 + 1  # composition costs, but less than doubling + slack
    mixed = compose([one, PureDP(epsilon=0.1)])
    assert isinstance(mixed, RDP)
    assert mixed.epsilon_at(2.0) == pytest.approx(1.0 + min(0.1, 2 * 0.01 / 2))


def test_no_privacy_poisons_its_group():
    g = compose([NoPrivacy(), NoPrivacy()])
    assert isinstance(g, NoPrivacy)
    assert math.isinf(spent_epsilon(g)[0])


def test_metric_to_document():
    d = metric_to_document(MetricDP(epsilon=0.5), max_tokens=10, diameter=2.0)
    assert isinstance(d, PureDP) and d.epsilon == pytest.approx(10.0) and d.unit == "document"


# ------------------------------------------------------------------ ledger


@pytest.fixture
def ledger(tmp_path):
    return Ledger("toy-dataset", tmp_path / "ledgers")


def test_ledger_refuses_an_overspend_with_the_numbers(ledger):
    ledger.set_budget(5.0)
    ledger.record(MetricDP(epsilon=3.0), card={"mechanism": "santext"}, command="sanitize")
    with pytest.raises(BudgetExceededError) as err:
        ledger.record(MetricDP(epsilon=3.0), command="sanitize")
    msg = str(err.value)
    assert "ε=3" in msg and "3 already spent" in msg and "remaining 2" in msg and "--force" in msg
    assert len(ledger.releases()) == 1  # refused: nothing appended
    # a different group has its own cap
    ledger.record(PureDP(epsilon=4.0, unit="document"), command="topics train")
    # forcing appends and marks the entry
    e = ledger.record(MetricDP(epsilon=3.0), command="sanitize", force=True)
    assert e["forced"] is True
    s = ledger.summary()
    assert s["groups"]["metric/token"]["epsilon"] == 6.0
    assert s["groups"]["metric/token"]["remaining_epsilon"] == -1.0
    assert s["releases"] == 3 and s["chain_ok"]


def test_ledger_exactly_at_budget_is_allowed(ledger):
    ledger.set_budget(1.0)
    for _ in range(10):
        ledger.record(PureDP(epsilon=0.1))
    with pytest.raises(BudgetExceededError):
        ledger.record(PureDP(epsilon=0.1))


def test_ledger_no_privacy_refused_under_a_budget(ledger):
    ledger.record(NoPrivacy(reason="identity"))  # no budget: allowed
    ledger.set_budget(100.0)
    with pytest.raises(BudgetExceededError):
        ledger.record(NoPrivacy(reason="identity"))


def test_ledger_delta_budget(ledger):
    ledger.set_budget(10.0, delta=1e-6)
    ledger.record(ApproxDP(epsilon=1.0, delta=6e-7))
    with pytest.raises(BudgetExceededError):
        ledger.record(ApproxDP(epsilon=1.0, delta=6e-7))


def test_ledger_hash_chain_detects_edits(ledger, tmp_path):
    ledger.set_budget(5.0)
    ledger.record(MetricDP(epsilon=1.0), input_path=None)
    ledger.record(MetricDP(epsilon=1.0))
    assert ledger.verify()
    lines = ledger.path.read_text().splitlines()
    e = json.loads(lines[1])
    e["guarantee"]["epsilon"] = 0.001  # someone "cheaper" rewrites history
    lines[1] = json.dumps(e, sort_keys=True)
    ledger.path.write_text("\n".join(lines) + "\n")
    assert not ledger.verify()
    ledger.path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")  # deleting a line
    assert not ledger.verify()


def test_ledger_records_input_hash_and_card(ledger, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("hello\n")
    e = ledger.record(MetricDP(epsilon=1.0), card={"seed": {"seeded": True}}, input_path=f)
    assert e["input_sha256"] == hash_input(f) and len(e["input_sha256"]) == 64
    assert e["seeded"] is True and e["card"]["seed"]["seeded"] is True


def test_dataset_ids(tmp_path):
    a = tmp_path / "a" / "data.csv"
    b = tmp_path / "b" / "data.csv"
    for p in (a, b):
        p.parent.mkdir()
        p.write_text("text\nx\n")
    # keyed by content: the same bytes in two folders are one dataset, a changed file is another
    assert dataset_id(a) == dataset_id(b) and dataset_id(a).startswith("data.csv-")
    b.write_text("text\ny\n")
    assert dataset_id(a) != dataset_id(b)
    assert dataset_id("rotten-tomatoes") == "rotten-tomatoes" == dataset_id("Rotten-Tomatoes")
    with pytest.raises(ParameterError):
        dataset_id("bad name with spaces")


def test_ledger_bad_budget(ledger):
    for bad in (0, -1, float("inf"), "x"):
        with pytest.raises(ParameterError):
            ledger.set_budget(bad)


# ------------------------------------------------------------------ CLI


def _app():
    from textdp.cli.main import app

    return app


def test_budget_cli_set_show_json(tmp_path):
    runner = CliRunner()
    d = str(tmp_path / "led")
    toy = tmp_path / "toy.txt"
    toy.write_text("a b\nc d\n")
    toy = str(toy)
    r = runner.invoke(_app(), ["budget", "set", toy, "--epsilon", "4", "--ledger-dir", d])
    assert r.exit_code == 0, r.output
    Ledger(toy, d).record(MetricDP(epsilon=3.0), command="sanitize")
    r = runner.invoke(_app(), ["budget", "show", toy, "--ledger-dir", d, "--json"])
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["budget"]["epsilon"] == 4.0
    assert s["groups"]["metric/token"]["remaining_epsilon"] == 1.0
    assert s["release_log"][0]["command"] == "sanitize"
    r = runner.invoke(_app(), ["budget", "show", toy, "--ledger-dir", d])
    assert r.exit_code == 0 and "metric/token" in r.stdout
    r = runner.invoke(_app(), ["budget", "verify", toy, "--ledger-dir", d])
    assert r.exit_code == 0 and "hash chain ok" in r.stdout


def test_budget_cli_bad_epsilon_is_one_line_exit_2(tmp_path):
    r = CliRunner().invoke(_app(), ["budget", "set", "rotten-tomatoes", "--epsilon", "-1", "--ledger-dir", str(tmp_path)])
    assert r.exit_code == 2
    assert "Traceback" not in r.output and "positive" in r.output


def _one_line_error(r, *words):
    assert r.exit_code == 2, r.output
    msg = r.output.strip()
    assert len(msg.splitlines()) == 1 and msg.startswith("error:") and "Traceback" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


@pytest.mark.parametrize("cmd", [["show"], ["show", "--json"], ["verify"], ["set", "--epsilon", "3"]])
@pytest.mark.parametrize("how", ["option", "env", "below"])
def test_budget_cli_refuses_a_ledger_dir_that_is_a_file(tmp_path, monkeypatch, cmd, how):
    data = tmp_path / "notes.csv"
    data.write_text("text\nhello world\n")
    in_way = tmp_path / "notes.txt"
    in_way.write_text("x\n")
    args = ["budget", cmd[0], str(data), *cmd[1:]]
    if how == "env":
        monkeypatch.setenv("TEXTDP_LEDGER_DIR", str(in_way))
    else:
        args += ["--ledger-dir", str(in_way if how == "option" else in_way / "x")]
    r = CliRunner().invoke(_app(), args)
    _one_line_error(r, "cannot write", "is a file, not a folder" if how == "below" else "a file of that name is in the way")
    assert in_way.read_text() == "x\n"


def test_budget_cli_deleted_ledger_with_its_head_is_an_error_not_an_empty_ledger(tmp_path):
    d = tmp_path / "led"
    toy = tmp_path / "toy.txt"
    toy.write_text("a b\nc d\n")
    led = Ledger(str(toy), d)
    led.set_budget(4.0)
    led.record(MetricDP(epsilon=3.0), command="sanitize")
    runner = CliRunner()
    r = runner.invoke(_app(), ["budget", "show", str(toy), "--ledger-dir", str(d)])
    assert r.exit_code == 0 and "1 release" in r.stdout and "1 releases" not in r.stdout, r.output
    r = runner.invoke(_app(), ["budget", "verify", str(toy), "--ledger-dir", str(d)])
    assert r.exit_code == 0 and "2 entries" in r.stdout, r.output
    led.path.unlink()  # .head is kept
    for cmd in (["show"], ["show", "--json"], ["verify"]):
        r = runner.invoke(_app(), ["budget", cmd[0], str(toy), "--ledger-dir", str(d), *cmd[1:]])
        msg = _one_line_error(r, "is missing but its .head", "deleted", "unknown", "backup")
        assert "no releases" not in r.output and "edited" not in msg
    # the same under another file name of the same content (the ledger keeps its first name)
    copy = tmp_path / "copy.txt"
    copy.write_bytes(toy.read_bytes())
    r = runner.invoke(_app(), ["budget", "show", str(copy), "--ledger-dir", str(d)])
    _one_line_error(r, "is missing but its .head")


def test_budget_cli_open_reservations_title_is_singular_for_one(tmp_path):
    d = tmp_path / "led"
    toy = tmp_path / "toy.txt"
    toy.write_text("a b\n")
    Ledger(str(toy), d).reserve(MetricDP(epsilon=1.0), command="sanitize")
    r = CliRunner().invoke(_app(), ["budget", "show", str(toy), "--ledger-dir", str(d)])
    assert r.exit_code == 0, r.output
    assert "1 open reservation " in r.stdout and "1 open reservations" not in r.stdout


@pytest.mark.parametrize("cmd", [["set", "--epsilon", "3"], ["show"], ["verify"]])
def test_budget_cli_refuses_a_named_pipe(tmp_path, cmd):
    import os

    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    d = tmp_path / "led"
    r = CliRunner().invoke(_app(), ["budget", cmd[0], str(pipe), "--ledger-dir", str(d), *cmd[1:]])
    _one_line_error(r, "not a regular file")
    assert not d.exists() or not list(d.iterdir())


def test_ledger_reads_seed_mode_from_a_card_randomness_entry(ledger):
    e = ledger.record(MetricDP(epsilon=1.0), card={"randomness": {"seeded": True, "note": "not for release"}})
    assert e["seeded"] is True


@pytest.mark.slow
def test_sanitize_cli_refuses_an_overspend(tmp_path):
    _sanitize_overspend(tmp_path)


def _sanitize_overspend(tmp_path):
    """`textdp sanitize` appends to the ledger and refuses a release over the budget unless --force."""
    from textdp.embeddings import Embeddings

    words = ["good", "great", "bad", "awful", "film", "movie"]
    emb = tmp_path / "tiny.glove.txt"
    vecs = [[1, 0, 0], [0.9, 0.1, 0], [-1, 0, 0], [-0.9, -0.1, 0], [0, 1, 0], [0, 0.95, 0.05]]
    emb.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in zip(words, vecs)))
    data = tmp_path / "reviews.txt"
    data.write_text("good film\nbad movie\ngreat film\n")
    led = str(tmp_path / "ledgers")
    runner = CliRunner()
    base = ["sanitize", str(data), "--embeddings", str(emb), "--ledger-dir", led, "--seed", "1", "-q"]
    assert runner.invoke(_app(), ["budget", "set", str(data), "--epsilon", "5", "--ledger-dir", led]).exit_code == 0
    r = runner.invoke(_app(), base + ["--epsilon", "3", "-o", str(tmp_path / "a.txt")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(_app(), base + ["--epsilon", "3", "-o", str(tmp_path / "b.txt")])
    assert r.exit_code == 2 and "budget" in r.output and "remaining 2" in r.output, r.output
    assert not (tmp_path / "b.txt").exists()  # refused before any output
    r = runner.invoke(_app(), base + ["--epsilon", "3", "-o", str(tmp_path / "c.txt"), "--force"])
    assert r.exit_code == 0, r.output
    s = Ledger(str(data), led).summary()
    assert s["releases"] == 2 and s["groups"]["metric/token"]["epsilon"] == 6.0
    assert Ledger(str(data), led).releases()[-1]["forced"] is True
    assert Ledger(str(data), led).releases()[0]["card"]["mechanism"]


def test_sanitize_cli_ledger_integration(tmp_path):
    _sanitize_overspend(tmp_path)
