"""Escaping text that came from outside (offer ids, GPU names, notes) for terminals, Markdown,
HTML and CSV.

One place, so the outputs cannot drift apart. Each function makes a provider's string inert:
what a reader sees is the string itself, never markup, a link, a code span, an image, a broken
table, a terminal escape sequence (clear-screen, window title, cursor moves), a line that was
not there (a newline in a name once forged "#1 total 0.01 USD" inside a quote table), or a
spreadsheet formula.
"""

from __future__ import annotations

import html
import re

# Control characters: C0 (newline and tab included), DEL, C1, and the format characters that
# break or reorder lines on a terminal (line and paragraph separators, bidirectional overrides
# and isolates, zero-width marks, the byte-order mark).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# OWASP, "CSV Injection": a cell a spreadsheet would run as a formula starts with one of these
# (https://owasp.org/www-community/attacks/CSV_Injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def one_line(text: object) -> str:
    """Text made inert on a terminal, on one line: every control character written as its
    escape (\\n, \\x1b, \\u202e), so it shows as what it is and breaks or moves nothing.

    >>> print(one_line("evil\\n#1  total 0.01 USD\\x1b[2J\\u202e"))
    evil\\n#1  total 0.01 USD\\x1b[2J\\u202e
    >>> one_line("RTX 4090")
    'RTX 4090'
    """
    s = str(text)
    return _CONTROL.sub(lambda m: ascii(m.group())[1:-1], s) if _CONTROL.search(s) else s


def table_cells(rows: list[list[object]]) -> list[list[str]]:
    """Every cell of a table made one inert line (`one_line`), before tabulate lays it out."""
    return [[one_line(c) for c in row] for row in rows]


def csv_cell(text: object) -> str:
    """A text cell for CSV output: control characters escaped (`one_line`), and a cell that a
    spreadsheet would run as a formula (starting with = + - @, tab or carriage return) prefixed
    with a single quote, which shows it as text (OWASP's rule).

    >>> for cell in ("=HYPERLINK(1)", "@SUM(A1)", "lambda", "-"):
    ...     print(csv_cell(cell))
    '=HYPERLINK(1)
    '@SUM(A1)
    lambda
    '-
    """
    s = one_line(text)
    return "'" + s if s.startswith(_FORMULA_START) else s

# CommonMark's backslash escapes cover every ASCII punctuation character
# (https://spec.commonmark.org/0.31.2/#backslash-escapes); these are the ones that start
# emphasis, code, links, images, strikethrough (GFM), headings or end a GFM table cell.
_MD_SPECIAL = re.compile(r"([\\`*|\[\]~#!])")
# A line that starts like a list item ("- x", "+ x", "1. x", "2) x") nests a list where the
# text is put after "- " (https://spec.commonmark.org/0.31.2/#list-items). A lone "-" (the
# tables' "none") is left as it is: at worst an empty bullet, never markup.
_MD_LIST_START = re.compile(r"^([-+]|\d{1,9}[.)])(?=\s)")


# Text that escaping leaves as it is: words of letters, digits and punctuation that is never
# markup, one space apart (no edge or repeated space to strip, no control character), unless
# it starts like a list item. Most table cells are such (numbers, names, dates, the report's
# price trends in block elements U+2581-U+2588).
_MD_WORD = r"[A-Za-z0-9.,:;%/()=+@$'\"{}?^\u2581-\u2588-]+"
_MD_PLAIN = re.compile(f"{_MD_WORD}(?: {_MD_WORD})*")


def escape_markdown(text: object) -> str:
    """Text made inert in Markdown, in a table cell or a list item: no HTML, links, code,
    emphasis, headings or cell breaks. The result is one line.

    >>> escape_markdown("<script>alert(1)</script> | [x](javascript:y)\\nz")
    '&lt;script&gt;alert(1)&lt;/script&gt; \\\\| \\\\[x\\\\](javascript:y) z'
    >>> escape_markdown("gpu_1x_a10"), escape_markdown("`rm -rf` _x_"), escape_markdown("1. first")
    ('gpu_1x_a10', '\\\\`rm -rf\\\\` \\\\_x\\\\_', '1\\\\. first')
    """
    s = str(text)
    if _MD_PLAIN.fullmatch(s) and not _MD_LIST_START.match(s):
        return s
    s = one_line(re.sub(r"\s*[\r\n]+\s*", " ", s).strip())
    s = html.escape(s, quote=False)
    s = _MD_SPECIAL.sub(r"\\\1", s)
    # An underscore inside a word never starts emphasis (CommonMark); at a word edge it may.
    s = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)
    return _MD_LIST_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], s)


def escape_html(text: object) -> str:
    """Text made inert in HTML, in element content or a quoted attribute value.

    >>> escape_html('<img src=x onerror="alert(1)">')
    '&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
    """
    return html.escape(str(text), quote=True)
