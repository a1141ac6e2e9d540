"""The columnar offers-file reader against offers_io's own reader: the same offers, the same
errors, line for line (offers_io's reader builds and validates an Offer per line; it is the
reference here, and its own tests pin its behaviour by hand-worked values)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.errors import InputError, OffersFileError
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.offers_io import read_offers_file, write_offers_json
from rentopt.optimizer.offers_reader import read_offers_table
from rentopt.optimizer.row_check import _CONTROL
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
    assert_categories_are_the_rows_values(table)
    return table


def assert_categories_are_the_rows_values(table: OfferTable) -> None:
    """Each coded column's values are its rows' values, each once: none from a line not kept
    (a blank line's refused provider, its missing currency), which the categories would list."""
    for name in ("provider", "gpu", "gpu_raw", "gpu_status", "currency", "fetched_at", "interconnect", "fabric",
                 "stopped_bills"):
        codes, values = table.category(name)
        assert len(set(values)) == len(values), name
        assert set(values) == set(getattr(table, name)), name
        assert sorted(set(codes.tolist())) == list(range(len(values))), name


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
    (HEADER + LINES[0] + "\nalpha,\u3000\u6a21\u578b 1\u3000,RTX 4090,1,0.35,,,,USD,,,,,,no,\n"  # ids stripped of a
     "alpha,\u00e9-\u00a0,RTX 4090,1,0.35,,,,USD,,,,,,no,\nalpha,\u00e9-2 ,RTX 4090,1,0.35,,,,USD,,,,,,no,\n"),  # non-ASCII space
    HEADER + LINES[0] + "\nalpha,short,RTX 4090,1,0.35,,,,USD\n",  # fewer cells than columns
    HEADER + "alpha,edge,RTX 4090,1,0.001,,,,USD,,,,,,no,\n",  # exactly on the band's lower edge: sane
    HEADER + "alpha,edge,RTX 4090,2,400,,,,USD,,,,,,no,\n",  # 200 per GPU-hour: the upper edge
    "provider,offer_id,gpu,gpus,price_hour,currency,gpu_memory_gb,fetched_at,source,form_factor,stopped_bills,"
    "stopped_max_days,free_disk_gb\n"
    "x,1,Mystery GPU 9000,1,0.50,USD,24,2026-11-01T00:00:00Z,my sheet,,everything,14,50\n"  # an unknown GPU kept
    "x,2,A100,4,5.00,USD,80,2026-11-02T00:00:00+08:00,,SXM,nothing,,0\n"
    "x,3,H100,8,20,EUR,,,,,,,\n",
], ids=["no-final-newline", "crlf", "bom", "blank-lines", "quotes", "multi-line-cell", "non-ascii-ids", "short-line", "band-low",
        "band-high", "other-columns"])
@pytest.mark.parametrize("name", ["offers.csv", "offers.txt"])  # read into an Arrow buffer / by read_limited
def test_the_same_offers_for_files_people_write(tmp_path, text, name):
    """Every dialect through the one columnar path (a BOM shifts every line by 3 bytes: the
    kept lines are read again from the file itself)."""
    check_same(write(tmp_path, text, name))


def test_a_csv_path_that_is_no_regular_file_is_refused_as_the_line_reader_refuses_it(tmp_path):
    """A device behind a .csv name is read by offers_io's bounded read, never whole by Arrow."""
    path = tmp_path / "offers.csv"
    path.symlink_to("/dev/zero")
    assert_same_error(path)
    with pytest.raises(OffersFileError, match="is larger than 256 MiB"):
        read_offers_table(path)


def test_a_csv_file_over_the_size_limit_is_refused_as_the_line_reader_refuses_it(tmp_path):
    path = write(tmp_path, HEADER + LINES[0] + "\n")
    with path.open("r+b") as fp:
        fp.truncate((256 << 20) + 1)  # sparse: NUL bytes after the first line
    with pytest.raises(OffersFileError, match="is larger than 256 MiB"):
        read_offers_table(path)


