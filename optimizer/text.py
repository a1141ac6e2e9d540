"""Escaping text that came from outside (offer ids, GPU names, notes) for Markdown and HTML.

One place, so the report and the quote's Markdown cannot drift apart. Both functions make a
provider's string inert: what a reader sees is the string itself, never markup, a link, a
code span, an image or a broken table.
"""

from __future__ import annotations

import html
import re

# CommonMark's backslash escapes cover every ASCII punctuation character
# (https://spec.commonmark.org/0.31.2/#backslash-escapes); these are the ones that start
# emphasis, code, links, images, strikethrough (GFM), headings or end a GFM table cell.
_MD_SPECIAL = re.compile(r"([\\`*|\[\]~#!])")
# A line that starts like a list item ("- x", "+ x", "1. x", "2) x") nests a list where the
# text is put after "- " (https://spec.commonmark.org/0.31.2/#list-items). A lone "-" (the
# tables' "none") is left as it is: at worst an empty bullet, never markup.
_MD_LIST_START = re.compile(r"^([-+]|\d{1,9}[.)])(?=\s)")


def escape_markdown(text: object) -> str:
    """Text made inert in Markdown, in a table cell or a list item: no HTML, links, code,
    emphasis, headings or cell breaks. The result is one line.

    >>> escape_markdown("<script>alert(1)</script> | [x](javascript:y)\\nz")
    '&lt;script&gt;alert(1)&lt;/script&gt; \\\\| \\\\[x\\\\](javascript:y) z'
    >>> escape_markdown("gpu_1x_a10"), escape_markdown("`rm -rf` _x_"), escape_markdown("1. first")
    ('gpu_1x_a10', '\\\\`rm -rf\\\\` \\\\_x\\\\_', '1\\\\. first')
    """
    s = re.sub(r"\s*[\r\n]+\s*", " ", str(text)).strip()
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
