"""`rentopt report` for a chosen GPU, on a readable scale, at any width (issue 26, the report).

- Filters: `--gpu` reads names as quote's `--gpu` does and keeps only those GPUs in every section;
  `--min-gpu-memory` drops smaller cards. Checked against `rentopt offers`, a separate reader of
  the same prices, and against the cards' memory as their makers publish it.
- Scale: one monthly rental next to hourly ones puts the bar chart on a log axis, so the hourly
  bars stay long and apart. The positions are worked out by hand below.
- Layout: the HTML rendered by headless Chromium at 400 and 1280 px wide: screenshots of those
  sizes, no sideways scrolling of the page, the chart drawn for the width, chart text at 10 px or
  more and inside its chart, axis labels not overlapping, tables in their own scroll box. Skipped where Chromium is not
  installed (Debian/Ubuntu: apt-get install -y chromium).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.charts import Bar, bar_chart
from rentopt.optimizer.cli import cli

# Memory per card from the makers' data sheets (NVIDIA RTX 4090: 24 GB GDDR6X; RTX 3090: 24 GB;
# L4: 24 GB; A10: 24 GB; H100 SXM: 80 GB HBM3): the cards --min-gpu-memory 48 must drop.
CARDS_24_GB = {"RTX-4090-24GB", "RTX-3090-24GB", "L4-24GB", "A10-24GB"}


def report_json(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["report", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def offers_json(*args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["offers", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def job_gpus(data: dict) -> set[str]:
    return {p["gpu"] for j in data["jobs"] for p in j["providers"] if p["feasible"]}


# --------------------------------------------------------------------------------------------
# Filters


def test_an_h100_only_report_lists_only_h100_offers(rentopt_home):
    data = report_json("--gpu", "H100")
    # a bare H100 is the SXM card, as in quote's --gpu, and the report says how it read the name
    assert {row["gpu"] for row in data["prices"]} == {"H100-SXM-80GB"}
    assert any("'H100' read as H100-SXM-80GB" in n for n in data["notes"])
    assert data["filters"]["gpus"] == ["H100-SXM-80GB"] and data["filters"]["min_gpu_memory_gb"] is None
    # whole-job plans run on H100s only; the history is the H100's
    assert job_gpus(data) == {"H100-SXM-80GB"}
    assert {s["gpu"] for s in data["history"]["series"]} <= {"H100-SXM-80GB"}
    # the providers compared are exactly those `rentopt offers` finds selling the card
    sellers = {o["provider"] for o in offers_json("--gpu", "H100-SXM-80GB")}
    assert {f["provider"] for f in data["freshness"]} == sellers
    assert {row["provider"] for row in data["prices"]} == sellers
    everyone = {f["provider"] for f in report_json()["freshness"]}
    assert everyone - sellers, "the bundled snapshot has providers without H100s: the filter must drop them"
    assert all(p in data["filters"]["text"] for p in everyone - sellers)


def test_the_markdown_and_html_say_which_filter_made_them(rentopt_home, tmp_path):
    result = CliRunner().invoke(cli, ["report", "--gpu", "h100-sxm-80gb", "--min-gpu-memory", "48"])
    assert result.exit_code == 0, result.output
    assert "Filters: only H100-SXM-80GB (--gpu), with at least 48 GB per GPU (--min-gpu-memory): " in result.output
    prices = result.output.split("## Cheapest price per GPU-hour", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in prices.splitlines() if line.startswith("| ") and not line.startswith("| GPU ")]
    assert rows and all(line.startswith("| H100-SXM-80GB |") for line in rows)
    out = tmp_path / "h100.html"
    assert CliRunner().invoke(cli, ["report", "--gpu", "H100", "-o", str(out)]).exit_code == 0
    assert '<p class="meta filters"><strong>Filters</strong>: only H100-SXM-80GB (--gpu)' in out.read_text()


def test_min_gpu_memory_48_drops_the_24_gb_cards(rentopt_home):
    everything = report_json()
    assert {row["gpu"] for row in everything["prices"]} & CARDS_24_GB  # there were some to drop
    data = report_json("--min-gpu-memory", "48")
    gpus = {row["gpu"] for row in data["prices"]}
    assert gpus and not gpus & CARDS_24_GB
    assert all(row["memory_gb"] >= 48 for row in data["prices"])
    assert not job_gpus(data) & CARDS_24_GB and job_gpus(data)
    # what is left is what `rentopt offers --min-gpu-memory 48` sells (GPUs the catalog knows)
    assert gpus == {o["gpu"] for o in offers_json("--min-gpu-memory", "48") if o["gpu"]}
    assert data["filters"] == {"gpus": [], "min_gpu_memory_gb": 48.0, "text": data["filters"]["text"]}


@pytest.mark.parametrize("args, message", [
    (["--gpu", "H100:8"], "rentopt: error: --gpu H100:8: the report compares GPU models at every node size; name "
                          "the GPU alone (--gpu H100), or price 8-GPU nodes with `rentopt quote --gpu H100:8`\n"),
    (["--gpu", "A100"], "rentopt: error: GPU name 'A100' is ambiguous: choose A100-SXM4-80GB, A100-SXM4-40GB, "
                        "A100-PCIe-80GB or A100-PCIe-40GB"),
    (["--gpu", "H100", "--min-gpu-memory", "100"], "matches --gpu H100-SXM-80GB --min-gpu-memory 100; `rentopt offers "
                                                    "--gpu H100-SXM-80GB --min-gpu-memory 100` lists what matches"),
])
def test_a_filter_nothing_matches_is_one_line_and_exit_2(rentopt_home, tmp_path, args, message):
    target = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", *args, "-o", str(target)])
    assert result.exit_code == 2
    assert message in result.output and result.output.count("\n") == 1
    assert not target.exists()


# --------------------------------------------------------------------------------------------
# The scale rule


def bars(svg: str) -> list[tuple[float, float]]:
    """(x, width) of each bar rectangle, in drawing order."""
    root = ET.fromstring(svg)
    return [(float(r.get("x")), float(r.get("width"))) for r in root.iter("rect") if r.get("class") == "bar"]


def tick_positions(svg: str) -> dict[str, float]:
    root = ET.fromstring(svg)
    return {t.text: float(t.get("x")) for t in root.iter("text") if t.get("class") == "tick"}


def three_plans(monthly: float) -> list[tuple[str, list[Bar]]]:
    return [("", [Bar("hourly-a", [(100.0, "#0072B2", "a")], "100.00"),
                  Bar("hourly-b", [(120.0, "#0072B2", "b")], "120.00"),
                  Bar("monthly", [(monthly, "#0072B2", "m")], f"{monthly:.2f}")])]


def test_one_monthly_price_puts_the_bars_on_a_log_axis_worked_out_by_hand():
    # Wide chart: 880 wide, bars from x=230 to 880 - 120 = 760, so 530 px. The bars are 100 and
    # 120 (hourly) and 15,840 (a month): 158x apart, so a log axis. It starts at the power of ten
    # at or below half the smallest bar (50 -> 10) and ends at the one at or above the largest
    # (15,840 -> 100,000): 4 decades, 530 / 4 = 132.5 px each.
    #   100:    log10(100 / 10)    = 1             -> 132.50 px
    #   120:    log10(120 / 10)    = 1.0791812     -> 142.99 px
    #   15,840: log10(15,840 / 10) = 3.1997551     -> 423.97 px
    # On the old linear axis (0 to 20,000) the hourly bars were 2.65 and 3.18 px: one sliver.
    svg = bar_chart("c", "Whole-job cost", "total job cost (USD)", three_plans(15840.0), [])
    assert ET.fromstring(svg).get("data-scale") == "log"
    (xa, a), (xb, b), (xm, m) = bars(svg)
    assert xa == xb == xm == 230.0
    assert (a, b, m) == (132.5, 143.0, 424.0)  # drawn to 0.1 px
    assert b - a >= 10  # the two hourly plans are told apart
    assert tick_positions(svg) == {"10": 230.0, "100": 362.5, "1,000": 495.0, "10,000": 627.5, "100,000": 760.0}
    assert "log scale" in "".join(t.text or "" for t in ET.fromstring(svg).iter("text") if t.get("class") == "axis-label")
    # Narrow chart (phones): bars from x=8 to 376 - 8 = 368, 360 px: 90 px a decade.
    #   100 -> 90.0, 120 -> 1.0791812 x 90 = 97.13 -> 97.1, 15,840 -> 3.1997551 x 90 = 287.98 -> 288.0
    narrow = bar_chart("c", "Whole-job cost", "total job cost (USD)", three_plans(15840.0), [], narrow=True)
    assert [w for _, w in bars(narrow)] == [90.0, 97.1, 288.0]


def test_within_ten_times_the_axis_stays_linear_from_zero():
    # 100, 120 and 900: 9x apart. Linear ticks for 0-900 step by 250 (225 rounded up to 1, 2, 2.5
    # or 5 x 10^k) to 1,000: 530 px / 1,000 = 0.53 px per unit -> 53.0, 63.6, 477.0 px.
    svg = bar_chart("c", "t", "USD", three_plans(900.0), [])
    assert ET.fromstring(svg).get("data-scale") == "linear"
    assert [w for _, w in bars(svg)] == [53.0, 63.6, 477.0]
    # just past ten times: log (1,001 / 100 > 10)
    assert ET.fromstring(bar_chart("c", "t", "USD", three_plans(1001.0), [])).get("data-scale") == "log"


def test_a_stacked_bar_on_a_log_axis_splits_its_length_by_share():
    # total 120 -> 142.99 px as above (a second bar of 15,840 sets the axis), split 90 : 30, that
    # is 3/4 and 1/4: 107.24 and 35.75 px, the second starting where the first ends.
    groups = [("", [Bar("p", [(90.0, "#0072B2", "compute"), (30.0, "#E69F00", "storage")], "120.00"),
                    Bar("m", [(15840.0, "#0072B2", "compute")], "15840.00")])]
    (x1, w1), (x2, w2), _ = bars(bar_chart("c", "t", "USD", groups, []))
    assert (x1, w1, x2, w2) == (230.0, 107.2, 337.2, 35.7)


MONTHLY_SHEETS = {"hourlya": ("hour", "0.45"), "hourlyb": ("hour", "0.55"), "monthlyc": ("month", "1200")}


def write_sheets(home: Path) -> None:
    """Three platforms renting RTX 4090s: two by the hour (0.45 and 0.55 USD per GPU-hour) and
    one by the month only (1,200 USD per GPU-month)."""
    folder = home / "sheets"
    folder.mkdir(parents=True, exist_ok=True)
    for name, (unit, amount) in MONTHLY_SHEETS.items():
        (folder / f"{name}.toml").write_text(f'''platform = "{name}"
currency = "USD"
source = "https://example.com/{name}"
read_on = 2026-11-20

[billing]
granularity_s = 3600

[[offers]]
id = "rtx4090"
gpu = "RTX-4090-24GB"
gpus = [1, 2, 4, 8]
interconnect = "pcie"

[[offers.prices]]
unit = "{unit}"
amount = {amount}
per = "gpu"
''', encoding="utf-8")


def test_a_catalog_with_one_monthly_price_keeps_the_hourly_bars_apart(rentopt_home, tmp_path):
    write_sheets(rentopt_home)
    out = tmp_path / "r.html"
    result = CliRunner().invoke(cli, ["report", "--providers", ",".join(MONTHLY_SHEETS), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    wide = ET.fromstring(re.search(r'<svg[^>]* id="chart-job-0".*?</svg>', page, re.S).group(0))
    assert "7b QLoRA, 3 days" in wide.find("title").text
    assert wide.get("data-scale") == "log"
    width: dict[str, float] = {}  # per bar (its row's y): the lengths of its stacked parts
    for rect in wide.iter("rect"):
        if rect.get("class") == "bar":
            width[rect.get("y")] = width.get(rect.get("y"), 0.0) + float(rect.get("width"))
    a, b, month = sorted(width.values())
    # the month is one bar; each hourly plan keeps over a quarter of its length (on a linear
    # axis: 58 / 2,400 of it, about 13 px) and the two differ by a visible amount
    assert a > month / 4 and b - a >= 8 and month - b >= 100, (a, b, month)
    caption = page.split('id="chart-job-0"', 1)[1].split("<figcaption>", 1)[1].split("</figcaption>", 1)[0]
    assert caption.startswith("Log scale: the bars span ") and "more than 10 times" in caption


# --------------------------------------------------------------------------------------------
# Layout in a browser


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")

# The report shown at each width in a frame of exactly that width (a window cannot be made
# narrower than 500 px for --dump-dom); the outer page measures it after loading and writes the
# numbers into itself, which --dump-dom prints. The report itself stays script-free.
PROBE = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">
%(frames)s
<script>
function measure(frame) {
  var win = frame.contentWindow, doc = frame.contentDocument, root = doc.documentElement;
  var out = {width: win.innerWidth, page: root.scrollWidth, body: doc.body.scrollWidth, charts: [], tables: []};
  doc.querySelectorAll("svg").forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    if (box.width === 0) return;  // the variant for the other width
    var zoom = box.width / svg.viewBox.baseVal.width, smallest = 1e9, outside = [];
    svg.querySelectorAll("text").forEach(function (t) {
      smallest = Math.min(smallest, parseFloat(win.getComputedStyle(t).fontSize) * zoom);
      var r = t.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1) outside.push(t.textContent);
    });
    var ticks = Array.prototype.map.call(svg.querySelectorAll("text.tick"), function (t) {
      return t.getBoundingClientRect();
    }), touching = [];
    ticks.forEach(function (a, i) {
      ticks.slice(i + 1).forEach(function (b) {
        // labels on one row (an x axis) that run into each other
        if (Math.abs(a.top - b.top) < 2 && a.left < b.right && b.left < a.right) touching.push([a.left, b.left]);
      });
    });
    out.charts.push({id: svg.id, left: box.left, right: box.right, smallest_text_px: smallest, outside: outside,
                     touching_ticks: touching});
  });
  doc.querySelectorAll("table").forEach(function (table) {
    var holder = table.parentElement, box = holder.getBoundingClientRect();
    out.tables.push({holder: holder.className, right: box.right, overflow: win.getComputedStyle(holder).overflowX});
  });
  return out;
}
window.addEventListener("load", function () {
  var found = {};
  document.querySelectorAll("iframe").forEach(function (f) { found[f.width] = measure(f); });
  var pre = document.createElement("pre");
  pre.id = "metrics";
  pre.textContent = JSON.stringify(found);
  document.body.appendChild(pre);
});
</script></body></html>"""

