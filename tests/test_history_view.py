"""The report's price history read as columns (HistoryView.price_history_columns): each provider's
points from where its offers came, a store provider's of its current plugin only."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from rentopt.optimizer.catalog import HistoryView, Provenance, SnapshotHistory
from rentopt.optimizer.store import HistoryColumns, open_readonly, open_writable
from tests.test_store import make_offer

T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)
DAY = timedelta(days=1)


def rows(columns: HistoryColumns) -> list[tuple]:
    return list(zip(columns.provider, columns.fetched_at, columns.gpu, columns.gpus, columns.spot, columns.currency,
                    columns.min_gpu_hour, strict=True))


def test_each_provider_has_the_points_of_where_its_offers_came_from(tmp_path):
    path = tmp_path / "prices.sqlite"
    with open_writable(path) as s:
        # gcp's first snapshot came from its own plugin, the next from the SkyPilot catalog's:
        # the report shows the current plugin's alone
        s.write_snapshot("gcp", [make_offer("g", provider="gcp", price="24")], fetched_at=T0 - DAY)
        s.write_snapshot("gcp", [make_offer("g", provider="gcp", price="20")], fetched_at=T0, plugin="skypilot")
        s.write_snapshot("beta", [make_offer("b", provider="beta", price="8")], fetched_at=T0)  # not in the set
        s.write_snapshot("vast", [make_offer("v", provider="vast", price="16")], fetched_at=T0)
    published = {
        "lambda": [SnapshotHistory(fetched_at=T0 - 2 * DAY, source="catalog", offers=2,
                                   rows=[("H100-SXM-80GB", 8, 0, "USD", 1, "3.000000", "3.000000"),
                                         ("H100-SXM-80GB", 1, 0, "USD", 1, "3.500000", "3.500000"),
                                         ("L4-24GB", 1, 0, "USD", 1, "0.700000", "0.700000")]),
                   SnapshotHistory(fetched_at=T0 - 3 * DAY, source="catalog", offers=1,
                                   rows=[("H100-SXM-80GB", 8, 1, "USD", 1, "1.000000", "1.000000")])],
        "vast": [SnapshotHistory(fetched_at=T0 - DAY, source="catalog", offers=1,  # vast's offers are the store's
                                 rows=[("H100-SXM-80GB", 8, 0, "USD", 1, "9.000000", "9.000000")])],
    }
    provenance = {"gcp": Provenance("gcp", T0, "store", 1, plugin="skypilot"),
                  "vast": Provenance("vast", T0, "store", 1),
                  "lambda": Provenance("lambda", T0 - 2 * DAY, "bundled", 2, origin="bundled", plugin="skypilot")}
    with open_readonly(path) as s:
        view = HistoryView(provenance, s, published)
        # per GPU-hour: gcp 20 / 8, vast 16 / 8; lambda's as published
        assert rows(view.price_history_columns(["H100-SXM-80GB"])) == [
            ("gcp", T0, "H100-SXM-80GB", 8, False, "USD", Decimal("2.5")),
            ("vast", T0, "H100-SXM-80GB", 8, False, "USD", Decimal("2")),
            ("lambda", T0 - 3 * DAY, "H100-SXM-80GB", 8, True, "USD", Decimal("1")),
            ("lambda", T0 - 2 * DAY, "H100-SXM-80GB", 1, False, "USD", Decimal("3.5")),
            ("lambda", T0 - 2 * DAY, "H100-SXM-80GB", 8, False, "USD", Decimal("3")),
        ]
        assert rows(view.price_history_columns(["L4-24GB", "A100-SXM-80GB"], since=T0 - 2 * DAY)) == [
            ("lambda", T0 - 2 * DAY, "L4-24GB", 1, False, "USD", Decimal("0.7"))]
        assert rows(view.price_history_columns(["H100-SXM-80GB"], since=T0 - 2 * DAY))[-1][1] == T0 - 2 * DAY
        assert len(view.price_history_columns(["H100-SXM-80GB"], since=T0 + DAY)) == 0
    # without a store, the bundled providers' alone
    assert [r[0] for r in rows(HistoryView(provenance, None, published).price_history_columns(["H100-SXM-80GB"]))] \
        == ["lambda"] * 3
