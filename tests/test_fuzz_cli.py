"""Property-based fuzzing of `quote` and `estimate`: any flags, any offers file, never an internal error.

Hypothesis draws command lines from the real flags with values that are valid, borderline or
hostile (nan, inf, 1e400, -0, huge, empty, text, unicode), and offers files that are a valid
file with one field mutated, hand-written CSV lines, or garbage. Whatever it draws, rentopt must
answer with a plan (exit 0), a clear line (exit 2 bad input, 3 no feasible plan), and never a
traceback, an unhandled exception or "internal error".

The examples per test are kept small so the suite stays fast; set RENTOPT_FUZZ_EXAMPLES=2000 for
a long run (the counts measured are in the report of the round that added this file).
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import Offer, PriceOption

EXAMPLES = int(os.environ.get("RENTOPT_FUZZ_EXAMPLES", "0") or 0)
FUZZ = settings(max_examples=EXAMPLES or 60, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Values a hostile or careless user types, for any flag.
NASTY = ["nan", "NaN", "inf", "-inf", "1e400", "-1e400", "1e-400", "0", "-0", "-1", "1e9", "1e18", "1e308",
         "99999999999999999999999", "0.0000001", "", " ", "abc", "1,5", "1_000", "0x10", "१२", "∞", "1e", "--",
         "2B", "500M", "1.5T", "3", "10", "0.5", "1", "7", "24", "80"]


def number_text() -> st.SearchStrategy[str]:
    """Mostly plausible numbers (so plans do get built and priced), often hostile ones."""
    plausible = st.one_of(st.integers(min_value=1, max_value=30).map(str),
                          st.decimals(min_value=Decimal("0.5"), max_value=Decimal(60), places=2).map(str))
    return st.one_of(
        plausible, plausible, plausible,
        st.sampled_from(NASTY),
        st.integers(min_value=-10**30, max_value=10**30).map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.decimals(allow_nan=True, allow_infinity=True).map(str),
        st.text(max_size=8),
    )


WORKLOAD_FLAGS = {
    "--seq-len": number_text(), "--micro-batch": number_text(), "--gpus": number_text(),
    "--zero": number_text(), "--lora-rank": number_text(), "--tensor-parallel": number_text(),
    "--margin": number_text(),
    "--lora-targets": st.one_of(st.sampled_from(["", ",", "q,v", "all-linear", "q,,k", "lm_head", "x"]), st.text(max_size=10)),
    "--offload": st.sampled_from(["none", "optimizer", "all", "bogus"]),
    "--precision": st.sampled_from(["bf16", "fp16", "fp32", "fp8", "bf16-true", "int3"]),
    "--optimizer": st.sampled_from(["adamw", "adamw-8bit", "paged-adamw", "sgd", "none", "lion"]),
    "--quant": st.sampled_from(["none", "nf4", "int8", "int4", "fp2"]),
}
WORKLOAD_SWITCHES = ["--fsdp", "--no-grad-checkpointing", "--no-flash-attention", "--optimizer-in-backward",
                     "--chunked-loss", "--no-double-quant"]
QUOTE_FLAGS = {
    "--validate-hours": number_text(), "--idle-days": number_text(), "--keep-checkpoints": number_text(),
    "--data-gb": number_text(), "--deadline-days": number_text(), "--budget": number_text(),
    "--top": number_text(), "--checkpoint-every": number_text(), "--measured-peak-gb": number_text(),
    "--currency": st.sampled_from(["USD", "CNY", "EUR", "XYZ", "usd", "", "US"]),
    "--fx": st.sampled_from(["CNY=7.1", "CNY=0", "CNY=nan", "CNY=1e400", "USD=2", "XYZ=3", "=", "CNY"]),
}
QUOTE_SWITCHES = ["--no-validate", "--spot", "--explain"]
MODELS = ["7b", "13b", "350m", "llama-3.1-8b", "qwen2.5-7b", "0b", "1e400b", "nan b", "999999t", "", "x"]


@st.composite
def flags(draw, table: dict, switches: list[str]) -> list[str]:
    args: list[str] = []
    for flag in draw(st.lists(st.sampled_from(sorted(table)), max_size=5, unique=True)):
        args += [flag, draw(table[flag])]
    args += draw(st.lists(st.sampled_from(switches), max_size=3, unique=True))
    return args


@st.composite
def config_json(draw) -> str:
    """A config.json: sometimes sane, sometimes with hostile values or shapes."""
    value = st.one_of(st.integers(min_value=-10**40, max_value=10**40), st.floats(), st.text(max_size=5),
                      st.none(), st.booleans(), st.lists(st.integers(), max_size=3))
    sane = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000,
            "intermediate_size": 11008, "model_type": "llama"}
    cfg = dict(sane)
    for key in draw(st.lists(st.sampled_from([*sane, "num_key_value_heads", "head_dim", "num_local_experts",
                                              "num_experts_per_tok", "tie_word_embeddings", "text_config"]),
                             max_size=3, unique=True)):
        cfg[key] = draw(value)
    if draw(st.booleans()):
        depth = draw(st.sampled_from([1, 50, 5000]))
        cfg["nested"] = json.loads("[" * depth + "]" * depth) if depth < 1000 else None
        if depth >= 1000:
            return json.dumps(cfg)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    return json.dumps(cfg, allow_nan=True)


FETCHED = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def good_offers() -> list[dict]:
    def offer(offer_id: str, gpu: str, gpus: int, hourly: str, memory: float) -> dict:
        return Offer(provider="fuzzcloud", offer_id=offer_id, gpu=gpu, gpu_raw=gpu, gpus=gpus, gpu_memory_gb=memory,
                     interconnect="nvlink" if gpus > 1 else "pcie",
                     price_options=[PriceOption(unit="hour", amount=Decimal(hourly))],
                     storage_gb_month=Decimal("0.10"), egress_gb=Decimal("0.01"), ingress_gb=Decimal(0),
                     currency="USD", fetched_at=FETCHED, source="https://fuzzcloud.example").model_dump(mode="json")
    return [offer("a", "A100-SXM4-80GB", 8, "12.00", 80), offer("b", "RTX-4090-24GB", 1, "0.40", 24),
            offer("c", "H100-SXM-80GB", 1, "2.50", 80)]


JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-10**30, max_value=10**30),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6),
              st.sampled_from(["1e400", "NaN", "-1", "0", "1e12", "FOO-9000", "hour", "term"])),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
OFFER_FIELDS = ["gpu", "gpus", "gpu_memory_gb", "price_options", "currency", "month_hours", "storage_gb_month",
                "egress_gb", "nodes_available", "max_duration_hours", "free_disk_gb", "billing_granularity_s",
                "interconnect", "spot", "fetched_at", "provider", "offer_id", "stopped_bills"]
PRICE_FIELDS = ["amount", "unit", "term_hours", "interruptible"]
# Values a real file may hold, so that mutated files also reach the planner and the solver.
PLAUSIBLE = {
    "gpu": st.sampled_from(["A100-SXM4-80GB", "H100-SXM-80GB", "RTX-4090-24GB", "L40S-48GB", None]),
    "gpus": st.sampled_from([1, 2, 4, 8]), "gpu_memory_gb": st.sampled_from([16, 24, 48, 80, 141]),
    "month_hours": st.sampled_from([720, 730]), "storage_gb_month": st.sampled_from(["0", "0.1", "0.45", None]),
    "egress_gb": st.sampled_from(["0", "0.09", None]), "nodes_available": st.integers(1, 16),
    "max_duration_hours": st.sampled_from([1, 24, 1000, None]), "free_disk_gb": st.sampled_from([0, 50, 500]),
    "billing_granularity_s": st.sampled_from([1, 60, 600, 3600]), "interconnect": st.sampled_from(["nvlink", "pcie", "unknown"]),
    "spot": st.booleans(), "currency": st.sampled_from(["USD", "CNY", "EUR"]),
    "stopped_bills": st.sampled_from(["storage", "everything", "nothing"]),
    "amount": st.sampled_from(["0.05", "0.5", "3", "12.5", "99", "1500"]),
    "unit": st.sampled_from(["hour", "day", "week", "month"]), "term_hours": st.sampled_from([None, 8760]),
    "interruptible": st.booleans(),
}

CSV_HEADER = "provider,offer_id,gpu,gpus,price_hour,currency,price_month,storage_gb_month,max_days,gpu_memory_gb"


@st.composite
def offers_file(draw) -> tuple[str, str]:
    """(suffix, text) of an offers file: a valid one with one mutation, CSV lines, or garbage."""
    kind = draw(st.sampled_from(["json", "json", "csv", "garbage"]))
    if kind == "json":
        offers = good_offers()
        target = offers[draw(st.integers(0, len(offers) - 1))]
        for _ in range(draw(st.integers(1, 3))):
            options = target.get("price_options")
            in_price = draw(st.booleans()) and isinstance(options, list) and bool(options) and isinstance(options[0], dict)
            field = draw(st.sampled_from(PRICE_FIELDS if in_price else OFFER_FIELDS))
            hostile = field not in PLAUSIBLE or draw(st.booleans())
            value = draw(JSON_VALUES if hostile else PLAUSIBLE[field])
            (target["price_options"][0] if in_price else target)[field] = value
        return ".json", json.dumps(offers)
    if kind == "csv":
        cell = st.one_of(number_text(), st.sampled_from(["RTX 4090", "A100-SXM4-80GB", "FOO-9000", "USD", "CNY", "XYZ"]))
        rows = [CSV_HEADER, "fuzz,a,RTX 4090,1,0.40,USD,,0.1,,"]
        for i in range(draw(st.integers(1, 3))):
            cells = ["fuzz", f"r{i}"] + [draw(cell) for _ in range(8)]
            rows.append(",".join(c.replace(",", ";").replace("\n", " ").replace('"', "'") for c in cells))
        return ".csv", "\n".join(rows) + "\n"
    return draw(st.sampled_from([".json", ".csv"])), draw(st.one_of(
        st.text(max_size=40), st.sampled_from(["[", "{}", "[]", "[1]", "[{}]", "null", "\x00\x00", "a,b\n1,2",
                                               "[" * 3000 + "]" * 3000, json.dumps([{"gpus": True}])])))


def assert_clean(args: list[str]) -> None:
    result = CliRunner().invoke(cli, args)
    output = result.output
    if currently_in_test_context():
        event(f"exit {result.exit_code}")  # pytest --hypothesis-show-statistics shows the mix
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"rentopt {' '.join(args)!r} raised {type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in output and "internal error" not in output, (args, output)
    assert result.exit_code in (0, 2, 3), (args, result.exit_code, output)
    if result.exit_code:
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        assert errors, (args, "a failing exit status without a message")


@FUZZ
@given(model=st.one_of(st.sampled_from(MODELS), st.text(max_size=12)),
       mode=st.sampled_from(["full", "lora", "qlora", "inference"]),
       extra=flags(WORKLOAD_FLAGS, WORKLOAD_SWITCHES), fmt=st.sampled_from(["table", "json"]))
def test_estimate_never_fails_internally(model, mode, extra, fmt):
    assert_clean(["estimate", "--model", model, "--mode", mode, *extra, "--format", fmt])


@FUZZ
@given(config=config_json(), mode=st.sampled_from(["full", "lora", "qlora", "inference"]))
def test_estimate_from_any_config_json_never_fails_internally(tmp_path_factory, config, mode):
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(config, encoding="utf-8")
    assert_clean(["estimate", "--model", str(path), "--mode", mode])


@FUZZ
@given(data=offers_file(), duration=st.one_of(st.tuples(st.just("--days"), number_text()),
                                               st.tuples(st.just("--tokens"), number_text())),
       extra=flags(QUOTE_FLAGS, QUOTE_SWITCHES), fmt=st.sampled_from(["table", "json", "markdown"]))
def test_quote_over_any_offers_file_never_fails_internally(tmp_path_factory, data, duration, extra, fmt):
    suffix, text = data
    path = tmp_path_factory.mktemp("offers") / f"offers{suffix}"
    path.write_text(text, encoding="utf-8")
    assert_clean(["quote", "--model", "7b", "--mode", "qlora", *duration, "--offers-file", str(path), *extra,
                  "--format", fmt])


@FUZZ
@given(model=st.sampled_from(["7b", "13b", "350m"]), mode=st.sampled_from(["full", "lora", "qlora"]),
       duration=st.one_of(st.tuples(st.just("--days"), number_text()), st.tuples(st.just("--tokens"), number_text())),
       workload=flags(WORKLOAD_FLAGS, WORKLOAD_SWITCHES), extra=flags(QUOTE_FLAGS, QUOTE_SWITCHES))
def test_quote_with_any_flags_never_fails_internally(tmp_path_factory, model, mode, duration, workload, extra):
    path = tmp_path_factory.mktemp("offers") / "offers.json"
    path.write_text(json.dumps(good_offers()), encoding="utf-8")
    assert_clean(["quote", "--model", model, "--mode", mode, *duration, "--offers-file", str(path), *workload, *extra])


@pytest.mark.parametrize("args, message", [
    (["--days", "1e9"], "--days': 1e9 is more than the sane maximum, 3,650"),
    (["--days", "1e400"], "--days': 1e400 is more than the sane maximum"),
    (["--days", "3", "--budget", "1e30"], "--budget': 1e30 is more than the sane maximum"),
    (["--days", "3", "--budget", "1e10"], "--budget': 1e10 is more than the sane maximum, 1e+09"),
    (["--days", "3", "--idle-days", "nan"], "--idle-days': must not be negative"),
    (["--tokens", "1e400"], "--tokens': must be from 1 to 1e+15 tokens"),
    (["--days", "3", "--measured-peak-gb", "nan"], "--measured-peak-gb': 'nan' is not a finite number"),
    (["--days", "3", "--measured-peak-gb", "inf"], "'--measured-peak-gb': inf is not in the range"),
    (["--days", "3", "--lora-targets", ""], "--lora-targets is empty"),
])
def test_the_reported_fuzz_defects_are_clear_errors(tmp_path, args, message):
    path = tmp_path / "offers.json"
    path.write_text(json.dumps(good_offers()), encoding="utf-8")
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--offers-file", str(path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("mutate, message", [
    (lambda o: o[0].update(gpu="FOO-9000"), "offer 1, field gpu: 'FOO-9000' is not a GPU id rentopt knows"),
    (lambda o: o[0].update(gpus=True), "offer 1, field gpus: Input should be a valid integer"),
    (lambda o: o[0]["price_options"][0].update(amount="1e400"), "above the sane range 0.001-200 USD"),
    (lambda o: o[1]["price_options"][0].update(amount="1E+12"), "offer 2, field price_options.0.amount: 1E+12 USD"),
    (lambda o: o[2].update(gpu_memory_gb=1e300), "offer 3, field gpu_memory_gb: 1e+300 is outside the sane range"),
    (lambda o: o[0].update(storage_gb_month="1e10"), "field storage_gb_month: 1E+10 USD per GB-month"),
])
def test_an_offers_file_with_an_absurd_value_is_a_clear_error_naming_the_offer(tmp_path, mutate, message):
    offers = good_offers()
    mutate(offers)
    path = tmp_path / "offers.json"
    path.write_text(json.dumps(offers, indent=2), encoding="utf-8")
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--days", "3", "--offers-file", str(path)])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stderr.startswith(f"rentopt: error: offers.json line "), result.stderr


def test_an_offers_csv_with_an_absurd_price_names_the_line(tmp_path):
    path = tmp_path / "offers.csv"
    path.write_text(CSV_HEADER + "\nfuzz,a,RTX 4090,1,0.40,USD,,,,\nfuzz,b,RTX 4090,8,1e12,USD,,,,\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--days", "3", "--offers-file", str(path)])
    assert result.exit_code == 2
    assert ("offers.csv line 3, field price_hour: 1.25E+11 USD per GPU-hour is above the sane range 0.001-200 USD"
            in result.stderr), result.stderr


def test_an_offers_file_that_never_ends_is_refused_without_reading_it_all(tmp_path):
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--days", "3",
                                      "--offers-file", "/dev/zero"])
    assert result.exit_code == 2 and "/dev/zero is larger than 256 MiB" in result.stderr


def test_main_turns_a_bad_setting_into_one_line(monkeypatch, capsys):
    from rentopt.optimizer.cli import main

    monkeypatch.setenv("RENTOPT_HTTP_TIMEOUT", "abc")
    monkeypatch.setattr("sys.argv", ["rentopt", "gpus"])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("rentopt: error: RENTOPT_HTTP_TIMEOUT='abc': not a number of seconds") and err.count("\n") == 1


@pytest.mark.parametrize("extra", [["--days", "3650", "--currency", "JPY"],
                                   ["--days", "10", "--currency", "JPY", "--budget", "1e9"]])
def test_the_largest_totals_within_every_bound_are_priced_not_an_internal_error(tmp_path, extra):
    """Ten years of an 8-GPU node at the top of the price band, in JPY (1.7e11 JPY), and the
    largest --budget: the solver's integer money must hold them (--budget above ~2.5e9 did not)."""
    path = tmp_path / "dear.csv"
    path.write_text(CSV_HEADER.split(",price_month")[0] + "\ndear,n8,H100-SXM-80GB,8,1600,USD\n", encoding="utf-8")
    assert_clean(["quote", "--model", "7b", "--mode", "qlora", *extra, "--offers-file", str(path), "--top", "1"])
