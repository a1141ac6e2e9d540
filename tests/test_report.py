"""`rentopt report`: the numbers match the store, both formats are complete and inert, the CLI.

One price store is filled for the whole module by the real `rentopt refresh` over the recorded
fixtures (every provider, replayed through an httpx.MockTransport), twice:

- night 1 (8 days ago): the fixtures as recorded;
- night 2 (1 day ago): Lambda raised its A10 price, cut its 8x H100 price and lists two hostile
  rows (an offer id `<script>alert(1)</script>` that is the cheapest H100, and an unknown GPU named
  `<img src=x onerror=alert(2)>`); Vast answers HTTP 500, so it is stale with its night-1 prices.

So the store holds history, price moves, a stale provider with an error, unknown GPU names, CNY
prices (the AutoDL sheet) and strings that would inject markup if a renderer forgot to escape.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from click.testing import CliRunner

import rentopt.providers.base as base
from rentopt.optimizer.catalog import load_offers
from rentopt.optimizer.cli import cli
from rentopt.optimizer.currency import EcbHistory, FxTable
from rentopt.optimizer.errors import InputError
from rentopt.optimizer.refresh import run_refresh
from rentopt.optimizer.report import (
    REFERENCE_WORKLOADS,
    SECTIONS,
    ReportRequest,
    build_report,
    gather_prices,
    md,
    parse_since,
    parse_workload,
    provider_sets,
    history_points_by_key,
    history_series,
    render_html,
    render_json,
    render_markdown,
)
from rentopt.optimizer.charts import line_chart, nice_ticks, time_ticks
from rentopt.optimizer.store import HistoryColumns, open_readonly
from rentopt.providers.base import HttpSettings, load_providers
from tools.fixture_routes import find_route
from tools.fixture_routes import load_manifest

SCRIPT_ID = "<script>alert(1)</script>"
EVIL_GPU = "<img src=x onerror=alert(2)>"
NOW = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
NIGHT_1 = NOW - timedelta(days=8)
NIGHT_2 = NOW - timedelta(days=1)
EXTRA_WORKLOADS = ("70b full 10d", "llama-3.1-8b qlora 2B")
# The ECB's published rates of 2026-10-30 per EUR: 1.1172 USD, 7.4326 CNY. The report is built
# with this one day of history, so every price (dated in the last days) converts at
# 7.4326 / 1.1172 = 6.652882 -> 6.65288 CNY per USD, whatever ECB history the installed package ships.
ECB_OCT_30 = EcbHistory.from_csv("Date,USD,CNY,\n2026-10-30,1.1172,7.4326,\n", "ECB test copy")
CNY_PER_USD = Decimal("6.65288")


def lambda_night_2() -> bytes:
    body = json.loads(load_manifest("lambda").routes[0].body())
    data = body["data"]
    data["gpu_1x_a10"]["instance_type"]["price_cents_per_hour"] = 85  # was 75
    data["gpu_8x_h100_sxm5"]["instance_type"]["price_cents_per_hour"] = 2152  # was 2392
    cheap_h100 = json.loads(json.dumps(data["gpu_1x_h100_sxm5"]))
    cheap_h100["instance_type"].update(name=SCRIPT_ID, price_cents_per_hour=149)
    data[SCRIPT_ID] = cheap_h100
    unknown = json.loads(json.dumps(data["gpu_1x_a10"]))
    unknown["instance_type"].update(name="gpu_1x_mystery", gpu_description=f"{EVIL_GPU} (48 GB)")
    data["gpu_1x_mystery"] = unknown
    return json.dumps(body).encode()


def replay(overrides: dict[str, httpx.Response]) -> httpx.MockTransport:
    """Every registered provider's recorded responses; `overrides` answers instead, by provider."""
    registry, _ = load_providers()
    hosts = []
    for name, cls in sorted(registry.items()):
        root = urlsplit(cls().base_url())
        hosts.append((name, load_manifest(name), f"{root.scheme}://{root.netloc}"))

    def handle(request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.netloc.decode()}"
        for name, manifest, api_origin in hosts:
            route = find_route(manifest, request.method, origin, request.url.path, dict(request.url.params), api_origin)
            if route is None:
                continue
            if name in overrides:
                return overrides[name]
            return httpx.Response(route.status, content=route.body(), headers={"Content-Type": "application/json", **route.headers})
        return httpx.Response(404, json={"error": f"no fixture for {request.url}"})

    return httpx.MockTransport(handle)


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory) -> Path:
    """RENTOPT_HOME with a store refreshed twice (module docstring)."""
    home = tmp_path_factory.mktemp("report-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RENTOPT_HOME", str(home))
        for env in ("LAMBDA_API_KEY", "DATACRUNCH_CLIENT_ID", "DATACRUNCH_CLIENT_SECRET"):
            mp.setenv(env, "test-credential")
        fast = HttpSettings(retries=0, backoff_s=0)
        original = base.fetch_all
        mp.setattr(base, "fetch_all", functools.partial(original, fetched_at=NIGHT_1))
        first = run_refresh(None, settings=fast, transport=replay({}))
        assert first.exit_code == 0, [(r.provider, r.error) for r in first.results]
        mp.setattr(base, "fetch_all", functools.partial(original, fetched_at=NIGHT_2))
        second = run_refresh(None, settings=fast, transport=replay({
            "lambda": httpx.Response(200, content=lambda_night_2(), headers={"Content-Type": "application/json"}),
            "vast": httpx.Response(500, text="upstream exploded"),
        }))
        assert {r.provider: r.status for r in second.results}["vast"] == "failed"
    return home


