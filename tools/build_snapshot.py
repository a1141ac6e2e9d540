"""Build optimizer/data/snapshot.json.gz, the price catalog rentopt ships for use before (and
beside) the first refresh, from PUBLISHED prices only:

- SkyPilot's catalog (schema v8, one `<cloud>/vms.csv` per cloud), read by the real `skypilot`
  plugin: the newest dated catalog for each cloud's current offers, and every older dated
  catalog of that cloud as its price history (daily for lambda and vast);
- the bundled price sheets whose prices are sourced and dated (JYGPU, AutoDL), read by the real
  `sheet` plugin; a sheet with placeholder prices (NexGPU) contributes nothing.

    .venv/bin/python tools/build_snapshot.py                  # rewrite the bundled snapshot (and its columns)
    .venv/bin/python tools/build_snapshot.py --check          # exit 1 if it differs from a fresh build
    .venv/bin/python tools/build_snapshot.py --catalogs DIR   # DIR/skypilot-v8/<date>/<cloud>/vms.csv

The catalogs are looked for in --catalogs, $RENTOPT_CATALOGS, then a `shared/catalogs` folder
next to or above the repository (the project's shared material: real SkyPilot catalogs from the
public mirror github.com/anycloud-sh/catalog, daily commits "Update catalogs YYYY-MM-DD").
Recorded test fixtures never enter the snapshot. The build is a pure function of the catalogs,
the sheets and the plugins (tests/test_catalog.py rebuilds it and compares when the catalogs
are there), and runs with a temporary RENTOPT_HOME so no user sheet leaks in.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SNAPSHOT_PATH = ROOT / "optimizer" / "data" / "snapshot.json.gz"
CATALOGS_ENV = "RENTOPT_CATALOGS"
# Where the SkyPilot files come from, for every offer's `source`: the public mirror's repository
# (the catalog README in the project's shared material names the commit of each date).
PUBLISHED_AT = "github.com/anycloud-sh/catalog, a mirror of SkyPilot's published v8 catalog"
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class SnapshotBuildError(Exception):
    pass


def find_catalogs(explicit: Path | None = None) -> Path | None:
    """The folder holding `skypilot-v8/`, or None when none is found."""
    candidates = [explicit] if explicit else []
    if env := os.environ.get(CATALOGS_ENV):
        candidates.append(Path(env))
    for up in (ROOT, *ROOT.parents):
        candidates.append(up / "shared" / "catalogs")
    for c in candidates:
        if c is not None and (c / "skypilot-v8").is_dir():
            return c
    return None


def dated_catalogs(root: Path) -> dict[str, dict[str, Path]]:
    """cloud -> date -> vms.csv, from `skypilot-v8/<date>/` and `skypilot-v8/history/<date>/`."""
    found: dict[str, dict[str, Path]] = {}
    base = root / "skypilot-v8"
    for folder in [*base.iterdir(), *((base / "history").iterdir() if (base / "history").is_dir() else [])]:
        if not (folder.is_dir() and _DATE.match(folder.name)):
            continue
        for csv_path in folder.glob("*/vms.csv"):
            found.setdefault(csv_path.parent.name, {})[folder.name] = csv_path
    return found


@contextmanager
def scrubbed_environment() -> Iterator[None]:
    """Temporarily: an empty RENTOPT_HOME and no RENTOPT_* overrides. Restored after."""
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith("RENTOPT_") and name != CATALOGS_ENV:
                del os.environ[name]
        with tempfile.TemporaryDirectory(prefix="rentopt-snapshot-") as home:
            os.environ["RENTOPT_HOME"] = home
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


# When each current file last changed in the mirror (`git log -- <cloud>/vms.csv`), which is the
# date its prices were read: the catalogs README in the project's shared material (catalogs/
# README.md), not the folder's label. Vast's file is a one-time seed never updated after.
LAST_CHANGED = {
    "gcp": ("2026-04-20", "5738017"),
    "azure": ("2026-05-20", "62ff0a9"),
    "lambda": ("2026-05-07", "4c06102"),
    "vast": ("2026-04-29", "336ccee"),
}
# The clouds of skypilot-v8-more/: SkyPilot's own repository, dates unknown (SOURCES.md there).
MORE_PUBLISHED_AT = "github.com/skypilot-org/skypilot-catalog, catalogs/v8"


def _dated_versions(cloud: str, by_date: dict[str, Path]) -> list[tuple[datetime, str, Path]]:
    """Each DISTINCT version of a cloud's file, oldest first: (date its prices were read, how
    that is known, file). A version repeated day after day (the mirror copies files that did not
    change) is one version, dated the first day it was seen; the newest is dated by LAST_CHANGED
    when that is known."""
    import hashlib

    versions: dict[str, tuple[str, Path]] = {}
    for date in sorted(by_date):
        digest = hashlib.sha256(by_date[date].read_bytes()).hexdigest()
        versions.setdefault(digest, (date, by_date[date]))
    ordered = sorted(versions.values())
    out = []
    for i, (date, path) in enumerate(ordered):
        how = f"first seen in the catalog of {date}"
        if i == len(ordered) - 1 and cloud in LAST_CHANGED:
            date, commit = LAST_CHANGED[cloud]
            how = f"mirror commit {commit}, the file's last change"
        out.append((_day(date), how, path))
    return out


def skypilot_sections(root: Path) -> list:
    from rentopt.optimizer.catalog import SnapshotHistory, SnapshotProvider
    from rentopt.optimizer.store import history_rows

    sections = []
    for cloud, by_date in sorted(dated_catalogs(root).items()):
        history, current = [], None
        for when, how, path in _dated_versions(cloud, by_date):
            source = f"SkyPilot catalog of {when:%Y-%m-%d} ({cloud}/vms.csv at {PUBLISHED_AT}; dated by {how})"
            offers = _parse(cloud, path, when, source, "published")
            if not offers:
                continue
            history.append(SnapshotHistory(fetched_at=when, source=source, offers=len(offers),
                                           rows=[tuple(r) for r in history_rows(offers)]))
            current = (when, source, offers)
        if current is None:
            continue
        when, source, offers = current
        sections.append(SnapshotProvider(provider=cloud, plugin="skypilot", fetched_at=when, source=source,
                                         offers=sorted(offers, key=lambda o: o.offer_id), history=history))
    return sections + more_sections(root)


def more_sections(root: Path) -> list:
    """The clouds of `skypilot-v8-more/`: date unknown (only each file's commit is known), so
    their sections say so and carry no history."""
    from rentopt.optimizer.catalog import SnapshotProvider
    from rentopt.optimizer.models import UNKNOWN_DATE

    folder = root / "skypilot-v8-more"
    if not folder.is_dir():
        return []
    commits = _commits(folder / "SOURCES.md")
    sections = []
    for path in sorted(folder.glob("*/vms.csv")):
        cloud = path.parent.name
        if cloud not in commits:
            raise SnapshotBuildError(f"{path}: not in {folder / 'SOURCES.md'}: its source commit is unknown")
        source = (f"SkyPilot catalog, date unknown ({cloud}/vms.csv at {MORE_PUBLISHED_AT}, "
                  f"commit {commits[cloud][:7]})")
        offers = _parse(cloud, path, UNKNOWN_DATE, source, "unknown")
        if offers:
            sections.append(SnapshotProvider(provider=cloud, plugin="skypilot", fetched_at=UNKNOWN_DATE, source=source,
                                             offers=sorted(offers, key=lambda o: o.offer_id), dated_by="unknown"))
    return sections


def _commits(sources_md: Path) -> dict[str, str]:
    """cloud -> commit id, from the SOURCES.md table (| cloud | repo | path | commit | ...)."""
    found = {}
    for line in sources_md.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"[0-9a-f]{40}", cells[3]):
            found[cells[0]] = cells[3]
    return found


def _parse(cloud: str, path: Path, when: datetime, source: str, dated_by: str) -> list:
    """One file's offers, read by the real plugin and checked as a refresh checks them."""
    from rentopt.optimizer.errors import ProviderError
    from rentopt.providers.base import FetchContext, check_offers
    from rentopt.providers.skypilot import CatalogError, SkyPilotProvider, parse_catalog

    ctx = FetchContext(SkyPilotProvider(), client=None, fetched_at=when)  # type: ignore[arg-type]
    try:
        offers = parse_catalog(ctx, cloud, path.read_text(encoding="utf-8"), fetched_at=when, source=source,
                               dated_by=dated_by)  # type: ignore[arg-type]
    except CatalogError as exc:
        raise SnapshotBuildError(f"{path}: {exc}") from None
    if not offers:
        return []
    try:  # the checks a refresh runs before storing: prices outside the sane bands go
        offers = check_offers(ctx, offers)
    except ProviderError as exc:
        raise SnapshotBuildError(f"{path}: {exc.reason}") from None
    if ctx.rejected:
        print(f"{path}: {len(ctx.rejected)} rows rejected, first: {ctx.rejected[0][0]}: {ctx.rejected[0][1]}",
              file=sys.stderr)
    return offers


def sheet_sections() -> list:
    """The bundled sheets with sourced prices, one section per platform (none for placeholders)."""
    from rentopt.optimizer.catalog import SnapshotHistory, SnapshotProvider
    from rentopt.optimizer.store import history_rows
    from rentopt.providers.base import FetchContext
    from rentopt.providers.sheet import SheetProvider, collect_sheets, sheet_offers

    loaded, problems = collect_sheets()
    if problems:
        raise SnapshotBuildError("; ".join(p.message for p in problems))
    sections = []
    for item in loaded:
        if item.sheet.placeholder_prices:
            continue
        ctx = FetchContext(SheetProvider(), client=None)  # type: ignore[arg-type]
        offers = sorted(sheet_offers(ctx, item), key=lambda o: o.offer_id)
        if ctx.skipped:
            raise SnapshotBuildError(f"{item.path.name}: {ctx.skipped[0][1]}")
        when = max(o.fetched_at for o in offers)
        source = f"{item.sheet.name or item.sheet.platform} price sheet ({item.sheet.source}), read {item.sheet.read_on}"
        sections.append(SnapshotProvider(
            provider=item.sheet.platform, plugin="sheet", fetched_at=when, source=source, offers=offers,
            history=[SnapshotHistory(fetched_at=when, source=source, offers=len(offers),
                                     rows=[tuple(r) for r in history_rows(offers)])]))
    return sections


def build(catalogs: Path | None = None):
    """The snapshot (optimizer.catalog.SnapshotFile)."""
    from rentopt.optimizer.catalog import SNAPSHOT_FORMAT, SnapshotFile

    root = find_catalogs(catalogs)
    if root is None:
        raise SnapshotBuildError("no SkyPilot catalogs found: pass --catalogs DIR (holding skypilot-v8/) "
                                 f"or set {CATALOGS_ENV}")
    with scrubbed_environment():
        sections = skypilot_sections(root) + sheet_sections()
    sections.sort(key=lambda s: s.provider)
    return SnapshotFile(format=SNAPSHOT_FORMAT, created_at=max(s.fetched_at for s in sections),  # a known date
                        description="published prices: SkyPilot's catalog (github.com/skypilot-org/skypilot-catalog) "
                                    "and sourced price sheets; built by tools/build_snapshot.py",
                        providers=sections)


def columns_path(snapshot_path: Path) -> Path:
    """Where the snapshot's planning columns go (optimizer/bundled.py): snapshot-columns.bin.gz
    beside snapshot.json.gz."""
    return snapshot_path.with_name(snapshot_path.name.removesuffix(".json.gz") + "-columns.bin.gz")


def main(argv: list[str] | None = None) -> int:
    from rentopt.optimizer import bundled
    from rentopt.optimizer.catalog import encode_snapshot, parse_snapshot

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    ap.add_argument("--output", type=Path, default=SNAPSHOT_PATH)
    ap.add_argument("--catalogs", type=Path, help="folder holding skypilot-v8/")
    args = ap.parse_args(argv)
    logging.getLogger("rentopt").setLevel(logging.ERROR)  # rows skipped by design (TPUs, ...) are not news here
    try:
        snapshot = build(args.catalogs)
    except SnapshotBuildError as exc:
        print(f"build_snapshot: {exc}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{p.provider} {len(p.offers)}" for p in snapshot.providers)
    columns = columns_path(args.output)
    if args.check:
        raw = args.output.read_bytes() if args.output.exists() else b""
        shipped = parse_snapshot(raw) if raw else None
        if shipped != snapshot:
            print(f"{args.output} is out of date with the catalogs and sheets; run tools/build_snapshot.py", file=sys.stderr)
            return 1
        if not columns.exists() or columns.read_bytes() != bundled.encode(raw, shipped):
            print(f"{columns} is out of date with {args.output.name}; run tools/build_snapshot.py", file=sys.stderr)
            return 1
        print(f"{args.output} and {columns.name} are up to date ({summary})")
        return 0
    data = encode_snapshot(snapshot)
    args.output.write_bytes(data)
    columns.write_bytes(table := bundled.encode(data, parse_snapshot(data)))
    print(f"wrote {args.output}: {len(data):,} bytes, {len(snapshot.offers)} offers ({summary}); "
          f"{columns.name}: {len(table):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
