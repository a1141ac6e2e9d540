"""`rentopt offers --offers-file F --format json|csv` written from the file's columns
(optimizer/offers_writer.py) is byte for byte what the writers of full offers write for the same
rows (the reference: every line read by offers_io's line reader, filtered by OfferQuery.matches,
sorted by sort_offers, written by write_offers_json / write_offers_csv)."""

from __future__ import annotations

import io
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rentopt.optimizer import catalog, offers_io, offers_writer
from rentopt.optimizer.catalog import _id_ranks, find_offers
from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.offer_table import Texts
from rentopt.optimizer.offers_io import (
    read_offers_file,
    write_offers_csv,
    write_offers_json,
)
from rentopt.optimizer.offers_writer import write_listed_csv, write_listed_json
from rentopt.optimizer.store import OfferQuery

from tests.test_offers_listing import (
    reference,  # the every-offer listing, one definition
)

HEADER = ("provider,offer_id,gpu,gpus,price_hour,price_day,price_week,price_month,currency,storage_gb_month,"
          "egress_gb,ingress_gb,interconnect,form_factor,region,spot,max_days,stopped_bills,stopped_max_days,"
          "free_disk_gb,gpu_memory_gb,fetched_at,source\n")
# Every line a quirk the output must keep as the line's Offer has it:
# - Decimal spellings kept as written (2.10 / 2.1 / 1E+1 / 0003.5 / " 3.50 "), a line with only
#   a day or a month price, a spot line with three units (all interruptible);
# - empty optional cells (egress unknown, no region, no date: the file's time, no source: the path);
# - one instant written with three offsets, microseconds (on lines the columns read and on
#   lines the exact parser reads); max_days 1.5 / 0.1 / 7 / 0.000001 and stopped_max_days
#   0.00001 (floats pydantic writes otherwise than repr: 0.000024, 0.00001); free disk -0
#   (written -0.0 in JSON, empty in CSV), 0, 12.50, 0.00002; stopped rules; a padded source;
# - a bare "H100" (the usual variant: extra.gpu_note and candidates), form_factor narrowing,
#   NVLINK in capitals, a GPU the catalog does not know (kept with its memory: gpu_raw written);
# - text a spreadsheet would run (= + - @) in ids, regions and sources; tabs and line/paragraph
#   separators (the door lets them through in names): escaped in CSV, JSON-escaped in JSON;
#   a quoted id with a comma and a doubled quote; non-ASCII;
# - a price a part in a billion under the sane band's top (read by the exact line parser, not
#   the columns), and a blank line.
QUIRKS = HEADER + '''\
alpha,=1+2,H100-SXM-80GB,1,2.10,,,,USD,0.10,,0,,,us-east,no,,,,,,2026-11-28T06:00:00Z,
alpha,-5,H100-SXM-80GB,1,2.1,,,,USD,0.000,0.01,0,,,"@SUM(1,2)",no,1.5,everything,0.00001,-0,,2026-11-28T08:00:00+02:00,=cmd|' /C calc'!A0
beta,"id, with ""quotes""",H100,8,1E+1,,,,USD,,,,NVLINK,,eu\tx,no,0.1,nothing,2.5,0,80,2026-11-27T22:00:00-08:00,vendor sheet\u2028two
beta,@x,H100,2, 3.50 ,,,,USD,,,,,PCIe,+1,yes,7,,,12.50,,2026-11-28T06:00:00.123456+00:00,
beta,Ωmega,A100-SXM4-80GB,4,,50.4,,,CNY,0.7,,,pcie,, us-west ,no,,storage,,,80.0,,
gamma,g-1,RTX 4090,1,0003.5,84,,1533,CNY,,,,,,a\u2029b,no,0.000001,,,,,, padded source 
gamma,g-2,RTX 4090,1,0.40,9.6,60,,USD,,,,,,-,yes,,,,,,,\u00e9t\u00e9
gamma,g-3,Mystery 9000,2,,,30,,USD,,,,,,,no,,,0.5,0.00002,48,2026-11-28T08:00:00+02:00,
delta,edge,H100-SXM-80GB,1,199.9999999999,,,,USD,,,,,,,no,,,,,,2026-11-28T06:00:00Z, padded source 

delta,d-2,RTX 4090,1,,,,150,USD,,,,,,eu,no,,,,,24,2026-11-28T06:00:00Z,
'''
SORTS = ["price", "gpu", "provider", "memory"]


