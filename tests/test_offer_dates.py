"""A price of unknown date stays unknown through offers files (the defect left from issue 23).

`rentopt offers --format csv|json` wrote such a price (SkyPilot's mithril rows) with fetched_at
1970-01-01T00:00:00Z, and a quote over the file read back said "prices of 1970-01-01; 20792 days
old". Now the CSV cell says `unknown`, JSON says null beside `"dated_by": "unknown"`, and every
reader (offers_io's line reader, the Arrow reader, the columnar writer, the quote's provenance)
reads it back as unknown: never 1970, never the file's time.

The source offers are written by hand below: "dated" published its prices on 2026-05-20,
"undated" never said when. Every file made from them must give back exactly those two dates.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.catalog import load_offers
from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import UNKNOWN_DATE
from rentopt.optimizer.offers_io import read_offers_file, write_offers_csv, write_offers_json
from rentopt.optimizer.offers_reader import read_offers_table
from tests.test_quote import A6000, offer, quote, quote_json

MAY20 = datetime(2026, 5, 20, tzinfo=timezone.utc)
# a file time no price here carries: a reader that dates by it shows up
FILE_TIME = datetime(2026, 1, 2, 3, 4, tzinfo=timezone.utc)
JOB = ("--model", "7b", "--mode", "lora", "--tokens", "3e8", "--no-validate")


def source_offers():
    dated = offer("a6000-d", gpus=1, hourly="1.00", provider="dated", **A6000).model_copy(
        update={"fetched_at": MAY20, "source": "dated's page of 2026-05-20"})
    undated = offer("a6000-u", gpus=1, hourly="1.20", provider="undated", **A6000).model_copy(
        update={"fetched_at": UNKNOWN_DATE, "dated_by": "unknown", "source": "a catalog, date unknown"})
    return [dated, undated]


# (fetched_at, dated_by) per provider, as the source has them
EXPECTED = {"dated": (MAY20, "published"), "undated": (UNKNOWN_DATE, "unknown")}


def dates(offers) -> dict:
    return {o.provider: (o.fetched_at, o.dated_by) for o in offers}


def aged(path: Path) -> Path:
    os.utime(path, (FILE_TIME.timestamp(), FILE_TIME.timestamp()))
    return path


def written(tmp_path: Path, name: str, writer) -> Path:
    path = tmp_path / name
    with path.open("w", encoding="utf-8", newline="") as fp:
        writer(source_offers(), fp)
    return aged(path)


def listed(tmp_path: Path, source: Path, fmt: str) -> Path:
    """`rentopt offers --offers-file SOURCE --format FMT` into a file (the columnar writer for a CSV source)."""
    result = CliRunner().invoke(cli, ["offers", "--offers-file", str(source), "--format", fmt])
    assert result.exit_code == 0, result.stderr
    path = tmp_path / f"from-{source.stem}-{source.suffix[1:]}.{fmt}"
    path.write_text(result.stdout, encoding="utf-8")
    return aged(path)


def every_file(tmp_path: Path) -> list[Path]:
    """The source through each writer, and each of those files listed again in both formats."""
    first = [written(tmp_path, "src.csv", write_offers_csv), written(tmp_path, "src.json", write_offers_json)]
    return first + [listed(tmp_path, f, fmt) for f in first for fmt in ("csv", "json")]


def test_the_files_say_unknown_where_the_date_is_unknown(tmp_path):
    for path in every_file(tmp_path):
        text = path.read_text(encoding="utf-8")
        assert "1970" not in text, path.name
        if path.suffix == ".csv":
            cells = {r["provider"]: r["fetched_at"] for r in csv.DictReader(io.StringIO(text))}
            assert cells == {"dated": "2026-05-20T00:00:00Z", "undated": "unknown"}, path.name
        else:
            found = {o["provider"]: (o["fetched_at"], o["dated_by"]) for o in json.loads(text)}
            assert found == {"dated": ("2026-05-20T00:00:00Z", "published"), "undated": (None, "unknown")}, path.name


def test_a_round_trip_keeps_each_date_and_how_it_is_known(tmp_path):
    for path in every_file(tmp_path):
        assert dates(read_offers_file(path)) == EXPECTED, path.name  # offers_io's line reader / JSON
        table = read_offers_table(path)  # the Arrow reader (CSV), the quote's way
        assert dates(table.offers(range(table.n))) == EXPECTED, path.name


def test_the_quote_from_a_reread_file_says_date_unknown(tmp_path):
    for path in every_file(tmp_path):
        data = quote_json(*JOB, "--offers-file", str(path), "--top", "2")
        sources = {s["provider"]: (s["fetched_at"], s["dated_by"]) for s in data["sources"]}
        assert sources == {"dated": ("2026-05-20T00:00:00Z", "published"), "undated": (None, "unknown")}, path.name
        prices = {p["provider"]: (p["fetched_at"], p["dated_by"]) for plan in data["plans"] for p in plan["prices"]}
        assert prices == sources, path.name
        assert data["prices_as_of"] == "2026-05-20T00:00:00Z"  # the oldest KNOWN date
        code, out, _ = quote(*JOB, "--offers-file", str(path), "--top", "2")
        assert code == 0 and "Prices: the offers file of 2026-05-20 (" in out and "; date unknown: undated." in out
        code, details, _ = quote(*JOB, "--offers-file", str(path), "--top", "2", "--details")
        assert code == 0 and "prices: undated via offers-file (a catalog, date unknown), date unknown\n" in details
        assert "undated: " + str(path) + "; from the offers file; date unknown\n" in details
        for text in (out, details):
            assert "1970" not in text and "20792" not in text and "2026-01-02" not in text  # nor the file's time


def test_a_provider_with_one_price_of_unknown_date_is_of_unknown_date(tmp_path):
    dated, undated = source_offers()
    mixed = [dated, undated.model_copy(update={"provider": "dated", "offer_id": "a6000-u2"})]
    path = tmp_path / "mixed.csv"
    with path.open("w", encoding="utf-8", newline="") as fp:
        write_offers_csv(mixed, fp)
    for file in (path, listed(tmp_path, path, "json")):
        data = quote_json(*JOB, "--offers-file", str(file), "--top", "1")
        (source,) = data["sources"]
        assert (source["fetched_at"], source["dated_by"]) == (None, "unknown"), file.name
        whole = load_offers(offers_file=file)  # the offers read whole, not as a table
        assert [(p.known_date, p.dated_by) for p in whole.provenance.values()] == [(None, "unknown")]
        assert whole.prices_as_of == MAY20 and whole.label.endswith("; date unknown: dated")


def test_a_file_written_before_reads_1970_as_unknown(tmp_path):
    """rentopt wrote UNKNOWN_DATE as 1970-01-01T00:00:00Z before; no price was read then."""
    path = tmp_path / "old.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency,fetched_at\n"
                    "undated,a,RTX-A6000-48GB,1,1.20,USD,1970-01-01T00:00:00Z\n"
                    "undated,b,RTX-A6000-48GB,1,1.30,USD,UNKNOWN\n", encoding="utf-8")
    aged(path)
    table = read_offers_table(path)
    for offers in (read_offers_file(path), table.offers(range(table.n))):
        assert [(o.fetched_at, o.dated_by) for o in offers] == [(UNKNOWN_DATE, "unknown")] * 2
    data = quote_json(*JOB, "--offers-file", str(path), "--top", "1")
    assert (data["sources"][0]["fetched_at"], data["sources"][0]["dated_by"]) == (None, "unknown")


def test_a_json_null_date_is_unknown_and_other_non_dates_are_refused(tmp_path):
    dated, _ = source_offers()
    row = dated.model_dump(mode="json")
    path = tmp_path / "null.json"
    path.write_text(json.dumps([{**row, "fetched_at": None}]), encoding="utf-8")  # dated_by left "published"
    assert dates(read_offers_file(path)) == {"dated": (UNKNOWN_DATE, "unknown")}
    for bad, why in ((5, "valid datetime"), ("2026-05-20T00:00:00", "timezone"), ("soon", "valid datetime")):
        path.write_text(json.dumps([{**row, "fetched_at": bad}]), encoding="utf-8")
        result = CliRunner().invoke(cli, ["quote", *JOB, "--offers-file", str(path)])
        assert result.exit_code == 2 and "field fetched_at" in result.stderr and why in result.stderr, bad


def test_a_file_without_dates_is_still_dated_by_its_time(tmp_path):
    """No fetched_at column (or an empty cell): the file's modification time, as before."""
    path = tmp_path / "hand.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency,fetched_at\n"
                    "mine,a,RTX-A6000-48GB,1,1.00,USD,\n", encoding="utf-8")
    aged(path)
    table = read_offers_table(path)
    for offers in (read_offers_file(path), table.offers(range(table.n))):
        assert dates(offers) == {"mine": (FILE_TIME, "published")}


