"""What a quote of the bundled snapshot loads: none of the heavy libraries or rentopt modules
it does not use (issue 25: its start-up is most of its time). Each name below has a reason:

- ortools, pandas: CP-SAT (solver.py) loads them only when a model is built, which a bundled
  quote never needs; pyarrow, polars: offers files only (offers_reader.py);
- httpx, yaml, rentopt.providers, refresh: fetching and price sheets, `rentopt refresh` only;
- report, charts: `rentopt report` only;
- tomllib: rentopt's TOML data is read through its JSON twins (packaged_data.py), and a config
  file is parsed only when there is one;
- currency_converter: its ECB file is read without importing the package (currency.py);
- rentopt.optimizer.store, sqlite3, statistics: with no price store file (paths.no_store_at)
  there is nothing to read in SQL, and the exchange rates come from the shipped file;
- offers_io, row_check, sanity, unicodedata: offers files and the store's rows only;
- difflib, shlex: the messages for an unknown model or GPU name and for a home that cannot be used.

The quote runs in a fresh interpreter (an import made by another test must not hide one), and
its answer is checked to be a quote, so a failure to run cannot pass as a lean import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

NOT_LOADED = ("ortools", "pandas", "pyarrow", "polars", "httpx", "yaml", "tomllib", "currency_converter",
              "rentopt.providers", "rentopt.optimizer.refresh", "rentopt.optimizer.report",
              "rentopt.optimizer.charts", "rentopt.optimizer.offers_reader",
              "rentopt.optimizer.store", "sqlite3", "statistics", "rentopt.optimizer.offers_io",
              "rentopt.optimizer.row_check", "rentopt.optimizer.sanity", "unicodedata",
              "difflib", "shlex")

RUN = """
import contextlib, io, json, sys
sys.argv = ["rentopt", "quote", "--model", "13b", "--mode", "lora", "--days", "10", "--format", "json"]
from rentopt.optimizer.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main()
print(json.dumps({"quote": json.loads(out.getvalue()), "modules": sorted(sys.modules)}))
"""


def quote_modules(home, run: str = RUN) -> list[str]:
    """The modules a quote run by `run` in a fresh interpreter loaded (home: RENTOPT_HOME, no
    store and no config file there); a quote that fails or finds no plan fails the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RENTOPT_")}
    env["RENTOPT_HOME"] = str(home)
    done = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["quote"]["plans"], "the quote found no plan"
    return result["modules"]


def loaded_of(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def test_a_bundled_quote_loads_no_library_or_module_it_does_not_use(tmp_path):
    modules = quote_modules(tmp_path)  # the bundled snapshot
    assert loaded_of(modules, NOT_LOADED) == []
    assert "rentopt.optimizer.planner" in modules  # the probe sees rentopt's own imports


FILE_NOT_LOADED = ("ortools", "pandas", "polars", "httpx", "yaml", "rentopt.providers", "rentopt.optimizer.refresh")


def test_an_offers_file_quote_loads_no_library_it_does_not_use(tmp_path):
    """pyarrow reads the file; pandas (which some of pyarrow's conversions import) must not
    load. The ids take the reader's slower paths: non-ASCII, stripped of white space."""
    offers = tmp_path / "offers.csv"
    offers.write_text("provider,offer_id,gpu,gpus,price_hour,currency\n"
                      "alpha,\u6a21\u578b-1,RTX 4090,1,0.35,USD\n"
                      "alpha, a2\u3000,RTX 4090,1,0.36,USD\n"
                      "beta,b1,A100-SXM4-80GB,8,7.49,USD\n", encoding="utf-8")
    run = RUN.replace('"--format", "json"]', f'"--format", "json", "--offers-file", {str(offers)!r}]')
    modules = quote_modules(tmp_path / "home", run)
    assert loaded_of(modules, FILE_NOT_LOADED) == []
    assert "rentopt.optimizer.offers_reader" in modules  # the file went through the columnar reader
