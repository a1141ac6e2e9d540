"""`--format json` on the listing commands is valid JSON a script can rely on, and `offers`
spells its provider filter like every other command (`--providers`, `--provider` as an alias)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli


def run_json(*args: str):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_gpus_json_lists_catalog_entries_with_sources():
    gpus = run_json("gpus", "--class", "datacenter", "--min-memory", "80", "--format", "json")
    assert gpus and all(g["gpu_class"] == "datacenter" and g["memory_gb"] >= 80 for g in gpus)
    h100 = next(g for g in gpus if g["id"] == "H100-SXM-80GB")
    assert h100["memory_gb"] == 80 and h100["nvlink_gbps"] == 900  # NVIDIA H100 datasheet: 80 GB, 900 GB/s NVLink


def test_gpus_json_with_no_match_is_an_empty_list():
    assert run_json("gpus", "--min-memory", "100000", "--format", "json") == []


def test_models_json_lists_presets_and_resolves_one():
    presets = run_json("models", "--format", "json")
    assert isinstance(presets, list) and {"llama-2-13b", "llama-3.1-8b"} <= {p["id"] for p in presets}
    one = run_json("models", "13b", "--format", "json")
    assert isinstance(one, dict) and one["id"] == "llama-2-13b"
    assert one["layers"] == 40 and one["hidden"] == 5120  # Llama 2 13B config.json: 40 layers, hidden 5120


def test_offers_json_is_a_list_of_priced_offers():
    offers = run_json("offers", "--providers", "lambda", "--format", "json")
    assert offers and all(o["provider"] == "lambda" and o["currency"] == "USD" and o["fetched_at"] for o in offers)


@pytest.mark.parametrize("spelling", ["--providers", "--provider"])
def test_offers_providers_and_its_alias_give_the_same_rows(spelling):
    both = run_json("offers", spelling, "lambda,sheet", "--format", "json")
    assert {o["provider"] for o in both} == {"lambda", "autodl", "jygpu"}  # the sheet plugin's platforms
    assert both == run_json("offers", "--providers", "lambda,sheet", "--format", "json")


def _main_in_a_fresh_process(before: list[str], report: str, env: dict[str, str]) -> list[str]:
    """Run `rentopt models --format json` through cli.main() in a new interpreter after the
    lines `before`, and return the words `report` (a Python expression) printed to stderr."""
    import subprocess
    import sys

    code = "\n".join([
        "import os, sys",
        *before,
        "import rentopt.optimizer.cli as cli",
        "sys.argv = ['rentopt', 'models', '--format', 'json']",  # builds pydantic models (ModelSpec)
        "try:",
        "    cli.main()",
        "except SystemExit:",
        "    pass",
        f"print({report}, file=sys.stderr)",
    ])
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stderr.split()


def test_the_cli_turns_numpys_huge_pages_off_before_numpy_is_imported_unless_the_user_set_them():
    """NUMPY_MADVISE_HUGEPAGE is read once, when numpy is imported: main() must set it first
    (the cli module itself never imports numpy), keep a value the user gave, and refuse one
    numpy cannot read in one line (numpy's import would fail mid-command)."""
    import os
    import subprocess
    import sys

    # numpy is looked for right after cli's import, before main() runs
    before = ["import rentopt.optimizer.cli", "imported = 'numpy' in sys.modules"]
    report = "imported, os.environ.get('NUMPY_MADVISE_HUGEPAGE')"
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    assert _main_in_a_fresh_process(before, report, env)[-2:] == ["False", "0"]
    assert _main_in_a_fresh_process(before, report, {**env, "NUMPY_MADVISE_HUGEPAGE": "1"})[-2:] == ["False", "1"]
    bad = subprocess.run([sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", "models"],
                         env={**env, "NUMPY_MADVISE_HUGEPAGE": "abc"}, capture_output=True, text=True)
    assert bad.returncode == 2, bad.stderr
    assert bad.stderr.strip() == ("rentopt: error: NUMPY_MADVISE_HUGEPAGE='abc': NumPy reads it as a whole number "
                                  "(0: huge pages off, 1: on)")


def test_the_cli_starts_no_blas_threads_unless_the_user_asks_for_them():
    """NumPy's OpenBLAS reads OPENBLAS_NUM_THREADS when numpy is imported and starts a worker
    thread per further core; main() asks for one thread before numpy is imported, so the process
    runs no thread but its own (on a machine of one core there are none to start either way),
    and keeps a value the user gave."""
    import os

    report = "repr(os.environ.get('OPENBLAS_NUM_THREADS')), (__import__('numpy'), len(os.listdir('/proc/self/task')))[1]"
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    assert _main_in_a_fresh_process([], report, env)[-2:] == ["'1'", "1"]
    assert _main_in_a_fresh_process([], report, {**env, "OPENBLAS_NUM_THREADS": "2"})[-2] == "'2'"


def test_the_cli_looks_for_no_pydantic_plugins_unless_the_user_set_the_switch():
    """pydantic looks for plugins by reading every installed distribution's entry points when it
    builds its first model; rentopt uses none, so main() turns the search off before a model is
    built, and keeps a value the user gave (here: empty, so plugins are looked for)."""
    import os

    before = ["import importlib.metadata as md",
              "searches = []",
              "real = md.distributions",
              "md.distributions = lambda *a, **k: searches.append(1) or real(*a, **k)"]
    report = "len(searches), repr(os.environ.get('PYDANTIC_DISABLE_PLUGINS'))"
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    assert _main_in_a_fresh_process(before, report, env)[-2:] == ["0", "'__all__'"]
    assert _main_in_a_fresh_process(before, report, {**env, "PYDANTIC_DISABLE_PLUGINS": ""})[-2:] == ["1", "''"]