def test_offers_with_nothing_to_list_says_why_on_stderr(tmp_path):
    path = written(tmp_path, "src.csv", write_offers_csv)
    for fmt in ("csv", "json"):
        result = CliRunner().invoke(cli, ["offers", "--offers-file", str(path), "--min-gpus", "8", "--format", fmt])
        assert result.exit_code == 0  # README's exit statuses have no "nothing found"
        assert "No offer matches these filters among 2 offers of dated, undated" in result.stderr
        assert result.stdout in ("[]\n",) or result.stdout.count("\n") == 1  # the list or the header only


# --------------------------------------------------------------------------------------------
# The team catalog: `snapshot export` says how each section is dated, `refresh --from` believes
# the weaker of a section's word and its offers'.


def store_with(provider: str, when: datetime, dated_by: str, hourly: str = "1.00") -> None:
    from rentopt.optimizer.store import open_writable, store_path

    o = offer(f"{provider}-1", gpus=1, hourly=hourly, provider=provider, **A6000).model_copy(
        update={"fetched_at": when, "dated_by": dated_by})
    with open_writable(store_path()) as store:
        store.write_snapshot(provider, [o], fetched_at=when, source=f"{provider} ({dated_by})", now=when)


@pytest.fixture
def two_homes(tmp_path, monkeypatch, rentopt_home):
    def home(name: str) -> None:
        monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / name))

    return home


