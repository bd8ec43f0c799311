"""The engine interface and the mechanism transport (issue 16): exactly-once keyed noise."""

import pickle

import pytest

from textdp.engines import LocalEngine, ReleasePlan, get_engine, sanitize_records
from textdp.errors import ParameterError
from textdp.sanitize import make_mechanism

TEXTS = ["the movie was great fun", None, "a dull , lifeless film", "i loved it !", "", "not my cup of tea"]


def _plan(name="santext", seed=7, **kw):
    m = make_mechanism(name, "glove-6b-50d", 3.0, rng=seed, **kw)
    m.begin_release()
    return m, ReleasePlan.of(m)


def test_plan_is_small_hides_key_and_rebuilds_the_same_release():
    m, plan = _plan()
    blob = pickle.dumps(plan)
    assert len(blob) < 4096  # the embedding table is not shipped
    assert bytes(m._release_key.words.astype("<u4").tobytes()) not in repr(plan).encode()
    assert "secret" in repr(plan)
    whole, _ = sanitize_records(pickle.loads(blob), TEXTS, 0)
    # the seeded stand-alone call of the same mechanism draws with the same key
    ref = make_mechanism("santext", "glove-6b-50d", 3.0, rng=7).sanitize(["" if t is None else t for t in TEXTS])
    assert [r if t is not None else None for r, t in zip(ref, TEXTS)] == whole
    assert whole[1] is None


@pytest.mark.parametrize("cut", [1, 2, 3, 5])
def test_output_does_not_depend_on_the_split(cut):
    _, plan = _plan("fbdd", seed=3)
    whole, _ = sanitize_records(plan, TEXTS, 10)
    a, _ = sanitize_records(plan, TEXTS[:cut], 10)
    b, _ = sanitize_records(pickle.loads(pickle.dumps(plan)), TEXTS[cut:], 10 + cut)
    assert a + b == whole
    other, _ = sanitize_records(plan, TEXTS, 11)  # another record index: other draws
    assert other != whole


def test_worker_mechanism_never_draws_a_key_of_its_own():
    _, plan = _plan()
    mech = plan.mechanism()
    with pytest.raises(ParameterError):
        mech.begin_release()
    with pytest.raises(ParameterError):
        sanitize_records(plan, TEXTS, -1)


def test_plan_needs_a_begun_release():
    m = make_mechanism("santext", "glove-6b-50d", 3.0, rng=1)
    with pytest.raises(ParameterError, match="begin the release"):
        ReleasePlan.of(m)


def test_local_engine_keeps_item_order_and_raises_failures():
    with LocalEngine(2) as eng:
        assert eng.map(abs, [-3, 1, -2, 5]) == [3, 1, 2, 5]
        with pytest.raises(ZeroDivisionError):
            eng.map(lambda x: 1 // x, [1, 0, 2])
    assert get_engine("local").workers == 1
    with pytest.raises(ParameterError, match="unknown engine"):
        get_engine("ray")
    with pytest.raises(ParameterError):
        get_engine("local", workers=0)
    with pytest.raises(ParameterError):
        get_engine("local", scheduler="tcp://127.0.0.1:8786")
