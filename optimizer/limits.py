"""How many bytes rentopt reads from one source, and decompression that stops at that size.

Every source has a maximum for what it downloads and for what that becomes once decompressed;
past it the source fails in one line and nothing of it is stored. Without one, a 4 MB `.gz`
snapshot took 8.3 GB of memory, a 1 GiB gzip response 5.2 GB and a 5 GiB body 10.6 GB, and the
OOM killer decided the night's run (issue 24). `RENTOPT_MAX_DOWNLOAD_MB` replaces every
default below, for sources that are really that large.

The defaults, each far above what its source serves:
- a provider API response: 64 MiB (the largest page rentopt reads, Azure's retail prices,
  is about 1 MB; SkyPilot's largest catalog file, aws/vms.csv, about 10 MB);
- AWS's bulk EC2 price list: 2 GiB (us-east-1 is several hundred MB: providers/aws.py);
- a team snapshot (`refresh --from`): 256 MiB, file or download, and 256 MiB decompressed
  (the bundled snapshot of 2,972 offers is 4 MB of JSON: room for about 200,000 offers);
- the ECB's exchange-rate history: 64 MiB (the zip is about 650 kB, its CSV about 8 MB).
"""

from __future__ import annotations

import zlib
from pathlib import Path

MIB = 1 << 20
API_RESPONSE_BYTES = 64 * MIB
AWS_PRICE_LIST_BYTES = 2048 * MIB
SNAPSHOT_BYTES = 256 * MIB
ECB_BYTES = 64 * MIB
SETTING = "RENTOPT_MAX_DOWNLOAD_MB"
_CHUNK = MIB  # decompressed a mebibyte at a time: memory stays at the limit, never a bomb's full size


def limit(default: int) -> int:
    """`default`, or the RENTOPT_MAX_DOWNLOAD_MB setting when it is set."""
    from rentopt.optimizer.settings import settings

    mb = settings().max_download_mb
    return default if mb is None else int(mb * MIB)


def size_words(n: int) -> str:
    """
    >>> size_words(256 * MIB), size_words(3 * MIB // 2)
    ('256 MiB', '1.5 MiB')
    """
    return f"{n / MIB:g} MiB"


def too_large(what: str, size_limit: int, *, decompressed: bool = False) -> str:
    """The one line said when a source passes its limit."""
    kind = "once decompressed" if decompressed else ""
    return (f"{what} is larger than {size_words(size_limit)}{' ' + kind if kind else ''}, the limit for it; "
            f"nothing of it was stored (if it is really that large, raise the limit with {SETTING})")


class TooLarge(ValueError):
    """A source past its byte limit; the message is `too_large`'s line."""


def gunzip(raw: bytes, size_limit: int, what: str) -> bytes:
    """`raw` (gzip) decompressed as a stream, a mebibyte at a time: TooLarge as soon as the
    output passes `size_limit`, never after building it whole. zlib.error for damaged data.

    >>> import gzip
    >>> gunzip(gzip.compress(b"x" * 10), 100, "f")
    b'xxxxxxxxxx'
    >>> try:
    ...     gunzip(gzip.compress(b"x" * 10_000_000), MIB, "a.gz")
    ... except TooLarge as exc:
    ...     print(exc)
    a.gz is larger than 1 MiB once decompressed, the limit for it; nothing of it was stored (if it is really that large, raise the limit with RENTOPT_MAX_DOWNLOAD_MB)
    """
    out: list[bytes] = []
    size = 0
    data = raw
    while data:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member (a file may hold several)
        pending = data
        while pending and not stream.eof:
            piece = stream.decompress(pending, _CHUNK)
            size += len(piece)
            if size > size_limit:
                raise TooLarge(too_large(what, size_limit, decompressed=True))
            out.append(piece)
            pending = stream.unconsumed_tail
        if not stream.eof:
            raise zlib.error("the gzip data ends early (the file was cut short)")
        data = stream.unused_data
    return b"".join(out)


def read_file(path: Path, size_limit: int, what: str) -> bytes:
    """A file's bytes, TooLarge past `size_limit` (read no further than one byte beyond)."""
    with path.open("rb") as fp:
        data = fp.read(size_limit + 1)
    if len(data) > size_limit:
        raise TooLarge(too_large(what, size_limit))
    return data
