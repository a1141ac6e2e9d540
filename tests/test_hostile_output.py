"""Clean output, atomic files and running out of memory (issue 24): a name holding a newline or a
terminal escape shows as its escape in every terminal, Markdown and CSV output (it cannot forge
a line or clear the screen), CSV cells a spreadsheet would run are neutralised (OWASP), exports
and reports replace the previous file whole or not at all, and running out of memory is one
line with exit status 4."""

from __future__ import annotations

import csv
import errno
import io
import os
import subprocess
import sys
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.catalog import bundled_snapshot
from rentopt.optimizer.cli import cli
from rentopt.optimizer.store import open_writable, store_path

FORGED = "cheap\n#1  total 0.01 USD\x1b[2J\x1b]0;pwned\x07"
ESCAPES = ("\x1b", "\x07", "\x9b")


def stored_with_a_forged_offer_id() -> None:
    """The store holds (written past the door, as an older build could) an offer whose id
    carries a forged plan line and clear-screen and window-title sequences."""
    lam = next(p for p in bundled_snapshot().providers if p.provider == "lambda").offers
    a10 = [o for o in lam if o.gpu == "A10-24GB"][:3]
    forged = a10[0].model_copy(update={"offer_id": FORGED, "price_options": [
        a10[0].price_options[0].model_copy(update={"amount": Decimal("0.05")})]})
    with open_writable(store_path()) as s:
        s.write_snapshot("lambda", [forged, *a10[1:]], fetched_at=datetime(2026, 11, 30, tzinfo=timezone.utc),
                         source="lambda\nprices: forged line")


def no_raw_escapes(text: str) -> None:
    assert not any(e in text for e in ESCAPES), repr(text[:400])
    assert not any(line.startswith("#1  total 0.01 USD") for line in text.splitlines())


def test_a_forged_line_cannot_reach_the_quote_table_or_explain(rentopt_home):
    stored_with_a_forged_offer_id()
    result = CliRunner().invoke(cli, ["quote", "--model", "350m", "--mode", "lora", "--days", "1", "--explain", "--details",
                                      "--deadline-days", "30",
                                      "--providers", "lambda"])
    assert result.exit_code == 0, result.output
    no_raw_escapes(result.output)
    assert "cheap\\n#1  total 0.01 USD\\x1b[2J" in result.output  # shown as what it is
    assert not any(line.startswith("prices: forged line") for line in result.output.splitlines())
    screen = CliRunner().invoke(cli, ["quote", "--model", "350m", "--mode", "lora", "--days", "1", "--deadline-days",
                                      "30", "--providers", "lambda"])  # the one-screen quote
    assert screen.exit_code == 0, screen.output
    no_raw_escapes(screen.output)
    assert "cheap\\n#1  total 0.01 USD" in screen.output


def test_offers_table_and_markdown_report_show_escapes_not_sequences(rentopt_home):
    stored_with_a_forged_offer_id()
    offers = CliRunner().invoke(cli, ["offers", "--providers", "lambda"])
    assert offers.exit_code == 0, offers.output
    no_raw_escapes(offers.output)
    assert "cheap\\n#1  total 0.01 USD" in offers.output
    report = CliRunner().invoke(cli, ["report", "--format", "markdown", "--providers", "lambda"])
    assert report.exit_code == 0, report.output
    no_raw_escapes(report.output)


def test_csv_output_escapes_controls_and_neutralises_formulas(tmp_path):
    source = tmp_path / "offers.csv"
    source.write_text("provider,offer_id,gpu,gpus,price_hour,currency,region,source\n"
                      "alpha,=HYPERLINK(\"http://evil.example\"),RTX 4090,1,0.4,USD,@SUM(1+1),+cmd|' /C calc'!A0\n"
                      "alpha,-2+3,RTX 4090,1,0.5,USD,\"eu\nwest\",ok\n")
    result = CliRunner().invoke(cli, ["offers", "--offers-file", str(source), "--format", "csv"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    by_id = {r["offer_id"]: r for r in rows}
    assert set(by_id) == {"'=HYPERLINK(\"http://evil.example\")", "'-2+3"}
    first = by_id["'=HYPERLINK(\"http://evil.example\")"]
    assert first["region"] == "'@SUM(1+1)" and first["source"] == "'+cmd|' /C calc'!A0"
    assert by_id["'-2+3"]["region"] == "eu\\nwest"  # one cell, one line
    assert by_id["'-2+3"]["price_hour"] == "0.5"  # numbers are numbers


@pytest.mark.parametrize("command", ["export", "report"])
def test_a_write_that_fails_leaves_the_previous_file_whole(rentopt_home, tmp_path, monkeypatch, command):
    stored_with_a_forged_offer_id()
    target = tmp_path / ("team.json.gz" if command == "export" else "report.md")
    target.write_bytes(b"the previous good file")
    args = ["snapshot", "export", str(target)] if command == "export" else ["report", "-o", str(target)]

    def disk_full(fd):  # noqa: ANN001
        raise OSError(errno.ENOSPC, "No space left on device")

    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", disk_full)
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "No space left on device" in result.stderr
    assert target.read_bytes() == b"the previous good file"  # was truncated in place
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert CliRunner().invoke(cli, args).exit_code == 0
    assert target.read_bytes() != b"the previous good file"


def test_running_out_of_memory_is_one_line_and_exit_4(monkeypatch, capfd):
    import rentopt.optimizer.catalog as catalog
    from rentopt.optimizer import cli as cli_module

    def exhausted(*args, **kwargs):  # noqa: ANN002, ANN003
        raise MemoryError

    def exit_now(code):  # noqa: ANN001
        raise SystemExit(code)

    monkeypatch.setattr(catalog, "find_offers", exhausted)
    monkeypatch.setattr(cli_module.os, "_exit", exit_now)
    monkeypatch.setattr(sys, "argv", ["rentopt", "offers"])
    with pytest.raises(SystemExit) as exited:
        cli_module.main()
    assert exited.value.code == 4
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rentopt: error: out of memory:") and "Traceback" not in err


@pytest.mark.slow  # over 5 s (pytest --durations)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux has it")
def test_a_large_offers_file_under_a_memory_cap_is_one_line_and_exit_4(tmp_path):
    """The defect as found: 100k rows under a memory cap gave a bare MemoryError or a SystemError.
    300k rows now: the leaner reader lists 100k within this cap, and the test must reach the error."""
    import resource

    rows = ["provider,offer_id,gpu,gpus,price_hour,currency,region,source"]
    names = ("RTX 4090", "A100-SXM4-80GB", "H100-SXM-80GB", "RTX 3090", "L40S")
    rows += [f"p{i % 40},o{i},{names[i % 5]},{1 + i % 8},{0.3 + (i % 100) / 50:.2f},USD,r{i % 17},s" for i in range(300_000)]
    big = tmp_path / "big.csv"
    big.write_text("\n".join(rows) + "\n")
    cap = 350 << 20

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "RENTOPT_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", "offers",
                           "--offers-file", str(big), "--limit", "3"], capture_output=True, text=True, env=env,
                          preexec_fn=limit, timeout=120)
    if done.returncode == 0:
        pytest.skip("this machine's Python reads the file within the cap")
    assert done.returncode == 4, done.stderr
    assert done.stderr.startswith("rentopt: error: out of memory:") and done.stderr.count("\n") == 1, done.stderr