def test_an_export_says_how_each_section_is_dated(tmp_path, two_homes):
    two_homes("ci")
    store_with("undated", UNKNOWN_DATE, "unknown")
    store_with("byfile", datetime(2026, 11, 1, tzinfo=timezone.utc), "file-time")
    path = tmp_path / "team.json.gz"
    assert CliRunner().invoke(cli, ["snapshot", "export", str(path)]).exit_code == 0
    sections = {p["provider"]: p["dated_by"] for p in json.loads(gzip.decompress(path.read_bytes()))["providers"]}
    assert sections == {"undated": "unknown", "byfile": "file-time"}
    two_homes("laptop")
    assert CliRunner().invoke(cli, ["refresh", "--from", str(path)]).exit_code == 0
    data = quote_json(*JOB, "--providers", "undated", "--top", "1")
    assert [(s["fetched_at"], s["dated_by"]) for s in data["sources"]] == [(None, "unknown")]


def test_an_import_never_takes_a_sections_word_over_its_offers(tmp_path, two_homes):
    """A file exported before sections carried dated_by says "published" over prices dated by
    file time (2026-11-01): they must not replace prices published on 2026-05-20."""
    from rentopt.optimizer.refresh import run_import

    two_homes("ci")
    store_with("lab", datetime(2026, 11, 1, tzinfo=timezone.utc), "file-time", hourly="9.00")
    path = tmp_path / "team.json"
    assert CliRunner().invoke(cli, ["snapshot", "export", str(path)]).exit_code == 0
    data = json.loads(path.read_text())
    del data["providers"][0]["dated_by"]  # as the old export wrote it: the default, "published"
    path.write_text(json.dumps(data))
    two_homes("laptop")
    store_with("lab", MAY20, "published", hourly="1.00")
    (result,) = run_import(str(path)).results
    assert result.status == "kept" and "(dated by file time)" in (result.error or "")
    data = quote_json(*JOB, "--providers", "lab", "--top", "1")
    assert data["plans"][0]["total"] is not None and data["sources"][0]["fetched_at"] == "2026-05-20T00:00:00Z"


def test_the_columns_take_unknown_dates_without_an_offer_and_write_what_the_reference_writes(tmp_path, monkeypatch):
    """A file of unknown dates listed as JSON/CSV: Arrow's reader takes the `unknown` cells itself
    (no line goes to offers_io's parser), and offers_writer writes the bytes offers_io's writers
    write for the file's offers."""
    from rentopt.optimizer import offers_io

    path = written(tmp_path, "src.csv", write_offers_csv)
    reference = {}
    for fmt, writer in (("json", write_offers_json), ("csv", write_offers_csv)):
        out = io.StringIO()
        writer(sorted(read_offers_file(path), key=lambda o: o.provider), out)  # --sort provider
        reference[fmt] = out.getvalue()
    built = []
    real = offers_io.offer_from_cells
    monkeypatch.setattr(offers_io, "offer_from_cells", lambda *a, **k: built.append(a[2]) or real(*a, **k))
    for fmt in ("json", "csv"):
        result = CliRunner().invoke(cli, ["offers", "--offers-file", str(path), "--format", fmt, "--sort", "provider"])
        assert result.exit_code == 0 and result.stdout == reference[fmt], fmt
    assert built == []
