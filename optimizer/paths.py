"""Where rentopt keeps its files: $RENTOPT_HOME, else the platform's per-user data directory.

One function, used by the store, the config (exchange rates) and the user's price sheets, and
one check that the folder can be used, so every command says the same thing when it cannot.
"""

from __future__ import annotations

import errno
from pathlib import Path

from rentopt.optimizer.errors import FileSystemError


def rentopt_home() -> Path:
    """$RENTOPT_HOME, else platformdirs' user data dir for rentopt (XDG on Linux, ~/Library on macOS)."""
    from rentopt.optimizer.settings import settings

    if (home := settings().home) is not None:
        return home
    from platformdirs import user_data_dir

    return Path(user_data_dir("rentopt"))


STORE_FILENAME = "prices.sqlite"


def store_path() -> Path:
    """The price store's file (store.py reads and writes it)."""
    return rentopt_home() / STORE_FILENAME


def no_store_at(path: Path) -> bool:
    """Whether there is certainly no price store at `path`, in a usable home: then a command that
    only reads prices need not load store.py (nor sqlite3) to learn that there is none. Any
    doubt (the home is a file, a permission error) answers False: store.py opens the path and
    says what is wrong, as it always did."""
    try:
        check_home(path.parent)
        return not path.exists()
    except (FileSystemError, OSError):
        return False


def _how_to_set(path: Path) -> str:
    return "or point RENTOPT_HOME at a directory this user can write"


def check_home(home: Path) -> None:
    """Raise FileSystemError when rentopt's home exists but is not a directory."""
    try:
        exists, is_dir = home.exists(), home.is_dir()
    except OSError as exc:
        raise fs_error(exc, home, "read") from None
    if exists and not is_dir:
        import shlex  # error messages only (a command that succeeds never loads it)

        raise FileSystemError(
            f"RENTOPT_HOME {home} is a file, not a directory; point RENTOPT_HOME at a directory "
            f"(or move the file aside: mv {shlex.quote(str(home))} {shlex.quote(str(home) + '.bak')})"
        )
    for parent in home.parents:
        if parent.exists() and not parent.is_dir():
            raise FileSystemError(f"RENTOPT_HOME {home} cannot be a directory: {parent} is a file; "
                                  f"{_how_to_set(home)}")


def ensure_home(home: Path) -> Path:
    """Create rentopt's home for a command that writes there; FileSystemError says why it cannot."""
    check_home(home)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fs_error(exc, home, "create") from None
    return home


def fs_error(exc: OSError, path: Path, doing: str) -> FileSystemError:
    """One sentence for a file-system failure: what, where, and the fix. Never 'move it aside'
    for a healthy file: a full disk or a read-only mount is not the file's fault."""
    code = exc.errno
    if code == errno.ENOSPC or code == errno.EDQUOT:
        return FileSystemError(f"disk full: cannot {doing} {path} (no space left on the device); free some space, "
                               "then run the command again. Nothing stored was changed.")
    if code == errno.EROFS:
        return FileSystemError(f"cannot {doing} {path}: the file system is read-only; `rentopt refresh` needs a writable "
                               f"RENTOPT_HOME ({_how_to_set(path)}). quote, offers, report and providers still work.")
    if code in (errno.EACCES, errno.EPERM):
        return FileSystemError(f"cannot {doing} {path}: permission denied; make it writable by this user "
                               f"(chmod u+w), {_how_to_set(path)}")
    if code == errno.ENOTDIR:
        return FileSystemError(f"cannot {doing} {path}: a part of the path is a file, not a directory; {_how_to_set(path)}")
    if code == errno.EISDIR:
        import shlex

        return FileSystemError(f"cannot {doing} {path}: it is a directory, not a file; move it aside "
                               f"(mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.bak')})")
    return FileSystemError(f"cannot {doing} {path}: {exc.strerror or exc}")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` so that a reader sees the old file or the whole new one,
    never part (`write_atomic`). Raises OSError for the caller to word."""
    write_atomic(path, text.encode("utf-8"))


def write_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that the file is either the old one or the whole new one, never
    a part: a temporary file in the same folder (so the rename stays on one file system), written,
    flushed and fsynced, then renamed over `path` (atomic on POSIX and Windows: os.replace), and
    the folder fsynced so the rename itself survives a power cut. On any failure (a full disk,
    a read-only folder) the temporary file is removed, the previous file at `path` is left as it
    was, and the OSError is raised for the caller to word. A `snapshot export` or `report -o` on
    a full disk once left a truncated file in place of the previous good one (issue 24)."""
    import os
    import tempfile

    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = path.stat().st_mode & 0o7777  # a file replaced keeps its permissions
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new file gets what open() would give it (mkstemp's is 0600)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fp:
            fp.write(data)
            fp.flush()
            os.fsync(fp.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    try:
        directory = os.open(folder, os.O_RDONLY)
    except OSError:
        return  # a platform without directory handles (Windows): the rename is done all the same
    try:
        os.fsync(directory)
    except OSError:
        pass
    finally:
        os.close(directory)
