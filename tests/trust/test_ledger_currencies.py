"""The ledger charges every term of every guarantee (issue 12, item 5).

* SanText+ with p = 0 (epsilon0 = inf) is refused under any finite budget;
* UMLDP's and MetricDP's additive epsilon0 is charged (summed over releases);
* a budget names its currency; a release in a currency no budget names is refused
  unless forced, and a forced release says so in the ledger, on the terminal and on the card;
* a budget without a currency (every ledger written before currencies) still caps every currency;
* ``budget show`` composes the plain-DP worst case per token and per document.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from textdp.accounting import UMLDP, LocalDP, MetricDP, NoPrivacy, PureDP
from textdp.accounting.composition import parse_currency
from textdp.accounting.ledger import CurrencyNotBudgetedError, Ledger, UnboundedTermError
from textdp.errors import BudgetExceededError, ParameterError

P03 = math.log(1 / 0.3)  # SanText+'s epsilon0 at the default p = 0.3


def _app():
    from textdp.cli.main import app

    return app


@pytest.fixture
def ledger(tmp_path):
    return Ledger("toy-dataset", tmp_path / "ledgers")


def _one_line_error(r, *words):
    assert r.exit_code == 2, r.output
    msg = r.output.strip()
    assert len(msg.splitlines()) == 1 and msg.startswith("error:") and "Traceback" not in msg, msg
    for w in words:
        assert w in msg, msg
    return msg


# ------------------------------------------------------------------ unbounded terms


@pytest.mark.parametrize("budget", [0.5, 3.0, 1e9])
@pytest.mark.parametrize("currency", [None, "metric/token", "metric-token"])
def test_santext_plus_with_p0_is_refused_under_any_finite_budget(ledger, budget, currency):
    """The issue's case: a p = 0 release (epsilon0 = inf) was accepted under a budget of 3 at cost 2."""
    ledger.set_budget(budget, currency=currency)
    p0 = UMLDP(epsilon=min(2.0, budget / 2), epsilon0=math.inf)
    for attempt in (lambda: ledger.record(p0, command="sanitize --mechanism santext+"),
                    lambda: ledger.reserve(p0, command="sanitize --mechanism santext+"),
                    lambda: ledger.check(p0)):
        with pytest.raises(UnboundedTermError) as err:
            attempt()
        msg = str(err.value)
        assert "p = 0" in msg and "epsilon0" in msg and "unprotected" in msg and "\n" not in msg
    assert ledger.releases() == [] and ledger.open_reservations() == []  # nothing appended
    assert ledger.refusal(UMLDP(epsilon=min(2.0, budget / 2), epsilon0=budget / 2)) is None  # p > 0 fits


def test_unbounded_terms_are_recorded_without_a_budget_and_poison_the_spend(ledger):
    e = ledger.record(UMLDP(epsilon=2.0, epsilon0=math.inf))  # no budget: recorded as before
    assert e["forced"] is False
    s = ledger.summary()
    assert math.isinf(s["groups"]["metric/token"]["epsilon0"])
    ledger.set_budget(100.0)
    with pytest.raises(BudgetExceededError, match="ε₀"):  # the spent epsilon0 is already infinite
        ledger.record(UMLDP(epsilon=1.0, epsilon0=P03))
    with pytest.raises(UnboundedTermError, match="no privacy guarantee"):
        ledger.record(NoPrivacy(reason="identity"))


# ------------------------------------------------------------------ epsilon0 is charged