@pytest.fixture
def home(filled_home, monkeypatch) -> Path:
    monkeypatch.setenv("RENTOPT_HOME", str(filled_home))
    return filled_home


@pytest.fixture(scope="module")
def built(filled_home):
    """The report over the filled store, built once, with both renderings."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RENTOPT_HOME", str(filled_home))
        request = ReportRequest(workloads=tuple(parse_workload(w) for w in EXTRA_WORKLOADS))
        report = build_report(request, FxTable.load(histories=[ECB_OCT_30]))
    return report, render_markdown(report), render_html(report)


def store_offers(home: Path):
    with open_readonly(home / "prices.sqlite") as store:  # type: ignore[union-attr]
        return store.load_offers()


def md_rows(text: str, first_cells: tuple[str, ...]) -> list[list[str]]:
    """Cells of the Markdown table rows whose leading cells are `first_cells`."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| "):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if tuple(cells[: len(first_cells)]) == first_cells:
                rows.append(cells)
    return rows


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    level = heading.split(" ")[0]
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start:end if end > 0 else None]


# --------------------------------------------------------------------------------------------
# Markdown


def test_markdown_has_every_section_the_currency_and_the_rate(built):
    _, text, _ = built
    for _, title in SECTIONS:
        assert f"\n## {title}\n" in text
    assert "Amounts in **USD**" in text
    assert "1 USD = 6.65288 CNY (as of 2026-10-30; ECB test copy)" in text  # the AutoDL sheet is priced in CNY
    # the store holds every cloud the recorded SkyPilot catalog serves; the nine clouds it does not
    # serve (404) come from the bundled snapshot, and the header says both
    head = text.split("\n## ")[0]
    assert "Prices from the providers from store " in head and "bundled 9" in head


def test_cheapest_prices_match_the_offers_in_the_store(built):
    _, text, _ = built
    # Each expected price is read by hand from the recorded fixtures and the bundled sheets.
    # Lambda's H100 SXM5 on-demand per GPU on night 2 (fixtures/lambda/instance_types.json, cents
    # per hour): 1x 329, 2x 638 / 2 = 319, 4x 1236 / 4 = 309, 8x 2152 / 8 = 269 (night 2's cut)
    # and the hostile 1x row at 149 (night 2's new offer): the cheapest is 1.49 USD/GPU-h.
    (h100,) = md_rows(text, ("H100-SXM-80GB", "80", "989.4 BF16", "lambda"))
    assert h100[4] == "1.49"
    assert h100[8] == md(f"{SCRIPT_ID} (1-GPU node)")
    # A10: 85 cents on night 2 (75 on night 1); 0.85 / 24 GB = 0.03541 -> 0.0354 per GB-hour,
    # 0.85 / 125 TFLOPS = 0.0068 per TFLOPS-hour
    (a10,) = md_rows(text, ("A10-24GB", "24", "125 BF16", "lambda"))
    assert a10[4] == "0.85"
    assert a10[5] == "0.0354" and a10[6] == "0.00680"
    # CNY prices are converted with the rate shown: AutoDL's RTX 3090 is 1.32 CNY per card-hour
    # (providers/sheets/autodl.toml); 1.32 / 6.65288 = 0.19841 -> 0.1984 USD.
    (autodl,) = md_rows(text, ("RTX-3090-24GB", "24", "71 BF16", "autodl"))
    assert autodl[4] == "0.1984"
    assert autodl[8] == md("rtx3090-1x (1-GPU node, 1.32 CNY/GPU-h)")  # the price before conversion
    # A price sold only by the month says so: JYGPU's 8x RTX 4090 node, 7920 CNY a month discounted
    # (9900 list) and a month of 720 h (providers/sheets/jygpu.toml): 7920 / 720 / 8 = 1.375
    # CNY/GPU-h; 1.375 / 6.65288 = 0.20668 -> 0.2067 USD.
    (jygpu,) = md_rows(text, ("RTX-4090-24GB", "24", "165.2 BF16", "jygpu"))
    assert jygpu[8] == md("8x-rtx4090 (8-GPU node, 1.375 CNY/GPU-h, from a monthly price)")
    assert jygpu[4] == "0.2067"
    # Spot: RunPod sells it as an option on the on-demand offer. fixtures/runpod/gpu_types.json,
    # "NVIDIA H100 80GB HBM3": communitySpotPrice 1.49, secureSpotPrice 1.75 per GPU-hour.
    (runpod,) = md_rows(text, ("H100-SXM-80GB", "80", "989.4 BF16", "runpod"))
    assert runpod[7] == "1.49"


