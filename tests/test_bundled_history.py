"""The bundled providers' published history, read without validating the snapshot's offers
(what the report reads of the bundled snapshot), against the snapshot read whole."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import rentopt.optimizer.catalog as catalog
from rentopt.optimizer.errors import InputError, StoreError


def test_bundled_history_is_the_whole_snapshots_history():
    whole = {p.provider: p.history for p in catalog.bundled_snapshot().providers}
    found = catalog.bundled_history()
    assert list(found) == list(whole) and any(found.values())
    assert found == whole


def test_a_snapshot_the_history_read_cannot_read_is_read_whole_for_its_error(monkeypatch):
    def damaged(raw: bytes) -> bytes:
        raise InputError("not a rentopt snapshot: a damaged gzip file")

    monkeypatch.setattr(catalog, "_decompress", damaged)
    section = SimpleNamespace(provider="p", history=["h"])
    monkeypatch.setattr(catalog, "bundled_snapshot", lambda: SimpleNamespace(providers=[section]))
    assert catalog.bundled_history() == {"p": ["h"]}

    def refused() -> None:
        raise StoreError("the bundled price snapshot is damaged")

    monkeypatch.setattr(catalog, "bundled_snapshot", refused)
    with pytest.raises(StoreError, match="damaged"):
        catalog.bundled_history()


def test_a_snapshot_of_another_format_is_read_whole_for_its_error(monkeypatch):
    monkeypatch.setattr(catalog, "SNAPSHOT_FORMAT", catalog.SNAPSHOT_FORMAT + 1)
    monkeypatch.setattr(catalog, "bundled_snapshot", lambda: SimpleNamespace(providers=[]))
    assert catalog.bundled_history() == {}