WIDTHS = (400, 1280)


def _run_chromium(args: list[str], tmp_path: Path, name: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / ('profile-' + name)}", *args],
                              capture_output=True, timeout=90, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("Chromium did not finish within 90 s (a script or a fetch waiting?)")


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def report_page(rentopt_home, tmp_path) -> Path:
    """The HTML report over the bundled snapshot and the three RTX 4090 sheets (one monthly)."""
    write_sheets(rentopt_home)
    page = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", "--workload", "llama-3.1-8b qlora 2B", "-o", str(page)])
    assert result.exit_code == 0, result.output
    return page


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (Debian/Ubuntu: apt-get install -y chromium)")
def test_the_html_report_reads_at_400_and_1280_px_in_headless_chromium(report_page, tmp_path):
    page = report_page.read_text(encoding="utf-8")
    for width in WIDTHS:
        png = tmp_path / f"report-{width}.png"
        _run_chromium([f"--screenshot={png}", f"--window-size={width},1600", report_page.as_uri()], tmp_path, f"{width}")
        assert png.exists(), f"Chromium wrote no screenshot at {width} px"
        assert png_size(png) == (width, 1600)
        assert png.stat().st_size > 40_000  # text, tables and charts; a blank page compresses to a few KB

    frames = "\n".join(f'<iframe width="{w}" height="900" style="border:0;display:block" '
                       f'srcdoc="{html.escape(page, quote=True)}"></iframe>' for w in WIDTHS)
    probe = tmp_path / "probe.html"
    probe.write_text(PROBE % {"frames": frames}, encoding="utf-8")
    done = _run_chromium(["--window-size=1400,1000", "--dump-dom", probe.as_uri()], tmp_path, "probe")
    found = re.search(r'<pre id="metrics">(.*?)</pre>', done.stdout.decode("utf-8", "replace"), re.S)
    assert found, done.stderr.decode("utf-8", "replace")[-2000:]
    metrics = json.loads(html.unescape(found.group(1)))

    for width in WIDTHS:
        m = metrics[str(width)]
        assert m["width"] == width
        # nothing sticks out sideways: the page never scrolls horizontally
        assert m["page"] <= width and m["body"] <= width, (width, m["page"], m["body"])
        # the bar charts drawn for this width are the ones shown (narrow: labels above the bars)
        shown = [c["id"] for c in m["charts"]]
        bar_charts = [i for i in shown if "chart-prices" in i or "chart-job-" in i]
        assert bar_charts and all(i.startswith("narrow-") == (width < 640) for i in bar_charts), shown
        assert any(i.startswith("chart-history-") for i in shown)
        for chart in m["charts"]:
            assert 0 <= chart["left"] and chart["right"] <= width + 0.5, (width, chart["id"])
            assert chart["smallest_text_px"] >= 10, (width, chart["id"], chart["smallest_text_px"])
            assert not chart["outside"], (width, chart["id"], chart["outside"])
            assert not chart["touching_ticks"], (width, chart["id"], chart["touching_ticks"])
        # every table sits in its own scroll box, inside the page
        assert m["tables"] and all(t["holder"] == "table-scroll" and t["overflow"] == "auto" and t["right"] <= width
                                   for t in m["tables"]), m["tables"]