def test_price_cells_are_the_row_by_row_cheapest_of_every_full_offer(built, home):
    # The report finds each cell on the store's planning columns and reads only the candidates'
    # full offers; here every offer is read in full and walked row by row (gather_prices).
    fx = FxTable.load(histories=[ECB_OCT_30])
    offers = [o for o in load_offers().offers if fx.knows(o.currency)]
    expected, _ = gather_prices(offers, fx, "USD")
    assert len(expected) > 10
    assert built[0].prices == expected


def test_freshness_names_the_stale_provider_its_error_and_unknown_gpus(built, home):
    _, text, _ = built
    fresh = section(text, "## Provider freshness")
    (vast,) = md_rows(fresh, ("vast",))
    assert vast[1:3] == ["price store", "25"] and vast[6] == "yes" and "server error HTTP 500" in vast[7]
    assert vast[3] == NIGHT_1.strftime("%Y-%m-%d %H:%M UTC")  # its last good prices
    (lam,) = md_rows(fresh, ("lambda",))
    assert lam[6] == "no" and lam[3] == NIGHT_2.strftime("%Y-%m-%d %H:%M UTC") and lam[7] == "-"
    assert md(EVIL_GPU) in lam[8]
    # A price sheet dates each price by when it was checked: the oldest one is shown, not the refresh.
    (sheet,) = md_rows(fresh, ("autodl",))
    oldest = min(o.fetched_at for o in store_offers(home) if o.provider == "autodl")
    assert oldest < NIGHT_2 and sheet[3] == oldest.strftime("%Y-%m-%d %H:%M UTC")


def test_every_workload_has_a_total_or_a_reason_per_provider(built):
    report, text, _ = built
    providers = ["autodl", "aws", "azure", "datacrunch", "gcp", "jygpu", "lambda", "runpod", "vast"]
    labels = ["7b QLoRA, 3 days", "13b LoRA, 10 days", "7b full fine-tune, 10 days", "70b LoRA, 14 days",
              "70b full fine-tune, 10 days", "llama-3.1-8b QLoRA, 2B tokens"]
    assert [j.workload.text for j in report.jobs] == [*REFERENCE_WORKLOADS, *EXTRA_WORKLOADS]
    reasons = 0
    for label in labels:
        part = section(text, f"### {label}")
        for p in providers:
            rows = md_rows(part, (p,))
            if rows:
                (row,) = rows
                # the known part, and "+ unknown" where a charge has no published price (never 0)
                assert re.fullmatch(r"[\d,]+\.\d\d USD( \+ unknown)?", row[1]), row
                assert row[1].endswith("+ unknown") == any(c.endswith("+ unknown") for c in row[2:7]), row
                items = sum(Decimal(c.removesuffix(" + unknown").replace(",", "")) for c in row[2:7])
                known = Decimal(row[1].removesuffix(" + unknown").removesuffix(" USD").replace(",", ""))
                assert abs(items - known) <= Decimal("0.05")
            else:
                assert re.search(rf"^- \*\*{p}\*\*: .+", part, re.M), (label, p)
                reasons += 1
    assert reasons >= 1  # a 70B full fine-tune (1.1 TB of states) fits no AutoDL node
    assert "- **autodl**: all 20 offers were rejected: 20 offers by memory" in section(text, "### 70b full fine-tune")
    # The best plan per provider is the planner's: totals in the report equal the plans.
    job = report.jobs[0]
    row = next(r for r in job.rows if r.provider == "runpod")
    assert md_rows(section(text, "### 7b QLoRA"), ("runpod",))[0][1] == f"{row.plan.total.quantize(Decimal('0.01')):,} USD"


def test_history_and_the_largest_moves_come_from_the_snapshots(built):
    report, text, _ = built
    moves = section(text, "### Largest price moves")
    (h100,) = md_rows(moves, ("lambda", "H100-SXM-80GB", "on-demand"))
    assert h100[3:6] == ["2.99", "1.49", "-50.2 %"]  # 23.92/8 before; the 1.49 offer after
    (a10,) = md_rows(moves, ("lambda", "A10-24GB", "on-demand"))
    assert a10[3:6] == ["0.75", "0.85", "+13.3 %"]
    assert not md_rows(moves, ("vast",))  # one snapshot only: nothing to compare
    assert report.moves[0].gpu == "H100-SXM-80GB"  # the biggest move first
    history = section(text, "## Price history")
    (line,) = md_rows(history, ("H100-SXM-80GB", "lambda", "on-demand"))
    assert line[4:] == ["2", "2.99", "1.49", "1.49", "2.99", "█▁"]
    assert "H100-SXM-80GB" in report.chart_gpus


