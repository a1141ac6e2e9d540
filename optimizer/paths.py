"""Where rentopt keeps its files: $RENTOPT_HOME, else the platform's per-user data directory.

One function, used by the store, the config (exchange rates) and the user's price sheets, and
one check that the folder can be used, so every command says the same thing when it cannot.
"""

from __future__ import annotations

import errno
import shlex
from pathlib import Path

from rentopt.optimizer.errors import FileSystemError


def rentopt_home() -> Path:
    """$RENTOPT_HOME, else platformdirs' user data dir for rentopt (XDG on Linux, ~/Library on macOS)."""
    from rentopt.optimizer.settings import settings

    if (home := settings().home) is not None:
        return home
    from platformdirs import user_data_dir

    return Path(user_data_dir("rentopt"))


def _how_to_set(path: Path) -> str:
    return "or point RENTOPT_HOME at a directory this user can write"


def check_home(home: Path) -> None:
    """Raise FileSystemError when rentopt's home exists but is not a directory."""
    try:
        exists, is_dir = home.exists(), home.is_dir()
    except OSError as exc:
        raise fs_error(exc, home, "read") from None
    if exists and not is_dir:
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
        return FileSystemError(f"cannot {doing} {path}: it is a directory, not a file; move it aside "
                               f"(mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.bak')})")
    return FileSystemError(f"cannot {doing} {path}: {exc.strerror or exc}")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a reader sees the old file or the whole new one, never part.

    A temporary file in the same folder (a rename is atomic only within one file system), its
    bytes forced to disk (fsync) before it is renamed over `path`; on any failure the temporary
    file is removed and `path` is left as it was. Raises OSError for the caller to word.
    """
    import os
    import tempfile

    folder = path.parent if str(path.parent) else Path(".")
    try:
        mode = path.stat().st_mode & 0o7777  # a file replaced keeps its permissions
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new file gets what open() would give it (mkstemp's is 0600)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
