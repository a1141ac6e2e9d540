"""The shared escaper: hostile offer text stays text, checked by rendering it with an independent
CommonMark implementation (markdown-it-py, GFM tables on) and an HTML parser."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
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