def test_markdown_tables_keep_their_shape_and_provider_text_stays_inert(built):
    _, text, _ = built
    assert SCRIPT_ID not in text and EVIL_GPU not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    columns = None
    for line in text.splitlines():
        if line.startswith("|"):
            count = len(re.findall(r"(?<!\\)\|", line))
            columns = columns if columns is not None else count
            assert count == columns, line
        else:
            columns = None


def test_md_escapes_pipes_newlines_markup_and_links():
    assert md("a|b\nc") == "a\\|b c"
    assert md("<b>x</b> [y](javascript:z) `q` *s*") == "&lt;b&gt;x&lt;/b&gt; \\[y\\](javascript:z) \\`q\\` \\*s\\*"
    assert md("gpu_1x_a10") == "gpu_1x_a10" and md("_x_") == "\\_x\\_"


def test_the_report_never_writes_the_store(home):
    def state() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(home.iterdir()) if p.is_file()}

    before = state()
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda"])
    assert result.exit_code == 0, result.output
    assert state() == before


# --------------------------------------------------------------------------------------------
# HTML


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    handle_startendtag = handle_starttag


def svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def test_html_is_one_self_contained_file(built):
    _, _, page = built
    parser = Tags()
    parser.feed(page)
    names = {t for t, _ in parser.tags}
    assert "script" not in names and "iframe" not in names and "object" not in names
    for tag, attrs in parser.tags:
        for attr in ("src", "href", "xlink:href", "action"):
            value = attrs.get(attr)
            if value is not None:
                assert value.startswith("#"), (tag, attr, value)  # only in-page links (the contents)
        if tag == "link":
            pytest.fail(f"external resource link: {attrs}")
    assert "@import" not in page and "url(" not in page
    assert [a["href"] for t, a in parser.tags if t == "a"] == [f"#{key}" for key, _ in SECTIONS]
    assert all(f'id="{key}"' in page for key, _ in SECTIONS)
    assert "@media print" in page


def test_every_chart_has_data_and_axis_labels_with_units(built):
    report, _, page = built
    charts = svgs(page)
    ids = [c.get("id") for c in charts]
    assert "chart-prices" in ids
    assert sum(i.startswith("chart-job-") for i in ids) == len(report.jobs)
    assert sum(i.startswith("chart-history-") for i in ids) >= 1
    for chart in charts:
        title = chart.find("title")
        assert title is not None and title.text
        bars = [r for r in chart.iter("rect") if r.get("class") == "bar" and float(r.get("width")) > 0]
        lines = [p for p in chart.iter("path") if p.get("class") == "series" and p.get("d")]
        points = [c for c in chart.iter("circle") if c.get("class") == "point"]
        assert bars or lines or points, chart.get("id")
        labels = [t.text or "" for t in chart.iter("text") if t.get("class") == "axis-label"]
        assert labels and any("USD" in x for x in labels), (chart.get("id"), labels)
        assert chart.find(".//g[@class='legend']") is not None and chart.find(".//g[@class='grid']") is not None
    # Values on the price bars are the table's numbers.
    prices = next(c for c in charts if c.get("id") == "chart-prices")
    values = {t.text for t in prices.iter("text") if t.get("class") == "value"}
    assert "1.49" in values and "2.39" in values  # lambda's and runpod's H100 SXM
    history = [c for c in charts if c.get("id", "").startswith("chart-history-")]
    assert any("(UTC)" in (t.text or "") for c in history for t in c.iter("text"))


def test_provider_strings_appear_only_escaped_in_html(built):
    _, _, page = built
    assert SCRIPT_ID not in page and EVIL_GPU not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in page
    parser = Tags()
    parser.feed(page)
    assert not [t for t, _ in parser.tags if t in ("script", "img")]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (Debian/Ubuntu: sudo apt-get install -y chromium)")
def test_the_html_renders_in_headless_chromium(built, tmp_path):
    _, _, page = built
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    png = tmp_path / "report.png"
    try:
        subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1280,2000",
             path.as_uri()],
            capture_output=True, timeout=60, check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("Chromium did not finish rendering the report within 60 s (a script or a fetch waiting?)")
    assert png.exists(), "Chromium wrote no screenshot"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # text, tables and charts; a blank page compresses to a few KB


# --------------------------------------------------------------------------------------------
# The bundled snapshot, inputs, and the CLI