def written(path: Path, fmt: str, query: OfferQuery = OfferQuery(), sort: str = "price", limit: int | None = None,
            suspect: bool = False) -> tuple[str, str]:
    """(from the columns, from the reference's offers): the text each way writes."""
    found = find_offers(query, offers_file=path, sort=sort, limit=limit, suspect=suspect, objects=False)
    expected = reference(path, query, sort, limit, suspect)
    mine, theirs = io.StringIO(), io.StringIO()
    if fmt == "json":
        write_listed_json(found.listed, mine)
        write_offers_json(expected, theirs)
    else:
        assert write_listed_csv(found.listed, mine) == write_offers_csv(expected, theirs)
    return mine.getvalue(), theirs.getvalue()


@pytest.fixture(params=["lf", "crlf-quoted-bom"])
def quirks_file(request, tmp_path) -> Path:
    path = tmp_path / "quirks.csv"
    if request.param == "lf":
        path.write_text(QUIRKS, encoding="utf-8")
    else:  # as a spreadsheet saves it: byte-order mark, CRLF, every cell quoted
        import csv

        with path.open("w", encoding="utf-8-sig", newline="") as fp:
            csv.writer(fp, quoting=csv.QUOTE_ALL).writerows(csv.reader(io.StringIO(QUIRKS)))
    return path


@pytest.mark.parametrize("fmt", ["json", "csv"])
@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("limit", [None, 3])
def test_quirks_are_written_as_the_offers_write_them(quirks_file, fmt, sort, limit, monkeypatch):
    monkeypatch.setattr(offers_writer, "CHUNK", 4)  # several chunks, one cut inside the rows
    mine, theirs = written(quirks_file, fmt, sort=sort, limit=limit)
    assert mine == theirs
    assert mine.count("\n") > (30 if fmt == "json" else 3)  # not two empty outputs


def test_the_quirks_file_really_has_its_quirks(quirks_file):
    """The reference itself, checked by hand on the cells the quirks are about."""
    by_id = {o.offer_id: o for o in read_offers_file(quirks_file)}
    assert len(by_id) == 10  # the blank line is no offer
    assert [str(p.amount) for p in by_id["=1+2"].price_options] == ["2.10"]
    assert [str(p.amount) for p in by_id['id, with "quotes"'].price_options] == ["1E+1"]
    assert [(p.unit, str(p.amount), p.interruptible) for p in by_id["g-2"].price_options] == \
        [("hour", "0.40", True), ("day", "9.6", True), ("week", "60", True)]
    assert str(by_id["-5"].fetched_at) == "2026-11-28 08:00:00+02:00" and by_id["-5"].free_disk_gb == 0.0
    assert by_id['id, with "quotes"'].extra["gpu_candidates"] == ["H100-SXM-80GB", "H100-PCIe-80GB"]
    assert (by_id["@x"].gpu, by_id["@x"].extra) == ("H100-PCIe-80GB", {})  # narrowed by its form factor
    assert by_id["g-3"].gpu is None and by_id["g-3"].gpu_raw == "Mystery 9000"
    text = io.StringIO()
    write_offers_csv(list(by_id.values()), text)
    assert "'=cmd|' /C calc'!A0" in text.getvalue() and "eu\\tx" in text.getvalue() and "'@SUM(1,2)" in text.getvalue()
    assert "-0.0" in offers_io._OFFER_LIST.dump_json([by_id["-5"]]).decode()


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_filters_and_suspect_prices_are_written_alike(tmp_path, fmt):
    path = tmp_path / "suspect.csv"
    # four providers sell an H100 at 2.0-2.6 per hour; cheap's 0.30 is under 1/5 of the others' median 2.4,
    # and its bare "H100" carries a note: extra holds both
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency,region\n"
                    "a,1,H100-SXM-80GB,1,2.0,USD,us\nb,1,H100-SXM-80GB,1,2.4,USD,us\nc,1,H100-SXM-80GB,1,2.6,USD,eu\n"
                    "cheap,1,H100,1,0.30,USD,us\ncheap,2,H100-SXM-80GB,1,0.31,USD,eu\n")
    mine, theirs = written(path, fmt, suspect=True)
    assert mine == theirs
    if fmt == "json":  # both cheap rows with their reason, one also with its GPU note
        assert (mine.count('"suspect": '), mine.count('"gpu_note": ')) == (2, 1)
    else:
        assert mine.count("\ncheap,") == 2
    for query in (OfferQuery(region="us"), OfferQuery(max_hour_price=Decimal("2.4")), OfferQuery(providers=("a",))):
        assert written(path, fmt, query=query) == written(path, fmt, query=query)[::-1]
    empty = written(path, fmt, query=OfferQuery(currency="EUR"))
    assert empty[0] == empty[1] == ("[]\n" if fmt == "json" else ",".join(offers_io.CSV_COLUMNS) + "\n")


