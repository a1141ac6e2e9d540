"""rentopt's own TOML data files (data/gpus.toml, models.toml, fx.toml), read through JSON twins.

tomllib is pure Python and slow on gpus.toml, a real share of what a quote of the bundled
snapshot spends above its libraries' import floor, where json (C) reads the same data in a
fraction of the time (figures in the commit and README's Benchmarks). So each file ships with a twin, `data/NAME.toml.json`, which `encode`
writes (tools/build_data_twins.py): {"format", "toml_sha256", "data"}, the data tomllib reads
from the TOML, as JSON, and the SHA-256 of the TOML bytes it was read from.

The TOML stays the file people edit and review (its comments cite each figure's source). A twin
that is missing, cannot be read, or is of other TOML bytes (the TOML edited, the twin not
rebuilt) is not used: `load` parses the TOML, as before, so an out-of-date twin costs time,
never a wrong figure. tests/test_packaged_data.py checks that each shipped twin is the one
`encode` writes and holds exactly what tomllib reads, type for type. The callers validate the
data as they always did (hardware.parse_catalog's checks, workload's, currency's).
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Any

TWINNED = ("data/gpus.toml", "data/models.toml", "data/fx.toml")
TWIN_SUFFIX = ".json"
FORMAT = 1


def encode(toml_bytes: bytes) -> bytes:
    """The twin of the TOML file `toml_bytes` (a tomllib.TOMLDecodeError if it is not TOML).

    TOML's dates and times have no JSON form; rentopt's data files hold none, and a file that
    gained one fails here, at build time (TypeError), not in a quote."""
    import tomllib

    data = tomllib.loads(toml_bytes.decode("utf-8"))
    twin = {"format": FORMAT, "toml_sha256": hashlib.sha256(toml_bytes).hexdigest(), "data": data}
    return json.dumps(twin, ensure_ascii=False, allow_nan=False, indent=0).encode("utf-8") + b"\n"


def decode(twin: bytes, toml_bytes: bytes) -> dict[str, Any] | None:
    """The data of `twin` if it is a twin of exactly `toml_bytes`; else None."""
    try:
        doc = json.loads(twin)
    except ValueError:  # not JSON, or not UTF-8
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT \
            or doc.get("toml_sha256") != hashlib.sha256(toml_bytes).hexdigest():
        return None
    data = doc.get("data")
    return data if isinstance(data, dict) else None


def load(name: str, package_root: Any = None) -> dict[str, Any]:
    """The data of the packaged TOML file `name` (one of TWINNED): from its twin when the twin is
    of these TOML bytes, else parsed from the TOML (a tomllib.TOMLDecodeError, a ValueError,
    when it is not TOML). A fresh object per call: the callers keep what they build from it.
    `package_root` (a folder, for tests): where `name` is, instead of the installed package."""
    here = resources.files("rentopt.optimizer") if package_root is None else package_root
    toml_bytes = here.joinpath(name).read_bytes()
    try:
        twin = here.joinpath(name + TWIN_SUFFIX).read_bytes()
    except OSError:
        twin = None
    data = decode(twin, toml_bytes) if twin is not None else None
    if data is None:
        import tomllib

        data = tomllib.loads(toml_bytes.decode("utf-8"))
    return data