def test_without_a_store_the_report_uses_the_bundled_snapshot_and_says_so(rentopt_home):
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda,jygpu"])
    assert result.exit_code == 0, result.output
    # lambda's file last changed 2026-05-07 in the mirror (shared catalogs README)
    assert "Prices from the bundled snapshot of published prices (oldest 2026-05-07)" in result.output
    (row,) = md_rows(section(result.output, "## Provider freshness"), ("lambda",))
    assert row[1] == "bundled snapshot of 2026-05-07" and row[5:7] == ["-", "no"]
    # the bundled snapshot carries the daily lambda catalogs: a fresh install has real history
    history = section(result.output, "## Price history")
    assert "lambda up to 2026-05-07" in history  # its last version; repeated copies are no history
    (b200,) = md_rows(history, ("B200-SXM-180GB", "lambda", "on-demand"))
    assert int(b200[4]) == 2  # two distinct versions in the 30 days before 2026-05-07 (04-20 and 05-07)
    assert not rentopt_home.exists()


@pytest.mark.parametrize("args, fmt", [
    (["-o", "{dir}/team.html"], "html"),
    (["-o", "{dir}/team.HTM"], "html"),
    (["-o", "{dir}/team.md"], "markdown"),
    (["-o", "{dir}/team.markdown"], "markdown"),
    (["-o", "{dir}/team.json"], "json"),
    (["--format", "markdown", "-o", "{dir}/team.txt"], "markdown"),
    (["--format", "html", "-o", "{dir}/team.md"], "html"),
])
def test_output_file_and_format_from_its_suffix(home, tmp_path, args, fmt):
    args = [a.format(dir=tmp_path) for a in args]
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda", *args])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = Path(args[-1]).read_text(encoding="utf-8")
    start = {"html": "<!DOCTYPE html>", "markdown": "# GPU rental: provider comparison", "json": "{"}[fmt]
    assert text.startswith(start)


@pytest.mark.parametrize("name", ["r.pdf", "r.txt", "report", "r.docx"])
def test_an_output_suffix_rentopt_cannot_write_is_refused(home, tmp_path, name):
    target = tmp_path / name
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda", "-o", str(target)])
    assert result.exit_code == 2
    assert result.output == (f"rentopt: error: -o {target}: rentopt writes the report as Markdown (.md, .markdown), "
                             "HTML (.html, .htm) or JSON (.json); name the file with one of those suffixes, or choose "
                             "the format with --format\n")
    assert not target.exists()


def test_the_json_summary_says_what_the_markdown_says(built, home):
    report, text, _ = built
    data = json.loads(render_json(report))
    assert data["currency"] == "USD" and data["origin"] == "store"
    assert [(r["currency"], r["per_usd"], r["as_of"]) for r in data["fx"]] == [("CNY", "6.65288", "2026-10-30")]
    (h100,) = [p for p in data["prices"] if p["gpu"] == "H100-SXM-80GB" and p["provider"] == "lambda"]
    (md_h100,) = md_rows(text, ("H100-SXM-80GB", "80", "989.4 BF16", "lambda"))
    assert Decimal(h100["on_demand"]["per_gpu_hour"]) == Decimal("1.49") and md_h100[4] == "1.49"  # 149 cents
    assert h100["on_demand"]["offer_id"] == SCRIPT_ID  # raw in JSON: escaping is the renderer's job
    (autodl,) = [p for p in data["prices"] if p["gpu"] == "RTX-3090-24GB" and p["provider"] == "autodl"]
    assert (autodl["on_demand"]["native_per_gpu_hour"], autodl["on_demand"]["native_currency"]) == ("1.32", "CNY")
    assert [j["workload"]["text"] for j in data["jobs"]] == [j.workload.text for j in report.jobs]
    for jobs, rows in zip(report.jobs, (j["providers"] for j in data["jobs"])):
        assert [r["provider"] for r in rows] == [r.provider for r in jobs.rows]
        for row, r in zip(jobs.rows, rows):
            assert r["feasible"] == (row.plan is not None)
            if row.plan is not None:
                assert Decimal(r["total"]) == row.plan.total
                # an item with an unpriced part is null, never its known part passed off as the whole
                assert all((r["line_items"][k] is None) == (k in r["unknown_line_items"]) for k in r["line_items"])
                known = [Decimal(v) for v in r["line_items"].values() if v is not None]
                assert sum(known) == row.plan.total if not r["unknown_line_items"] else sum(known) <= row.plan.total
    stale = {f["provider"]: f["stale"] for f in data["freshness"]}
    assert stale["vast"] is True and stale["lambda"] is False
    moves = {(m["provider"], m["gpu"]): m for m in data["history"]["moves"]}
    assert moves[("lambda", "H100-SXM-80GB")]["change_pct"] == "-50.2"


def test_report_format_json_on_stdout_is_valid_json(home):
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda,sheet", "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # "sheet" names the plugin: it stands for the platforms it delivers
    assert {p["provider"] for p in data["prices"]} == {"lambda", "autodl", "jygpu"}


