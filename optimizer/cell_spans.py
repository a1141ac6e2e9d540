"""A regular CSV file's cells as byte spans, coded per distinct value with numpy.

An offers file written by a program has no quotes, carriage returns or NULs, and every line
after the header holds exactly width - 1 commas. Its cells are then the bytes between the
commas and line ends, found in one pass over the bytes (`CellSpans.of`), and a column is coded
by packing each cell's bytes into 64-bit words (`distinct`): no Python object per cell, and no
pandas (its import alone was 0.25 s of a quote, its tokenizer about 1 s of a 1,000,000-line
file; here the separators take about 0.2 s and each coded column about 25 ms).

Exactness: a simple file holds no NUL, so a cell zero-padded to whole words is told apart from
every other cell by its words. One word is the key itself; longer cells are keyed by a mix of
their words, and every cell's words are then compared with its code's (a collision of the mix
falls back to decoding that column's cells).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rentopt.optimizer.offer_table import FixedTexts, Texts, code_values

_COMMA, _LINE_END = 44, 10
_BLOCK = 1 << 22  # bytes searched for separators at a time (a whole-file mask was 80 MB more of a 1M-line file)
_MAX_WORDS = 16  # cells up to 128 bytes are coded as words; a column with longer ones is decoded instead
_MIX = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / golden ratio, odd: Knuth's multiplicative hashing
_TAIL_MASKS = np.array([(1 << (8 * r)) - 1 for r in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_SAMPLE = 4096


class CellSpans:
    """The cells after the header of a regular file: cell j of line i (0-based, after the
    header) is `data[begin:end]` with begin, end = `span(j)`."""

    def __init__(self, data: bytes, body_start: int, separators: np.ndarray, terminated: bool, column: dict[str, int]):
        self.data, self.column, self.n = data, column, len(separators)
        self._separators = separators  # (lines, width): each cell's end (a comma, or the line end)
        self._body_start = body_start
        self._terminated = terminated
        self._words = word_view(data)

    @classmethod
    def of(cls, data: bytes, body_start: int, width: int, column: dict[str, int], *, limit: int,
           block: int = _BLOCK) -> CellSpans | None:
        """The spans, or None where a line after the header does not hold width - 1 commas
        (a blank line, a short or a long one), has `limit` or more bytes (with its line end,
        as the csv module counts them), or there is no such line."""
        if body_start >= len(data) or len(data) < 8:
            return None
        terminated = data.endswith(b"\n")
        lines = data.count(b"\n", body_start) + (0 if terminated else 1)
        separators = np.empty(lines * width, dtype=np.int32 if len(data) < 2**31 else np.int64)
        filled = 0
        buf = np.frombuffer(data, dtype=np.uint8)
        for start in range(body_start, len(buf), block):
            chunk = buf[start:start + block]
            found = np.flatnonzero((chunk == _COMMA) | (chunk == _LINE_END))
            if filled + len(found) > len(separators):
                return None  # more commas than the lines can hold
            separators[filled:filled + len(found)] = found + start
            filled += len(found)
        if not terminated:
            if filled >= len(separators):
                return None
            separators[filled] = len(buf)  # the last line ends where the file does
            filled += 1
        if filled != len(separators):
            return None
        separators = separators.reshape(lines, width)
        # Exactly lines * width separators of which lines are line ends: when every line's last
        # one is a line end, the others are its width - 1 commas.
        real_ends = separators[:, -1] if terminated else separators[:-1, -1]
        if not (buf[real_ends] == _LINE_END).all():
            return None
        if int((separators[:, -1] - _line_begins(body_start, separators)).max()) + 1 >= limit:
            return None
        return cls(data, body_start, separators, terminated, column)

    def line_ends(self) -> np.ndarray:
        """The position of every line end in the file, the header's first."""
        ends = self._separators[:, -1] if self._terminated else self._separators[:-1, -1]
        return np.r_[self._body_start - 1, ends].astype(np.int64)

    def span(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        end = self._separators[:, j]
        return (self._separators[:, j - 1] + 1 if j else _line_begins(self._body_start, self._separators)), end

    def distinct(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Column `name` as (codes, distinct values): `values[codes[i]]` is line i's cell."""
        begin, end = self.span(self.column[name])
        return code_spans(self.data, self._words, begin, end)

    def offer_ids(self, name: str) -> tuple[Any, np.ndarray]:
        """The id cells, stripped as offers_io strips them, and which are empty: packed texts
        (`packed_texts`) where no id has white space at either end, else a list of strings."""
        begin, end = self.span(self.column[name])
        length = end - begin
        buf = np.frombuffer(self.data, dtype=np.uint8)
        some = np.flatnonzero(length > 0)
        first, last = buf[begin[some]], buf[end[some] - 1]
        # str.strip() removes ASCII white space (bytes up to 0x20) and some non-ASCII spaces,
        # whose UTF-8 starts and ends with a byte of 0x80 or more: only those cells are decoded
        unsure = some[(first <= 0x20) | (first >= 0x80) | (last <= 0x20) | (last >= 0x80)]
        data = self.data
        if any((cell := data[b:e].decode()) != cell.strip() for b, e in zip(begin[unsure].tolist(), end[unsure].tolist())):
            ids = [data[b:e].decode().strip() for b, e in zip(begin.tolist(), end.tolist())]
            return ids, np.array([not v for v in ids], dtype=bool)
        return packed_texts(data, self._words, begin, end), length == 0

    def row(self, i: int) -> list[str]:
        begin = self._body_start if i == 0 else int(self._separators[i - 1, -1]) + 1
        return self.data[begin:int(self._separators[i, -1])].decode().split(",")


def _line_begins(body_start: int, separators: np.ndarray) -> np.ndarray:
    """Where each line after the header begins (just after the line end before it)."""
    begins = np.empty(len(separators), dtype=separators.dtype)
    begins[0] = body_start
    begins[1:] = separators[:-1, -1] + 1
    return begins


def code_spans(data: bytes, words: np.ndarray | None, begin: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The cells `data[begin[i]:end[i]]` as (codes, distinct values) (`words`: `word_view(data)`)."""
    keyed = span_keys(data, words, begin, end)
    if keyed is not None:
        keys, parts = keyed
        codes, rep = factorize(keys)
        if all((part[rep][codes] == part).all() for part in parts):  # the mix of long cells told them apart
            return codes, [data[b:e].decode() for b, e in zip(begin[rep].tolist(), end[rep].tolist())]
    return code_values([data[b:e].decode() for b, e in zip(begin.tolist(), end.tolist())])


def packed_texts(data: bytes, words: np.ndarray | None, begin: np.ndarray, end: np.ndarray) -> Any:
    """The cells as texts that hold none of `data`: their words as fixed-width bytes where the
    longest is up to 4 words (32 bytes), else NUL-separated (both need a NUL-free `data`)."""
    keyed = span_keys(data, words, begin, end)
    if keyed is not None and len(keyed[1]) <= 4:
        parts = keyed[1] or [keyed[0]]
        stacked = np.stack(parts, axis=1).astype("<u8", copy=False)  # each cell's bytes in file order
        return FixedTexts(stacked.view(f"S{8 * len(parts)}").ravel())
    return Texts(b"\0".join([data[b:e] for b, e in zip(begin.tolist(), end.tolist())]), len(begin))


def mix(parts: list[np.ndarray]) -> np.ndarray:
    """One 64-bit key per row from several words per row (equal words: equal keys)."""
    key = parts[0].copy()
    for part in parts[1:]:
        key *= _MIX
        key ^= part
    return key


def span_keys(data: bytes, words: np.ndarray | None, begin: np.ndarray, end: np.ndarray
              ) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """A 64-bit key per cell, and the words it was mixed from when a cell is longer than one
    word (to check the mix against); None for cells longer than `_MAX_WORDS` words."""
    if words is None:
        return None
    length = (end - begin).astype(np.int64)
    longest = int(length.max(initial=0))
    count = max(1, -(-longest // 8))
    if count > _MAX_WORDS:
        return None
    last_start = len(words) - 1  # the last position a whole word can be read from
    at = begin.astype(np.int64)
    lengths = np.arange(longest + 1)
    parts = []
    for k in range(count):
        if k:
            at += 8
        # each cell's k-th word: its bytes from 8k on, the ones past the cell (or the file) masked off
        word = words[np.minimum(at, last_start)] & _TAIL_MASKS[np.clip(lengths - 8 * k, 0, 8)][length]
        late = np.flatnonzero(at > last_start)  # a word that would run past the file's end (its last line)
        if len(late):
            word[late] = [int.from_bytes(data[a:a + 8].ljust(8, b"\0"), "little") & int(m)
                          for a, m in zip(at[late].tolist(), _TAIL_MASKS[np.clip(length[late] - 8 * k, 0, 8)])]
        parts.append(word)
    return (parts[0], []) if count == 1 else (mix(parts), parts)


def factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, rep) of 64-bit keys: equal keys share a code, `keys[rep[c]]` is code c's key.

    The distinct keys are found from a sample and every key is looked up in a hash table of
    them; keys the sample missed are added and looked up again. A few columns' worth of 1M
    keys cost about 10 ms each here, against 120 ms for np.unique's sort."""
    keys = keys.astype(np.uint64, copy=False)
    n = len(keys)
    step = max(1, n // _SAMPLE)
    known = np.unique(np.concatenate([keys[:_SAMPLE], keys[::step]]))
    codes, missed = _look_up(keys, known)
    if len(missed):
        known = np.union1d(known, keys[missed])
        codes, missed = _look_up(keys, known)
    rep = np.empty(len(known), dtype=np.int64)
    rep[codes] = np.arange(n)  # any row of each key
    return codes, rep


def _look_up(keys: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each key's index in `known` (sorted, distinct), and the rows whose key is not there."""
    bits = min(max(len(known).bit_length() + 3, 8), 22)
    shift = np.uint64(64 - bits)
    table = np.full(1 << bits, -1, dtype=np.int32)
    table[((known * _MIX) >> shift).astype(np.intp)] = np.arange(len(known), dtype=np.int32)
    codes = table[((keys * _MIX) >> shift).astype(np.intp)]
    wrong = np.flatnonzero((codes < 0) | (known[codes] != keys))  # a slot two known keys share holds one
    if len(wrong):
        at = np.minimum(np.searchsorted(known, keys[wrong]), len(known) - 1)
        found = known[at] == keys[wrong]
        codes[wrong[found]] = at[found]
        wrong = wrong[~found]
    return codes, wrong


def word_view(data: bytes) -> np.ndarray | None:
    """Every 8 bytes of `data` from every position, as little-endian 64-bit words (a view: no copy)."""
    if len(data) < 8:
        return None
    return np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
