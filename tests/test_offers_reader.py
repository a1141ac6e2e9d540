"""The columnar offers-file reader against offers_io's own reader: the same offers, the same
errors, line for line (offers_io's reader builds and validates an Offer per line; it is the
reference here, and its own tests pin its behaviour by hand-worked values)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer import offers_reader
from rentopt.optimizer.cell_spans import CellSpans, factorize
from rentopt.optimizer.errors import InputError, OffersFileError
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.offers_io import read_offers_file, write_offers_json
from rentopt.optimizer.offers_reader import read_offers_table
from tests.table_checks import assert_same_table

HEADER = "provider,offer_id,gpu,gpus,price_hour,price_day,price_week,price_month,currency,storage_gb_month,egress_gb," \
         "ingress_gb,interconnect,region,spot,max_days\n"
LINES = [
    "alpha,a1,A100-SXM4-80GB,8,7.49,152.80,,3280.62,USD,0.10,,0,nvlink,us-east,no,90",
    "alpha,a2,RTX 4090,1,0.35,,,,USD,0.10,0.01,0,,us-west,no,",
    "beta,b1,H100,8,16.80,,,,USD,,,,nvlink,eu,no,",  # a bare name: the usual variant, with a note
    "beta,b2,RTX 3090,2,0.24,,,,USD,0.10,,,pcie,eu,yes,",  # spot
    "gamma,g1,RTX 4090,1,1.88,,,1100,CNY,0.70,,,,cn-north,no,30",
    "gamma,g2,A800-SXM4-80GB,8,,,,70000,CNY,0.70,,,nvlink,cn-east,no,",  # monthly only
    "gamma,g3,L40S,4,  3.40 ,,,, usd ,,,,PCIE,ap,NO,",  # whitespace and case, as people type them
]


def write(tmp_path: Path, text: str, name: str = "offers.csv", encoding: str = "utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return path


def assert_same_error(path: Path) -> None:
    """The columnar reader refuses the file with the line reader's error, word for word."""
    with pytest.raises(InputError) as reference:  # OffersFileError; UnknownCurrency for a currency without a rate
        read_offers_file(path)
    with pytest.raises(InputError) as columnar:
        read_offers_table(path)
    assert (type(columnar.value), str(columnar.value)) == (type(reference.value), str(reference.value))


def check_same(path: Path) -> OfferTable:
    """Both readers agree: the table of offers_io's offers, and the full offers resolved."""
    reference = read_offers_file(path)
    table = read_offers_table(path)
    assert_same_table(table, OfferTable.from_offers(reference))
    rows = list(range(table.n))[::-1]  # any order, as the planner asks
    assert table.offers(rows) == [reference[r] for r in rows]
    return table


def test_the_same_offers_as_the_line_reader(tmp_path):
    table = check_same(write(tmp_path, HEADER + "\n".join(LINES) + "\n"))
    assert table.n == len(LINES)
    assert table.gpu_status[2] == "default" and 2 in table.extra_notes  # the bare H100's note
    assert table.hourly[1, 3] == 0.24 and np.isnan(table.hourly[0, 3])  # the spot line's price is interruptible


@pytest.mark.parametrize("text", [
    HEADER + "\n".join(LINES),  # no final newline
    HEADER.replace("\n", "\r\n") + "\r\n".join(LINES) + "\r\n",  # Windows line ends
    "\ufeff" + HEADER + "\n".join(LINES) + "\n",  # a spreadsheet's byte-order mark
    HEADER + "\n\n".join(LINES) + "\n\n,,,,,,,,,,,,,,,\n",  # blank lines and an empty line of commas
    HEADER + LINES[0] + '\n"alpha","q1","RTX 4090","1","0.35",,,,"USD",,,,,"Helsinki, FI",no,\n',  # quoted cells
    HEADER + LINES[0] + '\nalpha,m1,"RTX\n4090",1,0.35,,,,USD,,,,,,no,\n',  # a cell over two lines
    HEADER + LINES[0] + "\nalpha,short,RTX 4090,1,0.35,,,,USD\n",  # fewer cells than columns
    HEADER + "alpha,edge,RTX 4090,1,0.001,,,,USD,,,,,,no,\n",  # exactly on the band's lower edge: sane
    HEADER + "alpha,edge,RTX 4090,2,400,,,,USD,,,,,,no,\n",  # 200 per GPU-hour: the upper edge
    "provider,offer_id,gpu,gpus,price_hour,currency,gpu_memory_gb,fetched_at,source,form_factor,stopped_bills,"
    "stopped_max_days,free_disk_gb\n"
    "x,1,Mystery GPU 9000,1,0.50,USD,24,2026-11-01T00:00:00Z,my sheet,,everything,14,50\n"  # an unknown GPU kept
    "x,2,A100,4,5.00,USD,80,2026-11-02T00:00:00+08:00,,SXM,nothing,,0\n"
    "x,3,H100,8,20,EUR,,,,,,,\n",
], ids=["no-final-newline", "crlf", "bom", "blank-lines", "quotes", "multi-line-cell", "short-line", "band-low",
        "band-high", "other-columns"])
