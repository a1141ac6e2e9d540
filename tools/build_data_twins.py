"""Write the JSON twins of rentopt's TOML data files (optimizer/packaged_data.py says why).

    .venv/bin/python tools/build_data_twins.py           # rewrite optimizer/data/*.toml.json
    .venv/bin/python tools/build_data_twins.py --check   # exit 1 if a twin is not the TOML's

Run it after editing data/gpus.toml, models.toml or fx.toml. A twin left out of date is not
wrong, only slow: rentopt then parses the TOML (and tests/test_packaged_data.py fails).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    from rentopt.optimizer.packaged_data import TWIN_SUFFIX, TWINNED, encode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped twins instead of writing them")
    args = ap.parse_args(argv)
    stale = []
    for name in TWINNED:
        toml = ROOT / "optimizer" / name
        twin = toml.with_name(toml.name + TWIN_SUFFIX)
        data = encode(toml.read_bytes())
        if args.check:
            if not twin.exists() or twin.read_bytes() != data:
                stale.append(twin.name)
        elif not twin.exists() or twin.read_bytes() != data:
            twin.write_bytes(data)
            print(f"wrote {twin.relative_to(ROOT)}")
    if stale:
        print(f"out of date with their TOML: {', '.join(stale)}; run tools/build_data_twins.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