def test_epsilon0_is_charged_and_summed(ledger, tmp_path):
    a = UMLDP(epsilon=1.0, epsilon0=P03)
    b = MetricDP(epsilon=0.5, epsilon0=2e-5)  # SanText's sampler cost is charged as well
    ledger.record(a, command="sanitize --mechanism santext+")
    ledger.record(b, command="sanitize --mechanism santext")
    g = ledger.summary()["groups"]["metric/token"]
    assert g["epsilon"] == pytest.approx(1.5)
    assert g["epsilon0"] == pytest.approx(P03 + 2e-5)
    # the same through `textdp budget show --json` (a plain name with a ledger made by the Python API)
    r = CliRunner().invoke(_app(), ["budget", "show", "toy-dataset", "--ledger-dir", str(ledger.directory), "--json"])
    assert r.exit_code == 0, r.output
    js = json.loads(r.stdout)["groups"]["metric/token"]
    assert js["epsilon0"] == pytest.approx(P03 + 2e-5) and js["epsilon"] == pytest.approx(1.5)


def test_epsilon0_over_its_cap_is_refused_although_epsilon_fits(ledger):
    # a currency-less budget of 3 caps epsilon0 by the same number: two SanText+ p = 0.1 releases
    # cost epsilon 2 <= 3 but epsilon0 2 ln 10 = 4.6 > 3
    ledger.set_budget(3.0)
    p01 = UMLDP(epsilon=1.0, epsilon0=math.log(10))
    ledger.record(p01)
    with pytest.raises(BudgetExceededError) as err:
        ledger.record(p01)
    msg = str(err.value)
    assert "ε₀=2.303" in msg and "metric/token" in msg and "remaining 0.6974" in msg, msg
    assert len(ledger.releases()) == 1
    # an explicit --epsilon0 cap in the metric currency
    ledger.set_budget(10.0, currency="metric/token", epsilon0=5.0)
    ledger.record(p01)  # epsilon0 4.6 <= 5
    with pytest.raises(BudgetExceededError, match="ε₀"):
        ledger.record(p01)
    s = ledger.summary()["groups"]["metric/token"]
    assert s["remaining_epsilon0"] == pytest.approx(5.0 - 2 * math.log(10))
    assert s["remaining_epsilon"] == pytest.approx(8.0)


# ------------------------------------------------------------------ currencies


def test_parse_currency_names_and_aliases():
    assert parse_currency("metric/token") == parse_currency("metric-token") == "metric/token"
    assert parse_currency("dp-document") == parse_currency("dp/document") == "dp/document/replace-one"
    assert parse_currency("ldp-token") == "dp/token/replace-one"  # LDP shares DP's currency on a unit
    assert parse_currency("dp-document-add-remove") == "dp/document/add-remove"
    assert parse_currency(" DP/Document/Replace-One ") == "dp/document/replace-one"
    for bad in ("", "euros", "metric", "dp/document/swap", "none", "metric/token/x", "dp//x"):
        with pytest.raises(ParameterError):
            parse_currency(bad)


def test_a_currency_no_budget_names_is_refused_unless_forced(ledger):
    ledger.set_budget(5.0, currency="metric/token")
    ledger.record(MetricDP(epsilon=1.0))
    doc = PureDP(epsilon=0.1, unit="document")
    with pytest.raises(CurrencyNotBudgetedError) as err:
        ledger.record(doc, command="topics train")
    msg = str(err.value)
    assert "spends currency dp/document/replace-one" in msg and "names only metric/token" in msg, msg
    with pytest.raises(CurrencyNotBudgetedError):
        ledger.reserve(LocalDP(epsilon=1.0, unit="token"))
    assert len(ledger.releases()) == 1 and not ledger.open_reservations()
    e = ledger.record(doc, command="topics train", force=True)
    assert e["forced"] is True and "dp/document/replace-one" in e["forced_reason"]
    rid = ledger.reserve(doc, force=True)
    assert "names only metric/token" in ledger.forced_reason(rid)
    ok = ledger.reserve(MetricDP(epsilon=1.0))  # a budgeted currency within its cap is not forced
    assert ledger.forced_reason(ok) is None
    s = ledger.summary()
    assert s["groups"]["dp/document/replace-one"]["budgeted"] is False
    assert s["groups"]["dp/document/replace-one"]["budget"] is None
    # naming the currency makes it budgeted
    ledger.set_budget(1.0, currency="dp-document")
    ledger.record(doc)
    assert ledger.summary()["groups"]["dp/document/replace-one"]["budgeted"] is True


