"""File-system faults: each is one clear line naming the path and the fix, and nothing stored is lost.

Cases: RENTOPT_HOME is a file; a directory where prices.sqlite should be; a read-only
RENTOPT_HOME (refresh refuses clearly, the read-only commands still read the store, which was
left in WAL mode); a full disk before the write (the lock file) and during it (SQLite's own
"database or disk is full", which used to surface as "cannot rollback").

The read-only and full-disk cases run for real where the kernel allows an unprivileged mount
namespace (`unshare -rm`: a read-only bind mount, a 1 MiB tmpfs); elsewhere they are skipped.
The full disk during a write also runs everywhere, through SQLite's max_page_count, which makes
SQLite fail exactly as a full disk does (SQLITE_FULL).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import rentopt.optimizer.store as store_module
from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import FileSystemError, StoreError
from rentopt.optimizer.refresh import run_refresh
from rentopt.optimizer.store import open_readonly, open_writable, store_path


def refresh_sheets():
    """A real refresh of the local price sheets (no network): a store with a good snapshot."""
    report = run_refresh(["sheet"])
    assert report.exit_code == 0
    return report


def stored_offers(path: Path) -> list[str]:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [r[0] for r in db.execute("SELECT offer FROM offers ORDER BY provider, offer_id")]
    finally:
        db.close()


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


QUOTE = ("quote", "--model", "7b", "--mode", "qlora", "--days", "1", "--top", "1")


def test_a_home_that_is_a_file_is_one_clear_line_and_the_file_is_untouched(rentopt_home):
    rentopt_home.parent.mkdir(parents=True, exist_ok=True)
    rentopt_home.write_text("my notes", encoding="utf-8")
    for args in (("refresh", "--providers", "sheet"), QUOTE, ("offers",), ("providers",)):
        result = invoke(*args)
        assert result.exit_code == 4, (args, result.output)
        assert result.stderr.startswith(f"rentopt: error: RENTOPT_HOME {rentopt_home} is a file, not a directory;")
        assert "point RENTOPT_HOME at a directory" in result.stderr and result.stderr.count("\n") == 1
        assert "internal error" not in result.output
    assert rentopt_home.read_text(encoding="utf-8") == "my notes"


def test_a_home_under_a_file_is_one_clear_line(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x", encoding="utf-8")
    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "file" / "rentopt"))
    result = invoke("refresh", "--providers", "sheet")
    assert result.exit_code == 4 and f"{tmp_path / 'file'} is a file" in result.stderr


def test_a_directory_named_like_the_store_is_named_and_left_alone(rentopt_home):
    (rentopt_home / "prices.sqlite").mkdir(parents=True)
    (rentopt_home / "prices.sqlite" / "keep.txt").write_text("mine", encoding="utf-8")
    for args in (("refresh", "--providers", "sheet"), QUOTE, ("providers",)):
        result = invoke(*args)
        assert result.exit_code == 4, (args, result.output)
        assert f"{rentopt_home / 'prices.sqlite'} is a directory, not a price store; move it aside (mv " in result.stderr
        assert "internal error" not in result.output
    assert (rentopt_home / "prices.sqlite" / "keep.txt").read_text(encoding="utf-8") == "mine"


def test_a_full_disk_during_the_write_says_disk_full_and_loses_nothing(rentopt_home, monkeypatch):
    refresh_sheets()
    path = store_path()
    before = stored_offers(path)
    connect = store_module._connect

    def full_disk(uri, *, uri_mode):
        db = connect(uri, uri_mode=uri_mode)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages + 2}")  # no room for a new snapshot
        return db

    monkeypatch.setattr(store_module, "_connect", full_disk)
    (rentopt_home / "sheets").mkdir()
    (rentopt_home / "sheets" / "more.toml").write_text(  # a changed night: new offers to write
        'platform = "more"\ncurrency = "USD"\nsource = "https://more.example"\nread_on = 2026-11-01\n'
        + "".join(f'[[offers]]\nid = "o{i}"\ngpu = "RTX 4090"\nnote = "{"x" * 400}"\n'
                  f'[[offers.prices]]\nunit = "hour"\namount = 0.{i + 10}\n' for i in range(40)), encoding="utf-8")
    result = invoke("refresh", "--providers", "sheet")
    assert result.exit_code == 4, result.output
    assert result.stderr.startswith(f"rentopt: error: disk full: cannot write the price store {path}")
    assert "stored prices are unchanged" in result.stderr and "cannot rollback" not in result.stderr
    assert "Move it aside" not in result.stderr and result.stderr.count("\n") == 1
    monkeypatch.setattr(store_module, "_connect", connect)
    assert stored_offers(path) == before
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_a_failed_transaction_reports_its_cause_not_the_rollback(rentopt_home):
    refresh_sheets()
    with open_writable() as store:
        store.db.execute("PRAGMA max_page_count = 1")
        with pytest.raises(FileSystemError, match="disk full: cannot write the price store"):
            store.mark_failed("sheet", "x" * 100_000)
        assert not store.db.in_transaction


def test_a_price_the_store_cannot_hold_fails_that_provider_only(rentopt_home, monkeypatch):
    """The history writer met 1E+400 (from a plugin that builds offers itself) and raised
    InvalidOperation, ending the refresh; now that provider fails, recorded, and the rest store."""
    from rentopt.optimizer import models
    from rentopt.providers import base

    refresh_sheets()
    before = stored_offers(store_path())
    with open_writable() as store:
        good = [o for o in store.load_offers() if o.provider == "jygpu"]
    huge = good[0].model_copy(update={"price_options": [models.PriceOption(unit="hour", amount=Decimal("1E+400"))]})
    with pytest.raises(StoreError, match="has a price the store cannot hold"):
        with open_writable() as store:
            store.write_snapshot("jygpu", [huge, *good[1:]], plugin="sheet", fetched_at=good[0].fetched_at)
    assert stored_offers(store_path()) == before
    # The band check is what keeps it from ever getting that far in a refresh:
    ctx = base.FetchContext(base.get_providers(["sheet"])[0], client=None)  # type: ignore[arg-type]
    assert "1.25E+399 CNY per GPU-hour is above the sane range" in ctx.price_problem(huge)  # 8 GPUs


# --------------------------------------------------------------------------------------------
# Real read-only and full file systems, in a private mount namespace


def _can_unshare() -> bool:
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


needs_mounts = pytest.mark.skipif(not _can_unshare(), reason="needs unprivileged mount namespaces (unshare -rm)")


def in_namespace(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `script` (sh) as root of a private user and mount namespace; `rentopt` is this rentopt."""
    rentopt = f"{shlex.quote(sys.executable)} -m rentopt"
    return subprocess.run(["unshare", "-rm", "sh", "-c", script.replace("rentopt ", rentopt + " ")],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120)