def test_a_json_file_is_written_from_its_offers(tmp_path, quirks_file):
    """A JSON file is read as offers (terms, unknown dates, several prices per unit): written from them."""
    offers = read_offers_file(quirks_file)
    term = offers[0].model_copy(update={"offer_id": "term", "dated_by": "unknown", "price_options": [
        *offers[0].price_options, offers[0].price_options[0].model_copy(update={"unit": PriceUnit.TERM, "term_hours": 720})]})
    path = tmp_path / "offers.json"
    with path.open("w") as fp:
        write_offers_json([*offers, term], fp)
    for fmt in ("json", "csv"):
        mine, theirs = written(path, fmt, sort="provider")
        assert mine == theirs and "term" in mine


def test_no_offer_is_built_for_a_file_listed_as_json_or_csv(tmp_path, monkeypatch):
    path = tmp_path / "many.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency\n"
                    + "".join(f"p{i % 7},id-{i},H100-SXM-80GB,1,{1 + i % 97}.5,USD\n" for i in range(400)))
    built = []
    real = offers_io.offer_from_cells
    monkeypatch.setattr(offers_io, "offer_from_cells", lambda *a, **k: built.append(a[2]) or real(*a, **k))
    for fmt in ("json", "csv"):
        result = CliRunner().invoke(cli, ["offers", "--offers-file", str(path), "--format", fmt])
        assert result.exit_code == 0, result.output
        assert result.stderr.startswith(f"# offers file {path}: 400 offers\n")
    assert built == []
    monkeypatch.undo()
    assert result.stdout == written(path, "csv")[1]


def test_the_command_writes_what_the_reference_writes(quirks_file):
    for fmt in ("json", "csv"):
        result = CliRunner().invoke(cli, ["offers", "--offers-file", str(quirks_file), "--format", fmt, "--sort", "gpu"])
        assert result.exit_code == 0, result.output
        assert result.stdout == written(quirks_file, fmt, sort="gpu")[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=6),
                min_size=1, max_size=30))
def test_offer_ids_rank_in_pythons_order(ids):
    order = sorted(set(ids))
    expected = [order.index(i) + 1 for i in ids]
    assert _id_ranks(Texts.of(ids)).tolist() == expected
    assert _id_ranks(list(ids)).tolist() == expected


# -- any file, any filter, sort, cut: the same text as the reference ------------------------------

# per unit (hour, day, week, month), mostly inside the sane bands at 1-8 GPUs; 199.9999999999 an
# hour is a part in a billion under the USD band's top at 1 GPU (the exact line parser reads it)
PRICES = [["", "1", "1.0", "2.10", "2.1", "1E+1", " 7 ", "12.5", "199.9999999999"], ["", "24", "50.4", "24.00", "240"],
          ["", "168", "300.5"], ["", "1533", "730", "2000.0"]]