def test_stdout_is_markdown_by_default_with_currency_and_fx_override(home):
    result = CliRunner().invoke(cli, ["report", "--providers", "autodl", "--currency", "cny", "--fx", "CNY=7.0"])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("# GPU rental: provider comparison")
    assert "Amounts in **CNY**" in text and "1 USD = 7.0 CNY (as of user override; --fx CNY=7.0)" in text
    (row,) = md_rows(text, ("RTX-3090-24GB", "24", "71 BF16", "autodl"))
    assert row[4] == "1.32"  # AutoDL's own CNY price: no round trip through USD
    assert [r[0] for r in md_rows(section(text, "## Provider freshness"), ("autodl",))] == ["autodl"]
    assert "| lambda |" not in text


@pytest.mark.parametrize("args, message", [
    (["--since", "3x"], "--since '3x' is not a window such as 7d, 30d, 12w or 6m"),
    (["--since", "0d"], "--since '0d' is not a window"),
    (["--workload", "13b lora"], "--workload '13b lora' is not MODEL MODE DAYSd or MODEL MODE TOKENS"),
    (["--workload", "13b sing 3d"], "mode 'sing' is not one of full, lora, qlora"),
    (["--workload", "13b lora -3d"], "is not MODEL MODE DAYSd or MODEL MODE TOKENS"),
    (["--workload", "zz-9000 lora 3d"], "--workload 'zz-9000 lora 3d': unknown model 'zz-9000'"),
    (["--providers", "vats"], "unknown provider vats"),
    (["--currency", "XYZ"], "unknown currency 'XYZ'"),
    (["--fx", "CNY"], "--fx 'CNY' is not CODE=RATE"),
])
def test_bad_input_is_one_line_and_exit_2(home, args, message):
    result = CliRunner().invoke(cli, ["report", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.output


def test_an_unwritable_output_path_is_one_line(home, tmp_path):
    result = CliRunner().invoke(cli, ["report", "--providers", "lambda", "-o", str(tmp_path / "no" / "such" / "r.md")])
    assert result.exit_code == 2
    assert "cannot write the report to" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("text, days", [("30d", 30), ("7D", 7), ("12w", 84), ("6m", 180), (" 1d ", 1)])
def test_since_accepts_days_weeks_and_months(text, days):
    assert parse_since(text) == timedelta(days=days)


@pytest.mark.parametrize("text, days, tokens", [
    ("llama-3.1-8b qlora 3d", Decimal(3), None),
    ("7b full 2B", None, 2e9),
    ("13b LoRA 1.5days", Decimal("1.5"), None),
    ("7b lora 5e8", None, 5e8),
    ("7b lora 500M", None, 5e8),
])
def test_workload_syntax(text, days, tokens):
    w = parse_workload(text)
    assert (w.days, w.tokens) == (days, tokens)


def test_a_bad_workload_is_an_input_error():
    with pytest.raises(InputError, match="mode 'inference' is not one of"):
        parse_workload("7b inference 3d")


def test_nice_ticks_cover_the_range():
    for lo, hi in [(0, 7.3), (0, 0.004), (0.21, 0.29), (0, 14.2416), (1000, 39600)]:
        ticks = nice_ticks(lo, hi)
        assert ticks[0] <= lo and ticks[-1] >= hi and 3 <= len(ticks) <= 8
        steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
        assert len(steps) == 1


# --------------------------------------------------------------------------------------------
# The history chart's time axis, refresh runs, and per-day exchange rates

T0 = datetime(2026, 12, 1, 3, 15, tzinfo=timezone.utc)


def x_tick_labels(svg: str) -> list[str]:
    root = ET.fromstring(svg)
    # x ticks sit under the plot (text-anchor middle); y ticks are right-aligned (end)
    return [t.text or "" for t in root.iter("text") if t.get("class") == "tick" and t.get("text-anchor") == "middle"]


@pytest.mark.parametrize("times, expected", [
    # one nightly run's providers (seconds apart) and two runs 20 minutes apart on one day
    ([T0, T0 + timedelta(minutes=20), T0 + timedelta(minutes=40)], ["03:20", "03:30", "03:40", "03:50"]),
    # a week of nightly refreshes: daily would be 7 ticks, so every two days at midnight UTC, by date
    ([T0 - timedelta(days=d) for d in range(7, -1, -1)], ["11-26", "11-28", "11-30"]),
    # half a year of snapshots: the first of each month
    ([datetime(2026, m, 15, 3, tzinfo=timezone.utc) for m in range(6, 12)],
     ["2026-07", "2026-08", "2026-09", "2026-10", "2026-11"]),
])
def test_history_chart_ticks_fit_the_span(times, expected):
    svg = line_chart("c", "H100", "USD per GPU-hour (min)",
                     [("lambda", "#0072B2", False, [(t, 2.0 + i / 10) for i, t in enumerate(times)])])
    labels = x_tick_labels(svg)
    assert labels == expected
    assert len(set(labels)) == len(labels)  # never "12-01" five times


def test_a_single_refresh_gets_a_time_not_a_date_repeated():
    svg = line_chart("c", "H100", "USD per GPU-hour (min)", [("lambda", "#0072B2", False, [(T0, 2.0)])])
    assert x_tick_labels(svg) == ["02:30", "03:00", "03:30", "04:00"]  # T0 = 03:15, an hour either side


def test_time_ticks_are_round_and_inside_the_span():
    for t0, t1 in [(T0, T0 + timedelta(minutes=7)), (T0, T0 + timedelta(hours=30)), (T0, T0 + timedelta(days=90)),
                   (T0, T0 + timedelta(days=1500))]:
        ticks, fmt = time_ticks(t0, t1)
        assert 2 <= len(ticks) <= 5 and all(t0 <= t <= t1 for t in ticks), (t1 - t0, ticks)
        assert len({f"{t:{fmt}}" for t in ticks}) == len(ticks)
        assert all(t.second == 0 and t.microsecond == 0 for t in ticks)


def test_history_has_one_point_per_refresh_run():
    later = T0 + timedelta(days=1)
    by_key = {("lambda", "H100-SXM-80GB", False): {T0: Decimal("2.99"), later: Decimal("1.49")},
              # runpod's snapshot of the same runs landed 40 s later
              ("runpod", "H100-SXM-80GB", False): {T0 + timedelta(seconds=40): Decimal("2.69"),
                                                   later + timedelta(seconds=40): Decimal("2.39")}}
    series = history_series(by_key, T0 - timedelta(days=30))["H100-SXM-80GB"]
    assert [[t for t, _ in s.points] for s in series] == [[T0, later], [T0, later]]
    assert [s.points[0][1] for s in series] == [Decimal("2.99"), Decimal("2.69")]


def test_history_converts_each_snapshot_at_its_own_days_rate():
    # ECB per EUR: 2026-07-31 USD 1.1485, CNY 7.7539 (6.75133 CNY/USD); 2026-10-30 USD 1.1172,
    # CNY 7.4326 (6.65288 CNY/USD).
    fx = FxTable.load(histories=[EcbHistory.from_csv(
        "Date,USD,CNY,\n2026-10-30,1.1172,7.4326,\n2026-07-31,1.1485,7.7539,\n", "ECB test copy")])
    aug, nov = datetime(2026, 8, 3, 3, tzinfo=timezone.utc), datetime(2026, 11, 2, 3, tzinfo=timezone.utc)
    points = HistoryColumns(["sheet"] * 2, [aug, nov], ["RTX-3090-24GB"] * 2, [1, 1], [False] * 2, ["CNY"] * 2,
                            [Decimal("1.32")] * 2, ["sheet"] * 2)
    by_key = history_points_by_key(points, fx, "USD")
    series = by_key[("sheet", "RTX-3090-24GB", False)]
    # 1.32 / 6.75133 = 0.195517; 1.32 / 6.65288 = 0.198410: the same CNY price, two USD values.
    assert series[aug].quantize(Decimal("0.000001")) == Decimal("0.195517")
    assert series[nov].quantize(Decimal("0.000001")) == Decimal("0.198410")


def test_history_keeps_each_snapshots_cheapest_over_sizes_and_currencies_and_no_unrated_currency():
    fx = FxTable.load(overrides={"CNY": Decimal("8")}, histories=[])
    later = T0 + timedelta(days=1)
    #           provider,  time,  gpu,            GPUs, spot,  currency, min per GPU-hour
    points = [("lambda", T0, "H100-SXM-80GB", 8, False, "USD", "2.000000"),
              ("lambda", T0, "H100-SXM-80GB", 1, False, "CNY", "14.000000"),  # 14 / 8 = 1.75 USD: the cheapest
              ("lambda", T0, "H100-SXM-80GB", 1, False, "XYZ", "0.100000"),  # no rate for XYZ: left out
              ("lambda", T0, "H100-SXM-80GB", 8, True, "USD", "1.000000"),
              ("lambda", later, "H100-SXM-80GB", 8, False, "USD", "2.500000"),
              ("autodl", T0, "H100-SXM-80GB", 2, False, "CNY", "16.000000")]
    provider, when, gpu, gpus, spot, currency, low = (list(c) for c in zip(*points))
    columns = HistoryColumns(provider, when, gpu, gpus, spot, currency, [Decimal(x) for x in low], provider)
    assert history_points_by_key(columns, fx, "USD") == {
        ("lambda", "H100-SXM-80GB", False): {T0: Decimal("1.75"), later: Decimal("2.5")},
        ("lambda", "H100-SXM-80GB", True): {T0: Decimal(1)},
        ("autodl", "H100-SXM-80GB", False): {T0: Decimal(2)},
    }
    # in CNY: the USD prices times 8, the CNY ones as they are
    assert history_points_by_key(columns, fx, "CNY")[("lambda", "H100-SXM-80GB", False)] == {T0: 14, later: 20}


def test_an_unknown_charge_is_shown_as_unknown_never_as_free_and_ranks_after_a_fully_priced_tie(rentopt_home):
    """Two providers with the same card, price and disk: 'aaa' publishes no egress price, 'bbb' says
    egress is free. Their known totals tie; 'aaa' must not read as fully priced or win the tie."""
    from rentopt.optimizer.catalog import OfferSet, Provenance
    from rentopt.optimizer.models import Offer, PriceOption
    from rentopt.optimizer.report import job_table, price_workload

    when = datetime(2026, 11, 30, tzinfo=timezone.utc)

    def offer(provider: str, egress: Decimal | None) -> Offer:
        return Offer(provider=provider, offer_id=f"{provider}-h100", gpu="H100-SXM-80GB", gpu_raw="H100 SXM", gpus=1,
                     gpu_memory_gb=80, interconnect="nvlink", price_options=[PriceOption(unit="hour", amount=Decimal("2.00"))],
                     storage_gb_month=Decimal("0.10"), egress_gb=egress, ingress_gb=Decimal(0), currency="USD", fetched_at=when,
                     source="hand-made for this test")

    offers = [offer("aaa", None), offer("bbb", Decimal(0))]
    offer_set = OfferSet(offers=offers, origin="offers-file", prices_as_of=when, label="test",
                         provenance={p: Provenance(p, when, "hand-made", 1, origin="offers-file") for p in ("aaa", "bbb")})
    fx = FxTable.load(histories=[ECB_OCT_30])
    jobs = price_workload(parse_workload("7b qlora 1d"), offer_set, ["aaa", "bbb"], fx, "USD")
    first, second = jobs.rows
    assert first.plan.total == second.plan.total  # the known parts tie
    assert (first.provider, second.provider) == ("bbb", "aaa")
    assert second.plan.unknown_charges and not first.plan.unknown_charges
    class Stub:
        currency = "USD"

    table = job_table(Stub(), jobs)  # type: ignore[arg-type]
    egress_col = table.headers.index("egress (USD)")
    aaa = next(row for row in table.rows if row[0] == "aaa")
    assert aaa[1].endswith("USD + unknown") and aaa[egress_col] == "0.00 + unknown"
    bbb = next(row for row in table.rows if row[0] == "bbb")
    assert "unknown" not in " ".join(map(str, bbb))
    from rentopt.optimizer.report import _job_json
    as_json = _job_json(second)
    assert as_json["unknown_line_items"] == ["egress"] and as_json["unknown_charges"] == second.plan.unknown_charges


def test_one_providers_set_alone_is_its_offers_less_the_suspect():
    """The report builds a provider's own set only when it is planned alone (`only`): the same
    offers as in every provider's sets. With "a" at 2.00 and "a2" at 2.10, "b" at 2.50, "c" at
    3.00 and "cheap" at 0.30 (under a fifth of the others' median 2.50, held out): "a" holds
    a-h100 and a2's offer is another provider's; "cheap" has no set, nor has a provider absent."""
    from rentopt.optimizer.catalog import OfferSet
    from rentopt.optimizer.report import provider_sets
    from tests.test_honest_prices import MARKET, h100s

    offers = OfferSet(offers=h100s(*MARKET, ("a2", "2.10")), origin="offers-file", provenance={}, prices_as_of=None,
                      label="test")
    assert sorted(provider_sets(offers)) == ["a", "a2", "b", "c"]
    for p, want in [("a", ["a-h100"]), ("a2", ["a2-h100"]), ("c", ["c-h100"]), ("cheap", None), ("zz", None)]:
        one = provider_sets(offers, only=[p])
        assert list(one) == ([] if want is None else [p])
        if want is not None:
            assert list(one[p].table().offer_id) == want
    both = provider_sets(offers, only=["c", "a", "cheap"])
    assert list(both) == ["a", "c"]


def test_a_suspect_price_is_held_out_of_the_report_too():
    """Planned alone, a provider has no other sellers to be compared with: the catalog-wide
    suspect rule must still hold its price out. Sellers of the H100 at 2.00, 2.50, 3.00 and 0.30
    USD an hour: the others' median 2.50, a fifth of it 0.50 > 0.30, so "cheap" is suspect and has
    nothing left to plan with; the report says so instead of a 0.30-an-hour plan."""
    from rentopt.optimizer.catalog import OfferSet
    from rentopt.optimizer.currency import FxTable
    from rentopt.optimizer.report import parse_workload, price_workload, provider_sets
    from tests.test_honest_prices import MARKET, h100s

    offers = OfferSet(offers=h100s(*MARKET), origin="offers-file", provenance={}, prices_as_of=None, label="test")
    by_provider = provider_sets(offers)
    assert sorted(by_provider) == ["a", "b", "c"]
    job = price_workload(parse_workload("7b lora 1d"), offers, ["a", "b", "c", "cheap"], FxTable.load(), "USD")
    rows = {r.provider: r for r in job.rows}
    assert rows["cheap"].plan is None and "suspect" in rows["cheap"].reason
    assert all(rows[p].plan is not None for p in "abc")
