"""Offers files (JSON and hand-written CSV), the reference hour price, and the offers table."""

from __future__ import annotations

import io
import os
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from rentopt.optimizer.errors import OffersFileError
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.optimizer.offers_io import (
    CSV_COLUMNS, hour_price, offer_table_rows, parse_offers_json, read_offers_file, write_offers_csv,
    write_offers_json,
)

T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def offer(offer_id="o1", *, options=None, spot=False, **fields) -> Offer:
    values = dict(provider="alpha", offer_id=offer_id, gpu="A100-SXM4-80GB", gpu_raw="A100 SXM4 80GB", gpus=4,
                  gpu_memory_gb=80.0, price_options=options or [PriceOption(unit="hour", amount=Decimal("7.20"))],
                  spot=spot, currency="USD", fetched_at=T0, source="https://alpha.test")
    values.update(fields)
    return Offer(**values)


def hour(amount, **kw):
    return PriceOption(unit=PriceUnit.HOUR, amount=Decimal(amount), **kw)


# --------------------------------------------------------------------------------------------
# hour_price


@pytest.mark.parametrize("options, spot, expected", [
    ([hour("3.00"), PriceOption(unit="day", amount=Decimal("48"))], False, Decimal("3.00")),
    ([PriceOption(unit="day", amount=Decimal("48")), PriceOption(unit="week", amount=Decimal("168"))], False, Decimal("2")),
    ([PriceOption(unit="month", amount=Decimal("730"))], False, Decimal("1")),
    ([hour("3.00"), hour("1.00", interruptible=True)], False, Decimal("3.00")),
    ([hour("1.50", interruptible=True), hour("1.20", interruptible=True)], True, Decimal("1.20")),
    ([PriceOption(unit="term", amount=Decimal("8760"), term_hours=8760)], False, Decimal("1")),
    ([PriceOption(unit="term", amount=Decimal("8760"), term_hours=8760), PriceOption(unit="month", amount=Decimal("1460"))],
     False, Decimal("2")),
])
def test_hour_price_is_the_finest_unit_of_the_offers_own_kind(options, spot, expected):
    assert hour_price(offer(options=options, spot=spot)) == expected


def test_hour_price_falls_back_to_the_other_kind_when_an_offer_has_only_that():
    o = offer(options=[hour("0.80", interruptible=True)], spot=False)
    assert hour_price(o) == Decimal("0.80")


# --------------------------------------------------------------------------------------------
# CSV


