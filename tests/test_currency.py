"""Exchange rates: bundled dated defaults, config file, --fx overrides, clear errors."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rentopt.optimizer.currency import FxTable, default_config_path, parse_fx_option, round_money
from rentopt.optimizer.errors import InputError

D = Decimal


def test_bundled_rates_are_dated_and_sourced():
    fx = FxTable.load()
    assert set(fx.known) >= {"USD", "CNY", "EUR", "GBP", "JPY"}
    cny = fx.rate("CNY")
    # ECB 2025-02-28: 7.5782 CNY and 1.0411 USD per EUR -> 7.5782 / 1.0411 = 7.2790 CNY per USD
    assert cny.per_usd == D("7.2790") and cny.as_of == "2025-02-28"
    assert "ECB" in cny.source and "override with --fx CNY=" in cny.source
    assert fx.rate("usd").per_usd == 1


def test_convert_through_usd():
    fx = FxTable.load(overrides={"CNY": D("7.2"), "EUR": D("0.9")})
    assert fx.convert(D("7920"), "CNY", "USD") == D("1100")  # 7920 / 7.2
    assert fx.convert(D("100"), "USD", "CNY") == D("720")
    assert fx.convert(D("720"), "CNY", "EUR") == D("90")  # 720 / 7.2 = 100 USD x 0.9
    assert fx.convert(D("3.3"), "JPY", "JPY") == D("3.3")


def test_unknown_currency_names_the_known_ones():
    fx = FxTable.load()
    with pytest.raises(InputError) as err:
        fx.convert(D(1), "XYZ", "USD")
    assert str(err.value) == (
        "unknown currency 'XYZ'; known: CNY, EUR, GBP, JPY, USD. Add a rate with --fx XYZ=UNITS_PER_USD"
    )
    assert err.value.exit_code == 2


def test_override_adds_a_currency_and_is_reported():
    fx = FxTable.load(overrides={"hkd": D("7.8")})
    assert fx.convert(D("78"), "HKD", "USD") == D("10")
    assert [(r.currency, r.per_usd, r.as_of, r.source) for r in fx.rates_used(["HKD", "USD", "hkd"])] == [
        ("HKD", D("7.8"), "user override", "--fx HKD=7.8")
    ]


def test_config_file_then_overrides(rentopt_home):
    rentopt_home.mkdir(parents=True)
    (rentopt_home / "config.toml").write_text('[fx]\nCNY = 7.1\nEUR = "0.95"\n', encoding="utf-8")
    assert default_config_path() == rentopt_home / "config.toml"
    fx = FxTable.load()
    assert fx.rate("CNY").per_usd == D("7.1") and fx.rate("CNY").as_of == "user config"
    assert fx.rate("EUR").per_usd == D("0.95")
    assert FxTable.load(overrides={"CNY": D("7.3")}).rate("CNY").per_usd == D("7.3")  # --fx wins


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
