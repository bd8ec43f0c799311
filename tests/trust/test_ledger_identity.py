"""Ledger identity of scaled inputs (issue 16, item 4): a dataset of parts by its manifest, an
in-memory frame by a name the caller gives, or the ledger of unidentified releases."""

from __future__ import annotations

import hashlib

import pytest

from textdp.accounting.guarantees import PureDP
from textdp.accounting.ledger import UNIDENTIFIED, Ledger, dataset_id
from textdp.data.parts import MANIFEST_FORMAT, find_parts, manifest_identity
from textdp.errors import InputError, ParameterError


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def test_manifest_identity_is_content_in_order():
    a, b = (3, _sha(b"abc")), (5, _sha(b"defgh"))
    assert manifest_identity([a]) == _sha(b"abc")  # one part: the file's own hash
    both = manifest_identity([a, b])
    assert both == _sha(f"{MANIFEST_FORMAT}\n3 {a[1]}\n5 {b[1]}\n".encode())
    assert manifest_identity([b, a]) != both  # the order numbers the records: another dataset
    assert manifest_identity([a, b, a]) != both
    with pytest.raises(ValueError):
        manifest_identity([(1, "nothex")])
    with pytest.raises(InputError):
        manifest_identity([])


def test_folder_glob_and_moved_folder_share_one_ledger(tmp_path):
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "b.csv").write_text("text\ngood film\n")
    (lake / "a.csv").write_text("text\nbad movie\n")
    (lake / "_SUCCESS").write_text("")
    (lake / ".a.csv.crc").write_text("x")  # hidden and underscore files are not parts
    parts = find_parts(lake)
    assert parts.relative == ("a.csv", "b.csv") and parts.fmt == "csv"
    expect = manifest_identity([(p.stat().st_size, _sha(p.read_bytes())) for p in parts.paths])
    led = Ledger(str(lake), tmp_path / "led")
    assert led.input_sha256 == expect and led.key == expect[:24] and led.path.name.startswith("lake-")
    assert Ledger(str(lake / "*.csv"), tmp_path / "led").key == led.key
    assert dataset_id(str(lake)) == f"lake-{expect[:24]}"
    same = Ledger.for_content("elsewhere/lake", expect, tmp_path / "led")
    led.record(PureDP(1.0))
    assert same.path == led.path and len(same.releases()) == 1
    (lake / "b.csv").write_text("text\ngood films\n")  # one changed byte: another dataset
    assert Ledger(str(lake), tmp_path / "led").key != led.key


def test_for_content_refuses_what_is_not_a_digest(tmp_path):
    with pytest.raises(ParameterError, match="SHA-256"):
        Ledger.for_content("lake", "abc", tmp_path)


def test_named_ledger_is_never_read_as_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.frame").write_text("not read")
    led = Ledger.named("My.Frame", tmp_path / "led")
    assert led.key == "my.frame" and led.input_sha256 is None
    assert led.path == tmp_path / "led" / "my.frame.jsonl"
    assert Ledger.named("rotten-tomatoes", tmp_path / "led").path == Ledger("rotten-tomatoes", tmp_path / "led").path
    for bad in ("", "../x", "a/b", "_unidentified", "x" * 90, "a b"):
        with pytest.raises(ParameterError, match="dataset_id"):
            Ledger.named(bad, tmp_path / "led")


def test_unidentified_releases_compose_in_their_own_ledger(tmp_path):
    u = Ledger.unidentified(tmp_path)
    assert not u.identified and u.path.name == f"{UNIDENTIFIED}.jsonl"
    rid = u.reserve(PureDP(1.0), command="sanitize frame")
    u.record(PureDP(1.0), reservation=rid)
    u2 = Ledger.unidentified(tmp_path)
    u2.record(PureDP(0.5))
    assert len(u2.releases()) == 2 and u2.verify()
    assert Ledger.named("unidentified", tmp_path).path != u.path
