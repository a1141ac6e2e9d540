"""The import floor of a rentopt command: Python and exactly the third-party modules that
command loads, imported by `python -c "import ..."`, timed the same way as the command.

The list is not written by hand: `loaded_libraries` runs the command once in a child process
and reads its sys.modules, so the floor follows the code (a bundled-snapshot quote loads no
pyarrow, a quote of an offers file does; a quote never loads OR-Tools or pandas unless it
builds a CP-SAT model). What is left above the floor is rentopt's own cost: its modules,
the standard-library modules only it uses, its data files, planning and rendering.
"""

from __future__ import annotations

import subprocess
import sys

# Runs the rentopt command in sys.argv[1:] in-process (its output discarded) and prints, in the
# order they were loaded, the modules it loaded that are neither the standard library's nor
# rentopt's. Names without a spec (Cython's `cython_runtime`) are made by other modules, not
# imported; names that are not identifiers (`_sysconfigdata__linux_x86_64-linux-gnu`, the
# standard library's build data) cannot be written in an import statement.
_PROBE = """
import contextlib, io, sys
before = set(sys.modules)
sys.argv = ["rentopt", *sys.argv[1:]]
from rentopt.optimizer.cli import main
try:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main()
except SystemExit:
    pass
stdlib = set(sys.stdlib_module_names)
print(",".join(name for name, module in list(sys.modules.items())
               if name not in before and name.partition(".")[0] not in stdlib | {"rentopt"}
               and getattr(module, "__spec__", None) is not None
               and all(part.isidentifier() for part in name.split("."))))
"""


def loaded_libraries(args: list[str], env: dict[str, str]) -> list[str]:
    """The third-party modules `rentopt ARGS` loads, in load order."""
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True, check=True)
    return [name for name in out.stdout.strip().split(",") if name]


def floor_argv(modules: list[str]) -> list[str]:
    """The floor's command line: a fresh interpreter importing `modules`, under the settings the
    rentopt command makes for its own process before it loads them (cli.OWN_PROCESS_SETTINGS,
    e.g. OpenBLAS with one thread: with its default pool, `import numpy` alone spends ~0.07 s
    more CPU on a second core, which would count against the floor and flatter the command)."""
    from rentopt.optimizer.cli import OWN_PROCESS_SETTINGS

    settings = "; ".join(f"os.environ.setdefault({k!r}, {v!r})" for k, v in OWN_PROCESS_SETTINGS.items())
    imports = "; import " + ", ".join(modules) if modules else ""
    return [sys.executable, "-c", f"import os; {settings}{imports}"]


def describe(modules: list[str]) -> str:
    """The floor's libraries by top-level name, e.g. "click, numpy, pydantic (156 modules)"."""
    tops = sorted({m.partition(".")[0] for m in modules})
    return f"{', '.join(tops)} ({len(modules)} modules)"