def test_a_file_changed_after_it_was_read_is_refused_not_misread(tmp_path):
    """The reader reads the kept lines again from the file: a file rewritten in the
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
    HEADER + LINES[0] + "\nalpha,z\x07,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # an id holding a control character
    HEADER + LINES[0] + "\nalpha,\u6a21\u200b1,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # a non-ASCII one (zero width)
    HEADER + LINES[0] + "\nalpha,z\x1fz,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # the last control byte below a space
    HEADER + LINES[0] + "\nalpha,z\tz,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # a tab inside an id
    HEADER + LINES[0] + "\nalpha, \u00e9\u0085x ,RTX 4090,1,0.5,,,,USD,,,,,,no,\n",  # a C1 control, the id stripped
    HEADER + LINES[0] + "\n" + LINES[0] + "\n",  # the same offer twice
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0,,,,USD,,,,,,no,\n" + "alpha,q,\x00,1\n",  # a bad line, then a NUL
    HEADER + LINES[0] + "\nalpha,q,\x00,1\nalpha,z,RTX 4090,1,0,,,,USD,,,,,,no,\n",  # a NUL, then a bad line
    HEADER,  # no offers
    "\ufeff",  # a byte-order mark alone
    "\ufeff" + HEADER.rstrip(),  # a byte-order mark and a header
    "\ufeff" + HEADER + LINES[0] + "\nalpha,q,\x00,1\n",  # a byte-order mark, then a NUL
    "",  # empty
    "provider,offer_id,gpu\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,colour\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,fetched_at\nx,1,RTX 4090,1,0.5,USD,yesterday\n",
    "provider,offer_id,gpu,gpus,price_hour,currency,form_factor\nx,1,A100,1,0.5,USD,round\n",
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,us\x01east,no,\n",  # a region holding a control character
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,us\x1feast,no,\n",  # the last one below a space
    HEADER + LINES[0] + "\nalpha,z,RTX 4090,1,0.5,,,,USD,,,,,us\x7feast,no,\n",  # DEL, just past printable ASCII
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


def test_many_lines_in_every_dialect_give_the_same_offers(tmp_path):
    """Arrow reads a file in blocks, on several threads: thousands of lines, quoted and CRLF,
    with a bad-width line and a blank one deep inside, numbered as the line reader numbers them."""
    copies = []
    for k in range(700):
        for line in LINES:
            provider, offer_id, rest = line.split(",", 2)
            copies.append(f'"{provider}","{offer_id}-{k}",{rest}')
    copies.insert(3000, "")
    copies.insert(4000, "alpha,short,RTX 4090,1,0.35,,,,USD")  # fewer cells: offers_io reads it
    text = HEADER.replace("\n", "\r\n") + "\r\n".join(copies) + "\r\n"
    table = check_same(write(tmp_path, text))
    assert table.n == 700 * len(LINES) + 1


def test_a_bad_line_deep_in_a_quoted_crlf_file_names_its_line(tmp_path):
    lines = [f'"alpha","o{i}","RTX 4090","1","0.35",,,,"USD",,,,,,"no",' for i in range(5000)]
    lines[4321] = '"alpha","o4321","RTX 4090","1","-1",,,,"USD",,,,,,"no",'
    path = write(tmp_path, HEADER.replace("\n", "\r\n") + "\r\n".join(lines) + "\r\n")
    with pytest.raises(OffersFileError, match=r"line 4323, field price_hour: '-1' must be a positive number"):
        read_offers_table(path)
    assert_same_error(path)


def test_a_json_file_is_the_same_offers(tmp_path):
    offers = read_offers_file(write(tmp_path, HEADER + "\n".join(LINES) + "\n"))
    path = tmp_path / "offers.json"
    with path.open("w") as fp:
        write_offers_json(offers, fp)
    check_same(path)


CELL = st.text(alphabet=st.sampled_from(list('ab9 .-,"') + ["\u00e9", "\u3000", "\u6a21", "\u00a0", "\x07", "\x7f",
                                                             "\u0085", "\u200b", "\u2028", "\u00bf", "\uff01"]),
               max_size=12)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(CELL, CELL), min_size=1, max_size=40), st.sampled_from(["\n", "\r\n"]),
       st.sampled_from(["minimal", "all"]))
def test_cells_are_coded_and_ids_stripped_as_the_csv_module_reads_them(rows, line_end, quoting):
    """Cells with commas, quotes, spaces and non-ASCII characters, written by the csv module
    in either line end and quoting: Arrow's cells are the csv module's, one code per value,
    ids stripped as offers_io strips them."""
    import csv
    import io

    from rentopt.optimizer.offers_reader import _ArrowCells, _Lines

    out = io.StringIO()
    writer = csv.writer(out, lineterminator=line_end,
                        quoting=csv.QUOTE_ALL if quoting == "all" else csv.QUOTE_MINIMAL)
    writer.writerow(["k", "v"])
    writer.writerows(rows)
    data = out.getvalue().encode()
    want = [r for r in csv.reader(io.StringIO(out.getvalue(), newline=""))][1:]
    cells = _ArrowCells.read(_Lines(data), 2, "offers.csv")
    if any(r == [] for r in want):  # cannot happen: every row has two cells
        raise AssertionError(want)
    assert cells is not None
    assert [cells.row(i) for i in range(cells.n)] == want and not cells.invalid
    assert cells.line_numbers.tolist() == list(range(2, 2 + len(want)))
    codes, values = cells.distinct(1)
    assert [values[c] for c in codes] == [v for _, v in want] and len(set(values)) == len(values)
    ids, empty, control = cells.offer_ids(0)
    assert list(ids) == [k.strip() for k, _ in want]
    assert empty.tolist() == [not k.strip() for k, _ in want]
    # the door's rule, applied cell by cell (row_check's pattern)
    assert control.tolist() == [i for i, (k, _) in enumerate(want) if _CONTROL.search(k.strip())]


@pytest.mark.parametrize("where", ["first", "middle", "last, no line end"])
@pytest.mark.parametrize("size", [131072, 131073])  # the csv module's field limit, and one over it
def test_a_cell_at_the_csv_modules_size_limit_is_read_or_refused_as_the_line_reader_does(tmp_path, size, where):
    """Arrow reads any cell; the csv module refuses one over its field limit, so the columnar
    reader measures the cells of a file with a line that long, wherever that line is."""
    lines = [f"alpha,o{i},RTX 4090,1,0.35,,,,USD,,,,,us-west,no," for i in range(5)]
    at = {"first": 0, "middle": 2, "last, no line end": 4}[where]
    lines[at] = lines[at].replace("us-west", "x" * size)
    text = HEADER + "\n".join(lines) + ("" if where.startswith("last") else "\n")
    path = write(tmp_path, text)
    if size > 131072:
        assert_same_error(path)
    else:
        check_same(path)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.binary(max_size=6).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=8), st.booleans(),
       st.sampled_from([0, 3]))
def test_the_longest_line_is_measured_with_its_line_end(lines, ends_with_newline, skipped):
    from rentopt.optimizer.offers_reader import _Lines

    body = b"\n".join(lines) + (b"\n" if ends_with_newline else b"")
    parts = body.split(b"\n")  # each line but the last with its line end
    expected = max([len(p) + 1 for p in parts[:-1]] + [len(parts[-1])])
    assert _Lines(b"\xef\xbb\xbf"[:skipped] + body, skipped).longest() == expected


BAND_END = st.sampled_from([float("nan"), 0.0, 0.5, 1.0, 2.0, 1e9])


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(BAND_END, BAND_END), min_size=1, max_size=7),
       st.lists(st.tuples(st.integers(0, 6), st.sampled_from([float("nan"), -0.0, 0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0,
                                                             1e9, float("inf")])), max_size=30),
       st.booleans(), st.booleans())
def test_a_value_inside_its_currencys_band_is_the_comparison_with_the_bands_per_line(ends, lines, low_inclusive,
                                                                                   spread):
    """Currency by currency (a few currencies) or spread to every line (many), the same lines
    are inside: low < value (<= when inclusive) and value < high, never with a NaN."""
    from unittest import mock

    from rentopt.optimizer import offers_reader

    lows, highs = [low for low, _ in ends], [high for _, high in ends]
    codes = np.array([c % len(ends) for c, _ in lines], dtype=np.int32)
    values = np.array([v for _, v in lines], dtype=np.float64)
    expected = [(lows[c] <= v if low_inclusive else lows[c] < v) and v < highs[c] for c, v in zip(codes.tolist(), values.tolist())]
    with mock.patch.object(offers_reader, "_FEW_CURRENCIES", 0 if spread else 10):
        found = offers_reader._inside(values, codes, (lows, highs), low_inclusive=low_inclusive)
    assert found.dtype == bool and found.tolist() == expected


def test_two_currencies_each_compared_with_its_own_band():
    from rentopt.optimizer.offers_reader import _inside

    # USD's band is (0, 1), CNY's (1, 2): 0.5 is inside only in USD, 1.5 only in CNY
    codes, values = np.array([0, 1, 0, 1], dtype=np.int32), np.array([0.5, 0.5, 1.5, 1.5])
    assert _inside(values, codes, ([0.0, 1.0], [1.0, 2.0]), low_inclusive=False).tolist() == [True, False, False, True]


@pytest.mark.parametrize("body", [
    b"alpha,a1,RTX 4090,1,0.35,,,,USD\xc3\n",  # in a line of too few cells
    b"alpha,a1,RTX 4090,1,0.35,,,,USD,0.10,0.01,0,,us-w\xc3est,no,\n",  # inside a cell
    b"alpha,a1,RTX 4090,1,0.35,,,,USD,0.10,0.01,0,,us-west,no,\n\xff\n",  # a line of its own
    b"alpha,a1,RTX 4090,1,0.35,,,,USD,0.10,0.01,0,,\xed\xa0\x80,no,\n",  # an encoded surrogate
    b"alpha,a1,RTX 4090,1,0.35,,,,USD,0.10,0.01,0,,\xe6\xa8\xa1,no,\n",  # good UTF-8, read alike
], ids=["short-line", "cell", "alone", "surrogate", "good"])
def test_bytes_that_are_not_utf8_are_refused_where_the_line_reader_refuses_them(tmp_path, capfd, body):
    path = tmp_path / "offers.csv"
    path.write_bytes(HEADER.encode() + body)
    if body.endswith(b"\xe6\xa8\xa1,no,\n"):
        check_same(path)
    else:
        assert_same_error(path)
    assert capfd.readouterr().err == ""  # nothing Arrow's error handler could not decode


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.text(st.sampled_from("a \t\x1f\x20\x7e\x7f\u00e9\u0085~"), max_size=4), max_size=5),
                min_size=1, max_size=4), st.integers(0, 3))
def test_a_column_is_printable_where_every_cell_is_printable_ascii(chunks, cut):
    """_ArrowCells.printable (each chunk's least and greatest byte) against the characters of
    every cell, over several chunks, empty ones and a sliced chunk among them."""
    import pyarrow as pa

    from rentopt.optimizer.offers_reader import _ArrowCells

    arrays = [pa.array(cells, type=pa.string()) for cells in chunks]
    arrays[0] = arrays[0].slice(min(cut, len(arrays[0])))
    cells = _ArrowCells(pa.table({"region": pa.chunked_array(arrays, type=pa.string())}), np.zeros(0), [])
    shown = [c for a in arrays for c in a.to_pylist()]
    assert cells.printable(0) == all(0x20 <= ord(ch) <= 0x7E for cell in shown for ch in cell)


def _outside_line_by_line(values, codes, currency, band, low_inclusive, unit, counts):
    """`_outside` worked line by line in Python floats: a known value, divided by the unit and
    the line's count (0: infinite, or NaN for 0 / 0), not above the low end (at it, with
    `low_inclusive`) or not below the high end; NaN ends hold nothing inside."""
    import math

    out = []
    for i, code in enumerate(codes.tolist()):
        v = float(values[code])
        if math.isnan(v):
            out.append(False)
            continue
        per = v / unit
        if counts is not None:
            count = float(counts[0][counts[1][i]])
            per = per / count if count else (math.nan if per == 0 else math.inf)
        low, high = band[0][currency[i]], band[1][currency[i]]
        above = per >= low if low_inclusive else per > low
        out.append(not (above and per < high))
    return out


VALUE_POOL = [float("nan"), 0.0, 0.001, 0.5, 1.0, 24.0, 199.99, 200.0, 1e6]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(VALUE_POOL), min_size=1, max_size=6), st.integers(1, 5), st.integers(0, 40),
       st.booleans(), st.sampled_from([1, 24, 730]), st.booleans(), st.integers(0, 2**32 - 1),
       st.lists(st.tuples(st.sampled_from([float("nan"), 0.0, 0.001, 0.5]),
                          st.sampled_from([float("nan"), 1.0, 200.0])), min_size=1, max_size=6))
def test_lines_outside_their_band_as_worked_line_by_line(values, width, n, with_counts, unit, low_inclusive, seed,
                                                          ends):
    """_outside (per combination of cells, then looked up per line) against the rule worked line
    by line; counts of 0 included, a currency with no band (NaN ends), few and many currencies."""
    from rentopt.optimizer.offers_reader import _outside

    rng = np.random.default_rng(seed)
    values = np.array(values)
    codes = rng.integers(0, len(values), n).astype(np.int32)
    currency = rng.integers(0, len(ends), n).astype(np.int32)
    counts = (np.array(rng.integers(0, 9, width), dtype=np.int64), rng.integers(0, width, n)) if with_counts else None
    band = ([low for low, _ in ends], [high for _, high in ends])
    got = _outside(values, codes, currency, band, low_inclusive=low_inclusive, unit=unit, counts=counts)
    want = _outside_line_by_line(values, codes, currency, band, low_inclusive, unit, counts)
    assert (got.tolist() if got is not None else [False] * n) == want
    assert got is None or got.any()


def test_lines_outside_their_band_with_more_cell_combinations_than_lines():
    """5,000 value cells x 2 counts x 2 currencies for 300 lines: worked out per line (day prices:
    divided by 24 hours, then the count)."""
    from rentopt.optimizer.offers_reader import _outside

    rng = np.random.default_rng(3)
    values = rng.choice(np.array([float("nan"), 0.012, 7.2, 3600.0, 10800.0]), 5000)
    codes = rng.integers(0, 5000, 300).astype(np.int32)
    currency = rng.integers(0, 2, 300).astype(np.int32)
    counts = (np.array([1, 4]), rng.integers(0, 2, 300))  # 10,800 a day is 450 an hour: 112.5 on each of 4 GPUs
    band = ([0.001, float("nan")], [200.0, float("nan")])
    got = _outside(values, codes, currency, band, low_inclusive=False, unit=24, counts=counts)
    assert got is not None and not got.all()
    assert got.tolist() == _outside_line_by_line(values, codes, currency, band, False, 24, counts)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(["USD", "CNY", "", " no", "yes", "\u6a21", "8"]), max_size=40),
       st.lists(st.sampled_from(["EUR", "late", "x"]), max_size=3), st.integers(0, 5000), st.integers(1, 90))
def test_a_column_is_coded_as_arrows_dictionary_encode_codes_it(head, late, at, spread):
    """_dictionary_coded against dictionary_encode: the same codes and values, in the order the
    column first shows them; also where a value first shows after the first 4,096 cells, and
    where the first cells hold more than 64 values."""
    import pyarrow as pa

    from rentopt.optimizer import offers_reader as reader

    rng = np.random.default_rng(at)
    cells = [head[i] for i in rng.integers(0, len(head), at)] if head else [""] * at
    cells[min(at, len(cells)):min(at, len(cells))] = late  # after the first cells (from 4,096 on: not among them)
    cells += [f"v{i % spread}" for i in range(100)]  # up to 90 more values
    column = pa.array(cells, type=pa.string())
    got, want = reader._dictionary_coded(column), column.dictionary_encode()
    assert got.dictionary.to_pylist() == want.dictionary.to_pylist()
    assert reader._numbers(got.indices).tolist() == reader._numbers(want.indices).tolist()


ID_CELLS = st.text(st.sampled_from(["a", "b", "7", "-", " ", "\u00e9", "\u6a21"]), max_size=9)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(ID_CELLS, max_size=30), st.integers(0, 3))
def test_short_ids_are_distinct_as_a_set_of_them_says(cells, cut):
    """_short_texts_distinct (two zero-padded words per cell, a 32-bit hash) against Python's
    set: cells of 0 to 27 bytes (8- and 16-byte boundaries, multi-byte characters), a sliced
    column; over 16 bytes it leaves the answer to Arrow (None)."""
    import pyarrow as pa

    from rentopt.optimizer.offers_reader import _short_texts_distinct

    column = pa.array(["x"] * cut + cells, type=pa.string()).slice(cut)
    got = _short_texts_distinct(column)
    if cells and max(len(c.encode()) for c in cells) > 16:
        assert got is None
    else:
        assert got == (len(set(cells)) == len(cells))


@pytest.mark.parametrize("cells", [["abcdefgh", "abcdefgi"], ["abcdefghi", "abcdefghj"], ["abcdefghi", "abcdefgh"],
                                   ["abcdefgh12345678", "abcdefgh12345679"], ["", "a"], ["\u6a21\u578b1", "\u6a21\u578b2"]])
def test_short_ids_differing_in_their_last_byte_are_distinct(cells):
    """Each word's last byte counts (8, 9 and 16 bytes; a 9-byte id is not its 8-byte head)."""
    import pyarrow as pa

    from rentopt.optimizer.offers_reader import _short_texts_distinct

    assert _short_texts_distinct(pa.array(cells, type=pa.string())) is True
    assert _short_texts_distinct(pa.array(cells + cells[:1], type=pa.string())) is False