def write(tmp_path, text: str, name: str = "sheet.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    os.utime(path, (T0.timestamp(), T0.timestamp()))
    return path


def test_a_hand_written_csv_becomes_offers(tmp_path):
    path = write(tmp_path, (
        "provider,offer_id,gpu,gpus,price_hour,currency,price_month,storage_gb_month,egress_gb,interconnect,region,spot,max_days\n"
        "mycloud,a100x8,A100-SXM4-80GB,8,11.20,usd,,0.10,0.05,nvlink,eu-west,no,\n"
        "autodl,4090-m, NVIDIA GeForce RTX 4090 ,1,,CNY,1100,,,,cn-north,,30\n"
        "\n"
        "mycloud,spot1,RTX 4090,2,0.60,USD,,,,,,yes,\n"
    ))
    offers = read_offers_file(path)
    assert [o.offer_id for o in offers] == ["a100x8", "4090-m", "spot1"]
    a100, monthly, spot = offers
    assert a100.gpu == "A100-SXM4-80GB" and a100.gpu_memory_gb == 80 and a100.gpus == 8
    assert a100.currency == "USD" and a100.interconnect == "nvlink" and a100.region == "eu-west"
    assert a100.price_options == [PriceOption(unit="hour", amount=Decimal("11.20"))]
    assert a100.storage_gb_month == Decimal("0.10") and a100.egress_gb == Decimal("0.05") and a100.ingress_gb is None
    assert a100.fetched_at == T0 and a100.source == str(path.resolve())
    assert monthly.gpu == "RTX-4090-24GB" and monthly.gpu_memory_gb == 24 and monthly.gpu_raw == "NVIDIA GeForce RTX 4090"
    assert monthly.price_options == [PriceOption(unit="month", amount=Decimal("1100"))]
    assert monthly.max_duration_hours == 720 and monthly.interconnect == "unknown"
    assert spot.spot and all(p.interruptible for p in spot.price_options)
    assert a100.stopped_bills == "storage" and a100.stopped_max_days is None and a100.free_disk_gb == 0


def test_csv_carries_the_platforms_stop_rules(tmp_path):
    path = write(tmp_path, HEADER + ",price_month,stopped_bills,stopped_max_days,free_disk_gb\n"
                           "jygpu,8x4090,RTX 4090,8,,CNY,7920,everything,,\n"
                           "autodl,4090,RTX 4090,1,1.88,CNY,,Storage,15,50\n")
    node, autodl = read_offers_file(path)
    assert node.stopped_bills == "everything" and node.stopped_max_days is None and node.free_disk_gb == 0
    assert autodl.stopped_bills == "storage" and autodl.stopped_max_days == 15 and autodl.free_disk_gb == 50


def test_names_people_copy_from_a_providers_page_resolve_and_say_how(tmp_path):
    # Issue 13's sheet: bare names read as the usual variant (H100/H200 SXM, as SkyPilot and
    # gpuhunt read them), with a note on the offer; exact names stay exact.
    path = write(tmp_path, HEADER + ",gpu_memory_gb,form_factor,interconnect\n"
                           "p,h100,H100,8,20,USD,,,\n" "p,a100,A100 80GB,1,1.5,USD,,,\n" "p,h200,H200,8,30,USD,,,\n"
                           "p,a800,A800,1,1,USD,,,\n" "p,4090,4090,1,0.3,USD,,,\n" "p,4090d,RTX 4090D,1,0.3,USD,,,\n"
                           "p,l40s,L40S,1,0.8,USD,,,\n" "p,nvl,H200,2,6,USD,,NVL,\n" "p,pcie,H100,1,2,USD,80,,pcie\n")
    offers = {o.offer_id: o for o in read_offers_file(path)}
    expected = {"h100": ("H100-SXM-80GB", "default"), "a100": ("A100-SXM4-80GB", "default"),
                "h200": ("H200-SXM-141GB", "default"), "a800": ("A800-SXM4-80GB", "default"),
                "4090": ("RTX-4090-24GB", "exact"), "4090d": ("RTX-4090D-24GB", "exact"), "l40s": ("L40S-48GB", "exact"),
                "nvl": ("H200-NVL-141GB", "by_memory"), "pcie": ("H100-PCIe-80GB", "by_memory")}
    assert {k: (o.gpu, o.gpu_status) for k, o in offers.items()} == expected
    assert "H100-PCIe-80GB or H100-NVL-94GB" in offers["h100"].extra["gpu_note"]
    assert offers["h100"].extra["gpu_candidates"] == ["H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"]
    assert offers["h100"].gpu_memory_gb == 80 and offers["h200"].gpu_memory_gb == 141
    assert "gpu_note" not in offers["4090"].extra and "gpu_note" not in offers["nvl"].extra


def test_a_gpu_not_in_the_catalog_is_kept_when_its_memory_is_given(tmp_path):
    path = write(tmp_path, "provider,offer_id,gpu,gpus,price_hour,currency,gpu_memory_gb\np,1,Zephyr X9,1,1.5,USD,40\n")
    (o,) = read_offers_file(path)
    assert o.gpu is None and o.gpu_status == "unknown" and o.gpu_raw == "Zephyr X9" and o.gpu_memory_gb == 40


def test_a_spreadsheet_byte_order_mark_is_ignored(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("provider,offer_id,gpu,gpus,price_hour,currency\np,1,L4-24GB,1,0.8,USD\n".encode("utf-8-sig"))
    assert read_offers_file(path)[0].gpu == "L4-24GB"


HEADER = "provider,offer_id,gpu,gpus,price_hour,currency"


@pytest.mark.parametrize("text, message", [
    ("provider,offer_id,gpu,gpus,price_hour\np,1,L4-24GB,1,1,\n", r"missing column currency"),
    (HEADER + ",price_hr\np,1,L4-24GB,1,1,USD,2\n", r"unknown column 'price_hr'"),
    (HEADER + "\np,1,L4-24GB,1,1,USD\np,2,L4-24GB,1,abc,USD\n", r"sheet.csv line 3, field price_hour: 'abc' is not a number"),
    (HEADER + "\np,1,L4-24GB,1,0,USD\n", r"line 2, field price_hour: '0' must be a positive number \(0 would mean free"),
    (HEADER + "\np,1,L4-24GB,1,-2,USD\n", r"line 2, field price_hour: '-2' must be a positive"),
    (HEADER + "\np,1,L4-24GB,1,,USD\n", r"line 2, field price_hour: no price on this line"),
    (HEADER + "\np,1,Zephyr X9,1,1,USD\n", r"line 2, field gpu: 'Zephyr X9': no catalog GPU has this name.*gpu_memory_gb"),
    # A bare "A100" is 40 or 80 GB: the choice changes what fits, so the sheet must say which.
    (HEADER + "\np,1,A100,1,1,USD\n", r"line 2, field gpu: 'A100': could be A100-SXM4-80GB, A100-SXM4-40GB"),
    (HEADER + ",interconnect\np,1,H100,1,1,USD,pcie\n", r"'H100': could be H100-PCIe-80GB, H100-NVL-94GB"),
    (HEADER + ",form_factor\np,1,H100,1,1,USD,socket\n", r"line 2, field form_factor: 'socket' must be SXM, PCIe"),
    (HEADER + "\np,1,L4-24GB,two,1,USD\n", r"line 2, field gpus: 'two' must be a whole number"),
    (HEADER + "\np,1,L4-24GB,0,1,USD\n", r"line 2, field gpus"),
    (HEADER + "\np,1,L4-24GB,1,1,dollars\n", r"line 2, field currency: 'DOLLARS' must be a three-letter code"),
    (HEADER + "\np,1,L4-24GB,1,1,USD\np,2,L4-24GB,1,1,XYZ\n", r"sheet.csv line 3, field currency: unknown currency 'XYZ'"),
    (HEADER + ",interconnect\np,1,L4-24GB,1,1,USD,infiniband\n", r"line 2, field interconnect"),
    (HEADER + ",spot\np,1,L4-24GB,1,1,USD,maybe\n", r"line 2, field spot: 'maybe' must be yes or no"),
    (HEADER + ",fetched_at\np,1,L4-24GB,1,1,USD,2026-11-28 06:00\n", r"line 2, field fetched_at: .* needs a timezone"),
    (HEADER + ",storage_gb_month\np,1,L4-24GB,1,1,USD,-1\n", r"line 2, field storage_gb_month: '-1' must be a non-negative"),
    (HEADER + "\np,,L4-24GB,1,1,USD\n", r"line 2, field offer_id: is empty"),
    (HEADER + ",stopped_bills\np,1,L4-24GB,1,1,USD,disk\n", r"line 2, field stopped_bills: 'disk' must be one of storage"),
    (HEADER + ",stopped_max_days\np,1,L4-24GB,1,1,USD,0\n", r"line 2, field stopped_max_days: '0' must be a positive"),
    (HEADER + ",free_disk_gb\np,1,L4-24GB,1,1,USD,-5\n", r"line 2, field free_disk_gb: '-5' must be a non-negative"),
    (HEADER + "\np,1,L4-24GB,1,1,USD,extra\n", r"line 2: more cells than columns"),
    (HEADER + "\np,1,L4-24GB,1,1,USD\np,1,L4-24GB,2,2,USD\n", r"offer p/1 appears twice"),
    ("", r"sheet.csv is empty"),
    (HEADER + "\n", r"holds no offers"),
])
def test_csv_errors_name_the_line_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(OffersFileError, match=message):
        read_offers_file(path)


def test_a_file_that_is_not_utf8_says_so(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + "\np,caf\xe9,L4-24GB,1,1,USD\n").encode("latin-1"))
    with pytest.raises(OffersFileError, match="not UTF-8"):
        read_offers_file(path)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(OffersFileError, match="cannot read offers file"):
        read_offers_file(tmp_path / "nope.csv")


def csv_view(o: Offer) -> dict:
    """The fields the CSV format carries."""
    return o.model_dump(include={"provider", "offer_id", "gpu", "gpus", "gpu_memory_gb", "price_options", "currency",
                                 "storage_gb_month", "egress_gb", "ingress_gb", "interconnect", "region", "spot",
                                 "max_duration_hours", "stopped_bills", "stopped_max_days", "free_disk_gb",
                                 "fetched_at", "source"})


def test_csv_round_trips(tmp_path):
    offers = [
        offer("a", options=[hour("7.20"), PriceOption(unit="day", amount=Decimal("160")),
                            PriceOption(unit="week", amount=Decimal("1000")), PriceOption(unit="month", amount=Decimal("3900"))],
              storage_gb_month=Decimal("0.10"), egress_gb=Decimal("0"), ingress_gb=Decimal("0.01"), interconnect="nvlink",
              region="us-east", max_duration_hours=720.5, stopped_bills="everything", stopped_max_days=15.0,
              free_disk_gb=50.0),
        offer("b", options=[hour("0.40", interruptible=True)], spot=True, gpu="RTX-4090-24GB", gpu_raw="RTX 4090",
              gpu_memory_gb=24.0, gpus=1, currency="CNY", fetched_at=T0 - timedelta(days=3)),
        offer("c", gpu=None, gpu_raw="Zephyr, \"X9\"", gpu_status="unknown", gpu_memory_gb=40.0, region="eu,west"),
    ]
    buffer = io.StringIO()
    assert write_offers_csv(offers, buffer) == []
    assert buffer.getvalue().splitlines()[0] == ",".join(CSV_COLUMNS)
    path = write(tmp_path, buffer.getvalue(), "round.csv")
    back = read_offers_file(path)
    for before, after in zip(offers, back, strict=True):
        expected, got = csv_view(before), csv_view(after)
        assert got.pop("max_duration_hours") == pytest.approx(expected.pop("max_duration_hours"))
        assert got == expected


def test_csv_writer_leaves_out_what_it_cannot_express():
    term_only = offer("t", options=[PriceOption(unit="term", amount=Decimal("50000"), term_hours=8760)])
    with_bid = offer("b", options=[hour("3.00"), hour("1.00", interruptible=True)])
    buffer = io.StringIO()
    assert write_offers_csv([term_only, with_bid], buffer) == [term_only]
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("alpha,b,A100-SXM4-80GB,4,3.00,")


# --------------------------------------------------------------------------------------------
# JSON


def test_json_round_trips_everything(tmp_path):
    offers = [offer("a", extra={"reliability": 0.97}, max_duration_hours=12.25),
              offer("t", options=[PriceOption(unit="term", amount=Decimal("50000"), term_hours=8760, label="1y")])]
    buffer = io.StringIO()
    write_offers_json(offers, buffer)
    path = tmp_path / "offers.json"
    path.write_text(buffer.getvalue())
    assert read_offers_file(path) == offers


def test_json_is_recognised_without_the_extension(tmp_path):
    buffer = io.StringIO()
    write_offers_json([offer()], buffer)
    path = tmp_path / "offers.txt"
    path.write_text("\n  " + buffer.getvalue())
    assert read_offers_file(path)[0].offer_id == "o1"


@pytest.mark.parametrize("text, message", [
    ('[{"provider": "p"', r"offers.json is not valid JSON"),
    ('{"offers": []}', r"expected a JSON list of offers"),
    ("[]", r"holds no offers"),
])
def test_json_shape_errors(tmp_path, text, message):
    path = tmp_path / "offers.json"
    path.write_text(text)
    with pytest.raises(OffersFileError, match=message):
        read_offers_file(path)


def test_json_field_errors_name_the_offer_and_field():
    good = offer("a").model_dump(mode="json")
    bad = offer("b").model_dump(mode="json")
    bad["price_options"][0]["amount"] = "0"
    import json

    with pytest.raises(OffersFileError, match=r"offers.json line 1: offer 2, field price_options.0.amount: .*greater than 0"):
        parse_offers_json(json.dumps([good, bad]), "offers.json")
    with pytest.raises(OffersFileError, match=r"offers.json line 3: offer 2, field price_options.0.amount: .*greater than 0"):
        parse_offers_json("[\n" + ",\n".join(json.dumps(o) for o in (good, bad)) + "\n]", "offers.json")
    bad = offer("b", currency="XYZ").model_dump(mode="json")
    with pytest.raises(OffersFileError, match=r"offers.json line 1: offer 2, field currency: unknown currency 'XYZ'"):
        parse_offers_json(json.dumps([good, bad]), "offers.json")


# --------------------------------------------------------------------------------------------
# The table


def test_table_rows_show_price_currency_and_age():
    rows = offer_table_rows([offer("a", options=[hour("7.2")]),
                             offer("u", gpu=None, gpu_raw="Zephyr X9", gpu_status="unknown", currency="CNY")],
                            T0 + timedelta(hours=5))
    assert rows[0][2:] == ["A100-SXM4-80GB", "4", "80", "unknown", "", "no", "7.20", "USD", "5h"]
    assert rows[1][2] == "Zephyr X9 (?)" and rows[1][-2] == "CNY"


def test_json_band_errors_name_the_first_offer_and_its_first_bad_price():
    """The door's bands, offer by offer and within an offer GPU-hour prices before storage
    (worked by hand: 800000 USD a 730-hour month for 4 GPUs is 273.9726 USD per GPU-hour; the
    storage band is 0-5 USD per GB-month)."""
    import json

    good = offer("a").model_dump(mode="json")
    storage = offer("b", storage_gb_month=Decimal("9")).model_dump(mode="json")
    both = offer("c", storage_gb_month=Decimal("9"),
                 options=[hour("7.20"), PriceOption(unit=PriceUnit.MONTH, amount=Decimal("800000"))]).model_dump(mode="json")
    with pytest.raises(OffersFileError) as caught:
        parse_offers_json(json.dumps([good, storage, both]), "offers.json")
    assert str(caught.value) == ("offers.json line 1: offer 2, field storage_gb_month: 9 USD per GB-month of storage "
                                 "is above the sane range 0-5 USD")
    with pytest.raises(OffersFileError) as caught:
        parse_offers_json(json.dumps([good, both, storage]), "offers.json")
    assert str(caught.value) == ("offers.json line 1: offer 2, field price_options.1.amount: month price 800000 USD = "
                                 "273.9726 USD per GPU-hour is above the sane range 0.001-200 USD")
    assert parse_offers_json(json.dumps([good]), "offers.json")[0].offer_id == "a"