@needs_mounts
@pytest.mark.parametrize("leftovers", [False, True], ids=["closed-cleanly", "with-shm-and-empty-wal"])
def test_a_read_only_home_refuses_refresh_clearly_and_still_serves_reads(rentopt_home, tmp_path, leftovers):
    refresh_sheets()
    before = stored_offers(store_path())  # a read-only reader leaves an -shm and an empty -wal
    wal, shm = (store_path().with_name(store_path().name + suffix) for suffix in ("-wal", "-shm"))
    assert wal.stat().st_size == 0
    if not leftovers:  # as the last writer leaves it: without a -shm, WAL mode cannot open read-only
        wal.unlink()
        shm.unlink()
    ro = tmp_path / "ro"
    ro.mkdir()
    script = f"""
        mount --bind {rentopt_home} {ro} && mount -o remount,bind,ro {ro} || exit 99
        rentopt refresh --providers sheet; echo "refresh=$?"
        rentopt offers --limit 1 >/dev/null; echo "offers=$?"
        rentopt providers --format json >/dev/null; echo "providers=$?"
        rentopt quote --model 7b --mode qlora --days 1 --top 1 >/dev/null; echo "quote=$?"
    """
    done = in_namespace(script, {"RENTOPT_HOME": str(ro), "RENTOPT_PLUGINS": "builtin"})
    assert done.returncode != 99, done.stderr
    assert "refresh=4\noffers=0\nproviders=0\nquote=0\n" in done.stdout, (done.stdout, done.stderr)
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("rentopt: error:")]
    assert line.startswith(f"rentopt: error: cannot create the lock file {ro / 'refresh.lock'}: the file system is read-only;")
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert stored_offers(store_path()) == before


@needs_mounts
def test_a_full_disk_before_and_during_the_write_says_disk_full(rentopt_home, tmp_path):
    refresh_sheets()
    before = stored_offers(store_path())
    full = tmp_path / "full"
    full.mkdir()
    size_kb = (store_path().stat().st_size // 1024) + 1024
    script = f"""
        mount -t tmpfs -o size={size_kb}k tmpfs {full} || exit 99
        cp {store_path()} {full}/ || exit 98
        fill() {{ rm -f {full}/filler; free=$(df -k {full} | tail -1 | awk '{{print $4}}');
                  head -c $(( (free - $1) * 1024 )) /dev/zero > {full}/filler 2>/dev/null; }}
        fill 0; rentopt refresh --providers sheet; echo "nospace=$?"
        fill 48; rentopt refresh --providers sheet; echo "midwrite=$?"
        rm -f {full}/filler; cp {full}/prices.sqlite {tmp_path}/after.sqlite
    """
    (rentopt_home / "sheets").mkdir()
    (rentopt_home / "sheets" / "more.toml").write_text(
        'platform = "more"\ncurrency = "USD"\nsource = "https://more.example"\nread_on = 2026-11-01\n'
        + "".join(f'[[offers]]\nid = "o{i}"\ngpu = "RTX 4090"\nnote = "{"x" * 900}"\n'
                  f'[[offers.prices]]\nunit = "hour"\namount = 0.{i + 10}\n' for i in range(60)), encoding="utf-8")
    shutil.copytree(rentopt_home / "sheets", full.parent / "sheets-src")
    script = script.replace(f"cp {store_path()} {full}/ || exit 98",
                            f"cp {store_path()} {full}/ && cp -r {full.parent / 'sheets-src'} {full}/sheets || exit 98")
    done = in_namespace(script, {"RENTOPT_HOME": str(full), "RENTOPT_PLUGINS": "builtin"})
    assert done.returncode not in (98, 99), done.stderr
    assert "nospace=4\nmidwrite=4\n" in done.stdout, (done.stdout, done.stderr)
    errors = [x for x in done.stderr.splitlines() if x.startswith("rentopt: error:")]
    assert len(errors) == 2 and all(e.startswith("rentopt: error: disk full: cannot ") for e in errors), errors
    assert not any("cannot rollback" in e or "Move it aside" in e for e in errors)
    assert stored_offers(tmp_path / "after.sqlite") == before