def test_a_currency_less_budget_caps_every_currency_as_before(ledger):
    # an entry written before currencies existed: no "currency" or "epsilon0" key at all
    with ledger.lock():
        ledger._append({"type": "budget", "time": "2026-01-01T00:00:00+00:00", "dataset": ledger.dataset,
                        "epsilon": 2.0, "delta": None, "input_sha256": None})
    assert ledger.budget().currency is None and ledger.budgets() == {None: ledger.budget()}
    ledger.record(MetricDP(epsilon=1.5))
    ledger.record(PureDP(epsilon=1.5, unit="document"))  # another currency: capped separately, not refused
    ledger.record(LocalDP(epsilon=2.0, unit="token"))
    with pytest.raises(BudgetExceededError, match="remaining 0.5"):
        ledger.record(MetricDP(epsilon=1.0))
    with pytest.raises(BudgetExceededError):
        ledger.record(PureDP(epsilon=1.0, unit="document"))
    # a currency's own budget overrides the wildcard for that currency only
    ledger.set_budget(4.0, currency="metric/token")
    ledger.record(MetricDP(epsilon=1.0))
    with pytest.raises(BudgetExceededError):
        ledger.record(PureDP(epsilon=1.0, unit="document"))
    assert ledger.verify()


def test_budget_cli_set_with_and_without_currency(tmp_path):
    runner = CliRunner()
    d = str(tmp_path / "led")
    toy = tmp_path / "toy.txt"
    toy.write_text("a b\nc d\n")
    # the README's command: no currency = every currency
    r = runner.invoke(_app(), ["budget", "set", str(toy), "--epsilon", "5", "--ledger-dir", d])
    assert r.exit_code == 0 and "every currency" in r.stdout, r.output
    r = runner.invoke(_app(), ["budget", "set", str(toy), "--epsilon", "2", "--epsilon0", "1.5", "--currency",
                               "metric-token", "--ledger-dir", d, "--json"])
    assert r.exit_code == 0, r.output
    budgets = json.loads(r.stdout)["budgets"]
    assert budgets["*"]["epsilon"] == 5.0 and budgets["*"]["currency"] is None
    assert budgets["metric/token"] == {"epsilon": 2.0, "delta": None, "currency": "metric/token", "epsilon0": 1.5}
    before = Ledger(str(toy), d).path.read_bytes()
    for bad, words in ((["--currency", "euros"], ("unknown currency", "metric/token")),
                       (["--currency", "metric/token", "--delta", "1e-6"], ("--delta", "no delta")),
                       (["--currency", "dp-document", "--epsilon0", "1"], ("--epsilon0",)),
                       (["--epsilon0", "-1"], ("epsilon0", "positive"))):
        r = runner.invoke(_app(), ["budget", "set", str(toy), "--epsilon", "1", *bad, "--ledger-dir", d])
        _one_line_error(r, *words)
    assert Ledger(str(toy), d).path.read_bytes() == before  # nothing written
    r = runner.invoke(_app(), ["budget", "set", "--help"])
    assert r.exit_code == 0 and "--currency" in r.stdout and "--epsilon0" in r.stdout


# ------------------------------------------------------------------ worst case in plain DP