@pytest.mark.parametrize("spans_from", [None, 0])
def test_the_same_offers_for_files_people_write(tmp_path, monkeypatch, text, spans_from):
    """Each file both ways: lines split in Python, and byte spans (cell_spans.py), which take
    the regular ones (a BOM shifts every span by 3 bytes: the kept lines are read again from
    the file itself)."""
    if spans_from is not None:
        monkeypatch.setattr(offers_reader, "_SPANS_BYTES", spans_from)
    check_same(write(tmp_path, text))


def test_a_file_changed_after_it_was_read_is_refused_not_misread(tmp_path, tokenizer_from_the_first_byte):
    """The large-file path reads the kept lines again from the file: a file rewritten in the
    meantime (here: a price changed, same length) is an error, never a mix of two files."""
    path = write(tmp_path, HEADER + "\n".join(LINES) + "\n")
    table = read_offers_table(path)
    assert table.offers([0])[0].offer_id == "a1"  # read back from the file
    path.write_text(HEADER + "\n".join(LINES).replace("7.49", "7.48") + "\n")
    with pytest.raises(OffersFileError, match="offers.csv changed while it was read; run the quote again"):
        table.offers([0])


BAD = [
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0,,,,USD,,,,,,no,\n",  # a free price
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,abc,,,,USD,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,900,,,,USD,,,,,,no,\n",  # 900 per GPU-hour
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,2,400.01,,,,USD,,,,,,no,\n",  # just above the band: 200.005 per GPU-hour
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.0009,,,,USD,,,,,,no,\n",  # just below it
    HEADER + LINES[0] + "\n,z,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # no provider
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,US,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,XYZ,,,,,,no,\n",  # no exchange rate
    HEADER + LINES[0] + "\nalpha,z,H100 NVL PCIe SXM,1,0.5,,,,USD,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,0,0.5,,,,USD,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,2000,500,,,,USD,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,9,,,,,no,\n",  # storage above its band
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,,maybe,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,,no,99999999\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,,,,,USD,,,,,,no,\n",  # no price at all
    HEADER + LINES[0] + "\nalpha,,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,,no,,extra\n",  # more cells than columns
    HEADER + LINES[0] + "\n" + LINES[0] + "\n",  # the same offer twice
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0,,,,USD,,,,,,no,\n" + "alpha,q,\x00,1\n",  # a bad line, then a NUL
    HEADER + LINES[0] + "\nalpha,q,\x00,1\nalpha,z,RTX 4090,1,0,,,,USD,,,,,,no,\n",  # a NUL, then a bad line
    HEADER,  # no offers
    "",  # empty
    "provider,offer_id,gpu\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,colour\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,fetched_at\nx,1,RTX 4090,1,0.5,USD,yesterday\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,form_factor\nx,1,A100,1,0.5,USD,round\n",
]


@pytest.mark.parametrize("text", BAD, ids=[f"bad-{i}" for i in range(len(BAD))])
def test_the_same_errors_as_the_line_reader(tmp_path, text):
    assert_same_error(write(tmp_path, text))


def test_an_error_deep_in_a_file_names_its_line(tmp_path):
    lines = [f"alpha,o{i},RTX 4090,1,0.35,,,,USD,,,,,,no," for i in range(5000)]
    lines[4321] = "alpha,o4321,RTX 4090,1,-1,,,,USD,,,,,,no,"
    path = write(tmp_path, HEADER + "\n".join(lines) + "\n")
    with pytest.raises(OffersFileError, match=r"line 4323, field price_hour: '-1' must be a positive number"):
        read_offers_table(path)


@pytest.fixture
def tokenizer_from_the_first_byte(monkeypatch):
    """The byte-span tokenizer (the large-file path, cell_spans.py) on small files too."""
    monkeypatch.setattr(offers_reader, "_SPANS_BYTES", 0)


def test_the_large_file_path_gives_the_same_offers(tmp_path, tokenizer_from_the_first_byte):
    copies = []
    for k in range(3):
        for line in LINES:
            provider, offer_id, rest = line.split(",", 2)
            copies.append(f"{provider},{offer_id}-{k},{rest}")
    check_same(write(tmp_path, HEADER + "\n".join(copies) + "\n"))


@pytest.mark.parametrize("text", BAD[:18], ids=[f"bad-{i}" for i in range(18)])
def test_the_large_file_path_gives_the_same_errors(tmp_path, tokenizer_from_the_first_byte, text):
    assert_same_error(write(tmp_path, text))


