"""The JSON twins of rentopt's TOML data files (optimizer/packaged_data.py): each shipped twin is
the one the build writes, holds exactly what tomllib reads from the TOML (type for type), and
is used only while it is of the TOML's exact bytes; otherwise the TOML is parsed."""

from __future__ import annotations

import hashlib
import json
import tomllib

import pytest

from rentopt.optimizer import packaged_data
from rentopt.optimizer.packaged_data import TWIN_SUFFIX, TWINNED, decode, encode, load
from tests.conftest import ROOT

PACKAGE = ROOT / "optimizer"


def same_typed(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (1 == 1.0 == True in Python; not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same_typed(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_typed(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("name", TWINNED)
def test_each_shipped_twin_is_what_the_build_writes_and_reads_as_tomllib_reads_the_toml(name):
    toml = (PACKAGE / name).read_bytes()
    twin = (PACKAGE / (name + TWIN_SUFFIX)).read_bytes()
    assert twin == encode(toml), f"{name} changed: run tools/build_data_twins.py"
    assert same_typed(decode(twin, toml), tomllib.loads(toml.decode()))
    assert same_typed(load(name), tomllib.loads(toml.decode()))


def test_same_typed_tells_an_int_from_a_float():
    assert not same_typed({"a": [1]}, {"a": [1.0]}) and same_typed({"a": [1.5]}, {"a": [1.5]})


def test_a_twin_is_used_only_while_it_is_of_the_tomls_bytes(tmp_path):
    (tmp_path / "data").mkdir()
    toml = b'# a comment\nname = "x"\nsizes = [1, 2.5]\n'
    (tmp_path / "data" / "t.toml").write_bytes(toml)
    twin = tmp_path / "data" / ("t.toml" + TWIN_SUFFIX)
    # A twin of these bytes is what load returns: its data is read, the TOML is not parsed (the
    # twin below says something else than the TOML, to show which one was read).
    twin.write_text(json.dumps({"format": 1, "toml_sha256": hashlib.sha256(toml).hexdigest(),
                                "data": {"name": "from the twin"}}))
    assert load("data/t.toml", tmp_path) == {"name": "from the twin"}
    want = {"name": "x", "sizes": [1, 2.5]}
    for stale in (
        {"format": 1, "toml_sha256": hashlib.sha256(toml + b"\n").hexdigest(), "data": {"name": "old"}},  # TOML edited
        {"format": 2, "toml_sha256": hashlib.sha256(toml).hexdigest(), "data": {"name": "new format"}},
        {"format": 1, "toml_sha256": hashlib.sha256(toml).hexdigest(), "data": ["not a table"]},
    ):
        twin.write_text(json.dumps(stale))
        assert same_typed(load("data/t.toml", tmp_path), want)
    for damaged in (b"", b"\xff\xfe", b'{"format": 1, "toml_sha256": ', encode(toml)[:-9]):
        twin.write_bytes(damaged)
        assert same_typed(load("data/t.toml", tmp_path), want)
    twin.unlink()
    assert same_typed(load("data/t.toml", tmp_path), want)
    twin.write_bytes(encode(toml))
    assert same_typed(load("data/t.toml", tmp_path), want)


def test_a_toml_date_has_no_json_form_and_fails_the_build_not_a_quote():
    with pytest.raises(TypeError):
        encode(b"day = 2026-12-04\n")


def test_a_broken_toml_without_a_twin_is_a_value_error(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.toml").write_bytes(b"name = \n")
    with pytest.raises(ValueError):
        load("data/t.toml", tmp_path)


def test_the_twins_ship_in_the_package_data():
    assert all(n.startswith("data/") and n.endswith(".toml") for n in TWINNED)
    assert packaged_data.load("data/fx.toml")["base"] == "USD"