def test_worst_case_figures_are_composed(ledger, tmp_path):
    ledger.record(MetricDP(epsilon=1.0, epsilon0=1e-5, worst_case_epsilon=4.0))
    ledger.record(UMLDP(epsilon=1.0, epsilon0=P03, worst_case_epsilon=6.5))
    ledger.record(PureDP(epsilon=0.5, unit="document"))
    ledger.record(LocalDP(epsilon=0.25, unit="token"))
    s = ledger.summary(document_tokens=20)
    m = s["groups"]["metric/token"]
    assert m["worst_case_epsilon_per_token"] == pytest.approx(10.5)
    assert m["worst_case_epsilon_per_document"] == pytest.approx(210.0)  # L x per token
    d = s["groups"]["dp/document/replace-one"]
    assert d["worst_case_epsilon_per_token"] == 0.5 and d["worst_case_epsilon_per_document"] == 0.5
    t = s["groups"]["dp/token/replace-one"]
    assert t["worst_case_epsilon_per_token"] == 0.25 and t["worst_case_epsilon_per_document"] == pytest.approx(5.0)
    assert s["worst_case"]["per_token"] == pytest.approx(11.25)
    assert s["worst_case"]["per_document"] == pytest.approx(215.5) and s["worst_case"]["document_tokens"] == 20
    runner = CliRunner()
    base = ["budget", "show", "toy-dataset", "--ledger-dir", str(ledger.directory)]
    js = json.loads(runner.invoke(_app(), [*base, "--json", "--document-tokens", "20"]).stdout)
    assert js["worst_case"]["per_document"] == pytest.approx(215.5)
    assert js["groups"]["metric/token"]["worst_case_epsilon_per_token"] == pytest.approx(10.5)
    js = json.loads(runner.invoke(_app(), [*base, "--json"]).stdout)
    assert "per_document" not in js["worst_case"]  # no length given: no per-document figure
    r = runner.invoke(_app(), [*base, "--document-tokens", "20"])
    assert r.exit_code == 0 and "11.25 per token" in r.stdout and "215.5 per document of 20 tokens" in r.stdout, r.output
    _one_line_error(runner.invoke(_app(), [*base, "--document-tokens", "0"]), "--document-tokens")
    # a release whose worst case was not computed: the composed figure is unknown, and said so
    ledger.record(MetricDP(epsilon=1.0))
    s = ledger.summary()
    assert s["groups"]["metric/token"]["worst_case_epsilon_per_token"] is None
    assert "not computed for 1 of 3 releases" in s["groups"]["metric/token"]["worst_case_note"]
    assert s["worst_case"]["per_token"] is None
    r = runner.invoke(_app(), base)
    assert r.exit_code == 0 and "not computed" in r.stdout, r.output
    # an unbounded worst case (SanText+ keeps non-sensitive words) is infinite, in JSON too
    ledger.record(UMLDP(epsilon=1.0, epsilon0=P03, worst_case_epsilon=math.inf))
    g = [x for x in ledger.guarantees() if getattr(x, "worst_case_epsilon", None) is not None]
    assert len(g) == 3


def test_infinite_worst_case_composes_to_infinity(ledger):
    ledger.record(UMLDP(epsilon=1.0, epsilon0=P03, worst_case_epsilon=math.inf))
    ledger.record(MetricDP(epsilon=1.0, worst_case_epsilon=3.0))
    s = ledger.summary(document_tokens=5)
    assert math.isinf(s["groups"]["metric/token"]["worst_case_epsilon_per_token"])
    assert math.isinf(s["worst_case"]["per_document"])
    r = CliRunner().invoke(_app(), ["budget", "show", "toy-dataset", "--ledger-dir", str(ledger.directory), "--json"])
    assert json.loads(r.stdout)["worst_case"]["per_token"] == "inf"


# ------------------------------------------------------------------ through `textdp sanitize`


def _sanitize(tmp_path, small_glove_file, out, *extra):
    data = tmp_path / "reviews.txt"
    if not data.exists():
        data.write_text("good film\nbad movie\ngreat film\n")
    led = str(tmp_path / "ledgers")
    r = CliRunner().invoke(_app(), ["sanitize", str(data), "--embeddings", str(small_glove_file), "--ledger-dir", led,
                                    "--seed", "1", "-q", "-o", str(tmp_path / out), *extra])
    return r, data, led


