"""The shared escaper: hostile offer text stays text, checked by rendering it with an independent
CommonMark implementation (markdown-it-py, GFM tables on) and an HTML parser."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from rentopt.optimizer.text import escape_html, escape_markdown

HOSTILE = [
    "<script>alert(1)</script>",
    "[link](javascript:alert(1))",
    "![pixel](https://tracker.example/p.png)",
    "<https://evil.example>",
    "a | b || c",
    "`code` and ``two``",
    "**bold** _it_ ~~gone~~",
    "# heading",
    "- not a list",
    "1. not a list either",
    "> not a quote",
    "&lt;b&gt; is an entity",
    "back\\slash\\| and \\`",
    "two\nlines\r\nhere",
    '<img src=x onerror="alert(2)">',
]
RENDERER = MarkdownIt("commonmark").enable("table").enable("strikethrough")


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None
        self.items: list[str] = []
        self._item: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag in ("td", "th"):
            self._cell = []
        if tag == "li":
            self._item = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None
        if tag == "li" and self._item is not None:
            self.items.append("".join(self._item))
            self._item = None

    def handle_data(self, data):
        for part in (self._cell, self._item):
            if part is not None:
                part.append(data)


def rendered(markdown: str) -> Collect:
    parser = Collect()
    parser.feed(RENDERER.render(markdown))  # HTMLParser unescapes entities in text, as a browser would
    return parser


def one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("text", HOSTILE)
def test_offer_text_in_a_markdown_table_cell_stays_one_cell_of_plain_text(text):
    table = f"| offer | price |\n|---|---:|\n| {escape_markdown(text)} | 1.49 |\n"
    out = rendered(table)
    assert set(out.tags) <= {"table", "thead", "tbody", "tr", "th", "td"}, out.tags  # no a, img, code, script, em
    assert out.cells == ["offer", "price", one_line(text), "1.49"]


@pytest.mark.parametrize("text", HOSTILE)
def test_offer_text_in_a_list_item_stays_plain_text(text):
    out = rendered(f"- {escape_markdown(text)}\n- next\n")
    assert set(out.tags) <= {"ul", "li"}, out.tags  # no heading, nested list, quote, link or code
    assert out.items == [one_line(text), "next"]


@pytest.mark.parametrize("text", HOSTILE)
def test_offer_text_in_html_is_text(text):
    out = Collect()
    out.feed(f'<table><tr><td title="{escape_html(text)}">{escape_html(text)}</td></tr></table>')
    assert out.tags == ["table", "tr", "td"]
    assert out.cells == [text]


def _escape_markdown_in_full(text: object) -> str:
    """escape_markdown's every step, for any text (the function skips them for plain text)."""
    import html
    import re

    from rentopt.optimizer.text import _MD_LIST_START, _MD_SPECIAL, one_line

    s = one_line(re.sub(r"\s*[\r\n]+\s*", " ", str(text)).strip())
    s = _MD_SPECIAL.sub(r"\\\1", html.escape(s, quote=False))
    s = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", s)
    return _MD_LIST_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], s)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("aZ09 .,:;%/()=+@$'\"{}?^-_\\`*|[]~#!<>&\t\n\r\x1b\u00e9"
                                              "\u2580\u2581\u2588\u2589")), max_size=12)
       | st.from_regex(r"[-+]|\d{1,3}[.)]", fullmatch=True).map(lambda m: m + " x"))
def test_plain_text_skips_no_step_that_would_change_it(text):
    assert escape_markdown(text) == _escape_markdown_in_full(text)


@pytest.mark.parametrize("text", ["1.49", "- 3", "+ 2", "1) x", "2. first", " lead", "trail ", "a  b", "x_y",
                                  "12:00 UTC", "\u2581\u2585\u2588", "\u2584\u2584 x"])
def test_plain_text_edges(text):
    assert escape_markdown(text) == _escape_markdown_in_full(text)
