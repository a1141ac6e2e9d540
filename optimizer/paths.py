"""Where rentopt keeps its files: $RENTOPT_HOME, else the platform's per-user data directory.

One function, used by the store, the config (exchange rates) and the user's price sheets.
"""

from __future__ import annotations

import os
from pathlib import Path


def rentopt_home() -> Path:
    """$RENTOPT_HOME, else platformdirs' user data dir for rentopt (XDG on Linux, ~/Library on macOS)."""
    if env := os.environ.get("RENTOPT_HOME"):
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("rentopt"))