def test_sanitize_cli_santext_plus_p0_refused_under_a_budget(tmp_path, small_glove_file):
    data = tmp_path / "reviews.txt"
    data.write_text("good film\nbad movie\ngreat film\n")
    led = str(tmp_path / "ledgers")
    assert CliRunner().invoke(_app(), ["budget", "set", str(data), "--epsilon", "3", "--ledger-dir", led]).exit_code == 0
    r, _, _ = _sanitize(tmp_path, small_glove_file, "p0.txt", "--mechanism", "santext+", "--p", "0", "--epsilon", "2")
    _one_line_error(r, "p = 0", "epsilon0", "unprotected")
    assert not (tmp_path / "p0.txt").exists() and Ledger(str(data), led).releases() == []


def test_sanitize_cli_unbudgeted_currency_refused_then_forced_on_card(tmp_path, small_glove_file):
    data = tmp_path / "reviews.txt"
    data.write_text("good film\nbad movie\ngreat film\n")
    led = str(tmp_path / "ledgers")
    r = CliRunner().invoke(_app(), ["budget", "set", str(data), "--epsilon", "3", "--currency", "dp-document",
                                    "--ledger-dir", led])
    assert r.exit_code == 0, r.output
    r, _, _ = _sanitize(tmp_path, small_glove_file, "a.txt", "--epsilon", "1")
    _one_line_error(r, "spends currency metric/token", "names only dp/document/replace-one", "--force")
    assert not (tmp_path / "a.txt").exists() and Ledger(str(data), led).releases() == []
    r, _, _ = _sanitize(tmp_path, small_glove_file, "b.txt", "--epsilon", "1", "--force")
    assert r.exit_code == 0, r.output
    warn = [ln for ln in r.stderr.splitlines() if "--force" in ln]
    assert len(warn) == 1 and "warning" in warn[0] and "metric/token" in warn[0], r.stderr
    card = json.loads((tmp_path / "b.txt.card.json").read_text())
    assert card["forced"] is True and "names only dp/document/replace-one" in card["forced_reason"]
    (entry,) = Ledger(str(data), led).releases()
    assert entry["forced"] is True and entry["card"]["forced"] is True
    # a release that fits is neither warned about nor marked
    r = CliRunner().invoke(_app(), ["budget", "set", str(data), "--epsilon", "10", "--currency", "metric/token",
                                    "--ledger-dir", led])
    r, _, _ = _sanitize(tmp_path, small_glove_file, "c.txt", "--epsilon", "1", "--force")
    assert r.exit_code == 0 and "--force" not in r.stderr, r.output
    assert "forced" not in json.loads((tmp_path / "c.txt.card.json").read_text())
    assert Ledger(str(data), led).releases()[-1]["forced"] is False


def test_metric_families_are_separate_currencies():
    """Issue 15: an epsilon per unit of a Mahalanobis or list-index distance is not added to one per unit
    of Euclidean distance (the review found 1-diffractor, tem and mahalanobis summed in metric/token)."""
    from textdp.accounting import MetricDP
    from textdp.accounting.composition import compose_by_group, group_key, parse_currency

    eu = MetricDP(epsilon=2.0, metric="euclidean (glove-6b-50d)")
    ma = MetricDP(epsilon=2.0, metric="regularized mahalanobis (lambda=0.2; glove-6b-50d)")
    li = MetricDP(epsilon=2.0, metric="1-Diffractor list index: max over 3 lists (glove-6b-50d)")
    assert [group_key(g) for g in (eu, ma, li)] == ["metric/token", "metric/token/mahalanobis",
                                                      "metric/token/list_index"]
    groups = compose_by_group([eu, ma, li, eu])
    assert groups["metric/token"].epsilon == 4.0 and groups["metric/token/mahalanobis"].epsilon == 2.0
    for text, key in (("mahalanobis", "metric/token/mahalanobis"), ("diffractor", "metric/token/list_index"),
                      ("metric-token-mahalanobis", "metric/token/mahalanobis"), ("metric/token", "metric/token")):
        assert parse_currency(text) == key
