"""A nightly refresh that works from cron (issue 26): cron gives a job almost no environment
(no PATH to a virtual environment, no keys exported in a shell's start-up file), so the README
recipe names the absolute path `rentopt providers` prints, and the keys come from the config
file in the platform's config folder. Run here under `env -i`, as cron would."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-cron-SECRET-4711"
COMMAND = Path(sys.executable).parent / "rentopt"

pytestmark = pytest.mark.skipif(not COMMAND.is_file() or shutil.which("env") is None,
                                reason="needs the installed rentopt script and env(1)")


def cron(home: Path, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`env -i` with only what cron sets (HOME, LOGNAME, SHELL, PATH=/usr/bin:/bin)."""
    env = ["HOME=" + str(home), "LOGNAME=cron", "SHELL=/bin/sh", "PATH=/usr/bin:/bin",
           *(f"{k}={v}" for k, v in (extra or {}).items())]
    return subprocess.run(["env", "-i", *env, str(COMMAND), *args], capture_output=True, text=True, timeout=120)


def write_config(home: Path, text: str) -> Path:
    path = home / ".config" / "rentopt" / "config.toml"  # platformdirs' folder on Linux without XDG_CONFIG_HOME
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o600)
    return path


def test_the_crontab_line_runs_under_env_i_with_keys_from_the_config_file(tmp_path):
    home = tmp_path / "home"
    write_config(home, f'providers = ["lambda", "sheet"]\ncurrency = "EUR"\n[keys]\nLAMBDA_API_KEY = "{SECRET}"\n')
    # The recipe's command is the one `rentopt providers` prints.
    shown = cron(home, "providers")
    assert shown.returncode == 0, shown.stderr
    assert f"rentopt command: {COMMAND}" in shown.stdout
    assert f"15 3 * * *  {COMMAND} refresh --quiet" in shown.stdout
    # Offline (Lambda's API refuses the connection): the key from the file reached the plugin
    # (it failed fetching, it was not skipped for a missing key), the sheets do not count as a
    # success, and the exit status is README's "3 none succeeded".
    offline = {"RENTOPT_LAMBDA_BASE_URL": "http://127.0.0.1:9", "RENTOPT_HTTP_RETRIES": "0"}
    result = cron(home, "refresh", "--format", "json", extra=offline)
    assert result.returncode == 3, result.stdout + result.stderr
    report = json.loads(result.stdout)
    status = {p["provider"]: p["status"] for p in report["providers"]}
    assert status["lambda"] == "failed"  # the sheets' providers (autodl, jygpu, ...) were read, and are ok
    assert "needs an API key" not in result.stdout
    quiet = cron(home, "refresh", "--quiet", extra=offline)
    assert quiet.returncode == 3 and quiet.stdout == ""
    assert "lambda" in quiet.stderr
    for out in (shown, result, quiet):
        assert SECRET not in out.stdout + out.stderr
    # config show redacts; the environment wins over the file
    show = cron(home, "config", "show", extra={"RENTOPT_CURRENCY": "CNY"})
    assert show.returncode == 0, show.stderr
    assert SECRET not in show.stdout and "LAMBDA_API_KEY" in show.stdout
    rows = {line.split()[0]: line.split(None, 1)[1] for line in show.stdout.splitlines()[3:] if line.strip()}
    assert rows["currency"].startswith("CNY") and "environment (RENTOPT_CURRENCY)" in rows["currency"]
    assert rows["LAMBDA_API_KEY"].startswith("set (hidden)") and rows["LAMBDA_API_KEY"].endswith("config file")


def test_without_the_config_file_a_cron_job_has_no_keys(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    result = cron(home, "refresh", "--providers", "lambda", "--format", "json")
    assert result.returncode == 3  # the one plugin asked for was skipped for its key
    report = json.loads(result.stdout)
    assert "LAMBDA_API_KEY" in report["providers"][0]["error"]


def test_a_bad_config_file_is_one_line_and_exit_2(tmp_path):
    home = tmp_path / "home"
    write_config(home, f'currency = "EUR"\npassword = "{SECRET}"\n')
    result = cron(home, "quote", "--model", "13b", "--mode", "lora", "--days", "10")
    assert result.returncode == 2 and result.stdout == ""
    assert "unknown entry password" in result.stderr and SECRET not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_readme_recipe_uses_the_absolute_path():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "15 3 * * *  /home/me/.venv/bin/rentopt refresh --quiet" in readme
    assert "rentopt providers" in readme and "rentopt config show" in readme
    assert os.path.isabs("/home/me/.venv/bin/rentopt")
