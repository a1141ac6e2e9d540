"""Broken user price sheets through `rentopt refresh`: each is reported by file and line, its good
siblings and the bundled sheets still load, it contributes no offers, and nothing stored is lost.

A fault-injection run found 61 of 77 broken-sheet cases silently ignored (counted, never shown),
an unknown currency accepted (after which every plain quote failed), and two files that took
the whole refresh down: deep nesting (RecursionError) and a YAML "billion laughs" (minutes, then
MemoryError). Each case here must fail alone, quickly, with one line naming the file.
"""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.store import open_readonly, store_path

GOOD = ('platform = "good"\ncurrency = "CNY"\nsource = "https://good.example"\nread_on = 2026-11-01\n'
        '[[offers]]\nid = "a"\ngpu = "RTX 4090"\n[[offers.prices]]\nunit = "hour"\namount = 2\n')
BAD = GOOD.replace('"good"', '"bad"').replace("good.example", "bad.example")
LAUGHS = ('platform: bad\nlol0: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
          + "".join(f"lol{i + 1}: &{'abcdefghij'[i + 1]} [" + ", ".join([f"*{'abcdefghij'[i]}"] * 10) + "]\n"
                    for i in range(8)))

CASES = {
    # name: (file name, text, what the line must say, the line number or None)
    "toml syntax": ("bad.toml", BAD.replace('currency = "CNY"', "currency = CNY"), "not valid TOML", 2),
    "empty file": ("bad.toml", "", "the file is empty", None),
    "text amount": ("bad.toml", BAD.replace("amount = 2", 'amount = "two"'), "Input should be a valid decimal", 10),
    "negative price": ("bad.toml", BAD.replace("amount = 2", "amount = -2"), "greater than 0", 10),
    "zero price": ("bad.toml", BAD.replace("amount = 2", "amount = 0"), "greater than 0", 10),
    "nan price": ("bad.toml", BAD.replace("amount = 2", "amount = nan"), "finite number", 10),
    "inf price": ("bad.toml", BAD.replace("amount = 2", "amount = inf"), "finite number", 10),
    "absurd price": ("bad.toml", BAD.replace("amount = 2", "amount = 1e12"),
                     "1E+12 CNY per GPU-hour is above the sane range 0.006-1500 CNY", 10),
    "1e400 text": ("bad.toml", BAD.replace("amount = 2", 'amount = "1e400"'), "1E+400 CNY per GPU-hour is above", 10),
    "tiny price": ("bad.toml", BAD.replace("amount = 2", "amount = 0.000001"), "is below the sane range", 10),
    "absurd storage": ("bad.toml", BAD.replace("[[offers]]", "[storage]\ngb_month = 1e9\n[[offers]]"),
                       "field storage.gb_month: 1000000000 CNY per GB-month of storage is above", 6),
    "missing field": ("bad.toml", BAD.replace('gpu = "RTX 4090"\n', ""), "field offers[0].gpu: Field required", 5),
    "missing offers": ("bad.toml", BAD.split("[[offers]]")[0], "field offers: Field required", None),
    "unknown currency": ("bad.toml", BAD.replace('"CNY"', '"XYZ"'), "unknown currency 'XYZ'", 2),
    "yaml negative": ("bad.yaml", "platform: bad\ncurrency: CNY\nsource: x\nread_on: 2026-11-01\noffers:\n"
                      "  - id: a\n    gpu: RTX 4090\n    prices:\n      - {unit: hour, amount: -3}\n",
                      "field offers[0].prices[0].amount: Input should be greater than 0", 9),
    "json deep nesting": ("bad.json", '{"platform": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested more than 32", None),
    "toml deep nesting": ("bad.toml", "platform = " + "[" * 5_000 + "]" * 5_000 + "\n", "nested more than 32", None),
    "yaml deep nesting": ("bad.yaml", "platform: " + "[" * 5_000 + "]" * 5_000 + "\n", "nested more than 32", None),
    "yaml billion laughs": ("bad.yaml", LAUGHS, "would expand to more than 100,000 values", None),
    "huge file": ("bad.json", '{"platform": "' + "x" * (1 << 21) + '"}', "larger than 1024 KiB", None),
    "not a table": ("bad.json", "[1, 2, 3]", "the top level must be a table of fields, not list", None),
    "binary": ("bad.toml", "\udcff\x00\x01", "cannot be read", None),
}


def refresh(*args: str):
    result = CliRunner().invoke(cli, ["refresh", "--providers", "sheet", *args])
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def current_offers() -> set[str]:
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        return {f"{o.provider}/{o.offer_id}" for o in store.load_offers()}


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_sheet_is_reported_by_file_and_line_and_loses_nothing(rentopt_home, case):
    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    (sheets / "good.toml").write_text(GOOD, encoding="utf-8")
    assert refresh().exit_code == 0
    before = current_offers()
    assert "good/a" in before and "jygpu/8x-rtx4090" in before

    name, text, message, line = CASES[case]
    path = sheets / name
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    start = time.perf_counter()
    result = refresh()
    elapsed = time.perf_counter() - start

    assert result.exit_code == 0, result.output  # the good and the bundled sheets refreshed
    assert elapsed < 5, f"{case}: {elapsed:.1f} s"  # fails alone, quickly (minutes before)
    reported = [x for x in result.stdout.splitlines() if x.startswith(f"sheet: price sheet {path}")]
    assert len(reported) == 1, result.stdout
    where = f"sheet: price sheet {path} line {line}: " if line else f"sheet: price sheet {path}: "
    assert reported[0].startswith(where) and message in reported[0], reported[0]
    after = current_offers()
    assert after == before and not any(o.startswith("bad/") for o in after)


def test_every_bad_sheet_in_one_folder_is_reported_and_the_good_one_loads(rentopt_home):
    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    (sheets / "good.toml").write_text(GOOD, encoding="utf-8")
    for i, (name, text, _, _) in enumerate(CASES.values()):
        path = sheets / f"{i:02d}-{name}"
        path.write_text(text.replace('"bad"', f'"bad{i}"').replace("platform: bad", f"platform: bad{i}"),
                        encoding="utf-8", errors="surrogateescape")
    result = refresh("--format", "json")
    assert result.exit_code == 0
    import json

    runs = [p for p in json.loads(result.stdout)["providers"] if p["plugin"] == "sheet"]
    assert runs and all(r["problems"] == runs[0]["problems"] for r in runs)  # the plugin's run, on each line
    reported = [p for p in runs[0]["problems"] if "price sheet" in p]
    assert len(reported) == len(CASES), reported
    assert "good/a" in current_offers()


def test_a_sheet_in_an_unknown_currency_never_breaks_plain_quotes(rentopt_home):
    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    (sheets / "xyz.toml").write_text(BAD.replace('"CNY"', '"XYZ"'), encoding="utf-8")
    assert refresh().exit_code == 0
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "qlora", "--days", "1", "--top", "1"])
    assert result.exit_code == 0, result.output