def test_a_json_file_is_the_same_offers(tmp_path):
    offers = read_offers_file(write(tmp_path, HEADER + "\n".join(LINES) + "\n"))
    path = tmp_path / "offers.json"
    with path.open("w") as fp:
        write_offers_json(offers, fp)
    check_same(path)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(["a,b,c", "a,b", "a,b,c,d", "", ",,", "xx,y,zzzz", "1,2,3"]), min_size=1, max_size=30),
       st.booleans(), st.integers(min_value=1, max_value=40))
def test_regular_lines_are_found_alike_in_blocks(lines, terminated, block):
    """CellSpans.of searches a block of bytes at a time; for any block size it must take a file
    exactly when each line after the header, counted by itself, holds two commas, and then
    give each line's cells as str.split gives them."""
    text = "h1,h2,h3\n" + "\n".join(lines) + ("\n" if terminated else "")
    data = text.encode()
    body = lines if terminated or lines[-1] else lines[:-1]  # an unterminated empty last line is no line
    want = bool(body) and all(line.count(",") == 2 for line in body) and len(data) >= 8
    spans = CellSpans.of(data, data.index(b"\n") + 1, 3, {"h1": 0, "h2": 1, "h3": 2}, limit=1000, block=block)
    assert (spans is not None) is want
    if spans is not None:
        assert [spans.row(i) for i in range(spans.n)] == [line.split(",") for line in body]
        for j, name in enumerate(("h1", "h2", "h3")):
            codes, values = spans.distinct(name)
            assert [values[c] for c in codes] == [line.split(",")[j] for line in body]
            assert len(set(values)) == len(values)
        ends = [i for i, b in enumerate(data) if b == 10]
        assert spans.line_ends().tolist() == ends


CELL = st.text(alphabet=st.sampled_from(list("ab9 .-") + ["\u00e9", "\u3000", "\u6a21"]), max_size=30)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(CELL, CELL), min_size=1, max_size=60), st.booleans())
def test_cells_are_coded_and_ids_stripped_as_the_csv_module_reads_them(rows, terminated):
    """Cells of any length (one word, several words, past the file's last 8 bytes), repeated or
    not, with spaces at the ends: the same values as splitting the text, one code per value;
    ids stripped, empty ones marked, as offers_io strips them."""
    text = "k,v\n" + "\n".join(f"{k},{v}" for k, v in rows) + ("\n" if terminated else "")
    body = [line for line in text.split("\n")[1:]]
    body = body[:-1] if terminated or body[-1] == "" else body
    data = text.encode()
    spans = CellSpans.of(data, 4, 2, {"k": 0, "v": 1}, limit=10_000)
    if spans is None:  # an empty unterminated last line, or a file under 8 bytes
        return
    want_v = [line.split(",")[1] for line in body]
    codes, values = spans.distinct("v")
    assert [values[c] for c in codes] == want_v and len(set(values)) == len(values)
    ids, empty = spans.offer_ids("k")
    want_k = [line.split(",")[0].strip() for line in body]
    assert list(ids) == want_k
    assert empty.tolist() == [not k for k in want_k]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(min_value=0, max_value=2**32 - 1), st.integers(min_value=1, max_value=30_000),
       st.integers(min_value=1, max_value=30_000), st.sampled_from([0, 2**63, 2**64 - 1]))
def test_factorize_gives_equal_keys_one_code(seed, n, distinct, extreme):
    """Against Python's set: equal keys share a code, distinct keys do not, for up to 30,000
    keys (beyond the 4,096 sampled first, so some are missed and looked up again)."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64 - 1, size=min(distinct, n), dtype=np.uint64, endpoint=True)
    pool[0] = extreme
    keys = pool[rng.integers(0, len(pool), size=n)]
    codes, rep = factorize(keys)
    assert (keys[rep][codes] == keys).all()
    assert len(rep) == len(set(keys.tolist()))


def test_a_collision_of_the_long_cells_mix_is_caught(monkeypatch):
    """Cells longer than a word are keyed by a mix of their words; should two mix alike, the
    column is decoded instead (here every mix collides)."""
    from rentopt.optimizer import cell_spans

    monkeypatch.setattr(cell_spans, "mix", lambda parts: np.zeros(len(parts[0]), dtype=np.uint64))
    values = ["H100-SXM5-80GB", "A100-SXM4-80GB", "RTX 4090", "H100-SXM5-80GB", "x" * 40]
    data = ("gpu,n\n" + "".join(f"{v},1\n" for v in values)).encode()
    spans = CellSpans.of(data, 6, 2, {"gpu": 0, "n": 1}, limit=1000)
    codes, distinct = spans.distinct("gpu")
    assert [distinct[c] for c in codes] == values and len(distinct) == 4