TEXTS = ["", "us-east", " EU-west ", "=1+2", "@a", "-", "+x", "tab\tin", "line\u2028sep", "\u00e9", "a,b", 'q"q']
DATES = ["", "2026-11-28T06:00:00Z", "2026-11-28T08:00:00+02:00", "2026-11-28T06:00:00.5+00:00", "2025-01-01T00:00:00-05:30"]
ROW = st.tuples(
    st.sampled_from(["a", "b", "zz"]), st.sampled_from(["", "=", "-", "@", "é", " x "]),
    st.sampled_from(["H100-SXM-80GB", "H100", "RTX 4090", "Odd 1", "A100 80GB"]), st.sampled_from(["1", "2", "8"]),
    st.tuples(*(st.sampled_from(unit) for unit in PRICES)), st.sampled_from(["USD", "CNY", "usd"]),
    st.lists(st.sampled_from(["", "0", "0.10", "0.010", "1"]), min_size=3, max_size=3), st.sampled_from(TEXTS),
    st.sampled_from(["no", "yes", ""]), st.sampled_from(["", "1.5", "0.1", "30"]), st.sampled_from(["", "3", "0.5"]),
    st.sampled_from(["", "0", "-0", "12.50", "100"]), st.sampled_from(["", "24", "80.0"]), st.sampled_from(DATES),
    st.sampled_from(TEXTS))
QUERY = st.builds(OfferQuery, providers=st.none() | st.just(("a", "zz")), min_gpus=st.none() | st.just(2),
                  spot=st.none() | st.booleans(), region=st.none() | st.sampled_from(["us", "="]),
                  currency=st.none() | st.just("USD"), max_hour_price=st.none() | st.just(Decimal("2.1")))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, min_size=1, max_size=20), query=QUERY, sort=st.sampled_from(SORTS),
       limit=st.none() | st.integers(1, 6), suspect=st.booleans(), fmt=st.sampled_from(["json", "csv"]),
       chunk=st.sampled_from([1, 3, 20_000]), python_ties=st.sampled_from([0, 10_000]))
def test_any_listing_is_written_as_the_reference_writes_it(tmp_path, monkeypatch, rows, query, sort, limit, suspect,
                                                           fmt, chunk, python_ties):
    import csv

    monkeypatch.setattr(offers_writer, "CHUNK", chunk)
    monkeypatch.setattr(catalog, "_TIES_IN_PYTHON", python_ties)  # the Arrow ranking of ids too
    text = io.StringIO()
    out = csv.writer(text, lineterminator="\n")
    out.writerow(HEADER.strip().split(","))
    for i, (provider, mark, gpu, gpus, prices, currency, extras, region, spot, days, stopped, disk, memory, date,
            source) in enumerate(rows):
        if not any(p.strip() for p in prices):
            prices = ("3", *prices[1:])
        memory = memory or ("40" if gpu == "Odd 1" else "")
        out.writerow([provider, f"{mark}{i}", gpu, gpus, *prices, currency, *extras, "", "", region, spot, days,
                      "", stopped, disk, memory, date, source])
    path = tmp_path / "any.csv"
    path.write_text(text.getvalue(), encoding="utf-8")
    try:
        reference(path, query, sort, limit, suspect)
    except Exception as exc:  # a line the reader refuses (a price outside the band): refused alike
        event("refused")
        with pytest.raises(type(exc), match=str(exc)[:30].replace("(", r"\(").replace(")", r"\)")):
            find_offers(query, offers_file=path, sort=sort, limit=limit, suspect=suspect, objects=False)
        return
    mine, theirs = written(path, fmt, query, sort, limit, suspect)
    assert mine == theirs
    event("compared")


@pytest.mark.parametrize("blank", ["\n", ",,,,,\n", "  ,\n"])
def test_a_blank_line_among_the_offers_is_skipped(tmp_path, blank):
    """A blank line (no cell, or empty cells) coded with the others left its refused provider in
    the table's providers, and every listing and quote of the file failed (sorting names)."""
    path = tmp_path / "blank.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency\na,1,H100-SXM-80GB,1,2.0,USD\n" + blank
                    + "b,2,H100-SXM-80GB,1,1.9,USD\n")
    found = find_offers(OfferQuery(), offers_file=path)
    assert [(o.provider, o.offer_id) for o in found.offers] == [("b", "2"), ("a", "1")]
    assert sorted(found.provenance) == ["a", "b"]
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--days", "1", "--offers-file", str(path)])
    assert result.exit_code == 0, result.output