def test_many_short_ids_sharing_hashes_are_told_apart_by_their_bytes():
    """300,000 ids, six pairs of which share a 32-bit hash: still distinct; one id twice is not."""
    import pyarrow as pa

    from rentopt.optimizer.offers_reader import _short_texts_distinct

    ids = [f"s{i:x}-{(i * 7919) % 100003}" for i in range(300_000)]
    assert _short_texts_distinct(pa.array(ids, type=pa.string())) is True
    assert _short_texts_distinct(pa.array(ids + [ids[123_456]], type=pa.string())) is False


AMOUNT_CELLS = st.one_of(
    st.from_regex(r"[0-9]{1,22}(\.[0-9]{0,22})?", fullmatch=True),  # plain, some too long for Arrow's path
    st.decimals(allow_nan=False, allow_infinity=False).map(str),  # signs, exponents (1E+5, -0.5)
    st.sampled_from(["0", "0.000", "00.10", "1.", ".5", " 1.5", "1.5 ", "1_000", "+2", "1e3", "", "x", "nan",
                     "\u0661.5", "2.675", "0.1", "9007199254740993", "1.0000000000000002", "9" * 20 + "." + "9" * 20]),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(AMOUNT_CELLS, max_size=40), st.booleans())
def test_plain_decimal_cells_are_read_by_arrow_as_number_reads_them(cells, positive):
    """_ArrowCells.plain_numbers against _number (Decimal, then float), cell by cell: the cells
    it reads give _number's float (a 0 is no price where a price must be positive), and it
    leaves to _number every cell that is not plain (signs, exponents, spaces, underscores,
    other digits, over 20 digits a side), whatever _number makes of it."""
    import pyarrow as pa

    from rentopt.optimizer import offers_reader as reader

    column = pa.array(cells + ["1"], type=pa.string())  # one cell at least
    arrow = reader._ArrowCells(pa.table({"c0": column}), np.arange(len(cells) + 1), [])
    _, distinct = arrow.distinct(0)
    rows, floats = arrow.plain_numbers(0)
    for row, number in zip(rows.tolist(), floats.tolist()):
        cell = distinct[row]
        assert re.fullmatch(r"[0-9]{1,20}(\.[0-9]{1,20})?", cell), cell
        want = reader._number(cell, positive=positive)
        assert (want is reader._BAD) if positive and number == 0 else (number == want), cell
    assert all(not re.fullmatch(r"[0-9]{1,20}(\.[0-9]{1,20})?", c) for i, c in enumerate(distinct)
               if i not in set(rows.tolist()))


def test_prices_read_by_arrow_or_one_by_one_give_the_line_readers_offers(tmp_path):
    """Plain and other price cells in one column (an exponent, a sign, spaces, a 0 that is no
    price, a storage price of 0 that is free): the same offers and errors as offers_io."""
    lines = ["alpha,p1,RTX 4090,1,0.35,,,,USD,0,0,0,,eu,no,",
             "alpha,p2,RTX 4090,1,3.5E-1,,,,USD,0.10,,,,eu,no,",
             "alpha,p3,RTX 4090,1, 0.36,,,,USD,+0.10,,,,eu,no,",
             "alpha,p4,RTX 4090,1,0.350,,,,USD,0.100,,,,eu,no,",
             "alpha,p5,RTX 4090,1,1.5,36.00,,,USD,0_1.0,,,,eu,no,"]
    check_same(write(tmp_path, HEADER + "\n".join(lines) + "\n"))
    assert_same_error(write(tmp_path, HEADER + "\n".join(lines) + "\nalpha,p6,RTX 4090,1,0.00,,,,USD,,,,,eu,no,\n",
                            "zero.csv"))
