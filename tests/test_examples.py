"""Every example in README.md and in every `--help` runs, each on a fresh RENTOPT_HOME (issue 26).

An example is a `rentopt ...` line in one of README's ```sh blocks, a `$ rentopt ...` line in
its ```text blocks, or a line under "Examples:" / "Start here:" in a command's --help. What
follows it on the line (a `# comment`, a description after two spaces, a pipe to jq, a
redirection) is the reader's, not rentopt's, and is cut off. Providers answer from their
recorded fixtures (respx), so `rentopt refresh` runs offline as it would online; the files an
example names (my-prices.csv, ./config.json, team-prices.json.gz) are made first in the
example's working folder. An example passes when it exits 0 (or, where it says so, with the
documented exit status) with no usage error and no internal error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import httpx
import pytest
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from tools.fixture_routes import FIXTURES, PLACEHOLDER_CREDENTIAL, builtin_providers, install_respx

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _command(line: str) -> list[str]:
    """The rentopt command of an example line: from `rentopt` to the first comment, description
    (two spaces), pipe or redirection. `a; b` lines give the first command (and `b` separately)."""
    text = line[line.index("rentopt"):]
    for stop in ("  ", " #", " |", " >", ";"):
        at = _outside_quotes(text, stop)
        if at is not None:
            text = text[:at]
    return shlex.split(text)[1:]


def _outside_quotes(text: str, needle: str) -> int | None:
    quote = None
    for i, ch in enumerate(text):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote == ch else ch
        elif quote is None and text.startswith(needle, i):
            return i
    return None


def readme_examples() -> list[str]:
    lines = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            if lang == "sh":
                # a crontab line (minute hour ...) runs what follows its schedule
                line = re.sub(r"^(\S+\s+){5}(?=\S*rentopt\b)", "", line.strip())
                parts = [p.strip() for p in line.split(";")] if not line.startswith("#") else []
                lines += [p for p in parts if re.match(r"^(\S*/)?rentopt\s", p)]
            elif lang == "text" and line.startswith("$ ") and "rentopt " in line:
                lines.append(line[2:].split("rentopt", 1)[0] and line[line.index("rentopt"):] or line[2:])
    return lines


def _help_text(path: list[str]) -> str:
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def help_examples() -> list[str]:
    lines: list[str] = []
    paths: list[list[str]] = [[]]
    for name, command in cli.commands.items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(command, "commands", {})]
    for path in paths:
        text = _help_text(path)
        for block in re.findall(r"(?:Examples?|Start here):\n((?:  .*\n?)+)", text):
            for line in block.splitlines():
                stripped = re.sub(r"^(\S+\s+){5}(?=rentopt\b)", "", line.strip())
                if stripped.startswith("rentopt "):
                    lines += [p.strip() for p in stripped.split(";") if p.strip().startswith("rentopt ")]
    return lines


def all_examples() -> list[str]:
    return list(dict.fromkeys(readme_examples() + help_examples()))


# Examples whose documented outcome is not 0 on a fresh machine: none. (An entry here would name
# the example and the exit status README gives for it.)
EXPECTED_STATUS: dict[str, int] = {}

CONFIG_JSON = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
               "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
               "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072,
               "tie_word_embeddings": True}
MY_PRICES = ("provider,offer_id,gpu,gpus,price_hour,currency,interconnect\n"
             "mycloud,a100x1,A100-SXM4-80GB,1,1.49,USD,nvlink\n"
             "mycloud,h100x8,H100,8,19.90,USD,nvlink\n")


@pytest.fixture
def example_folder(tmp_path, monkeypatch):
    """The working folder of an example, with the files examples name."""
    folder = tmp_path / "work"
    (folder / "my-model").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG_JSON), encoding="utf-8")
    (folder / "my-model" / "config.json").write_text(json.dumps(CONFIG_JSON), encoding="utf-8")
    (folder / "my-prices.csv").write_text(MY_PRICES, encoding="utf-8")
    monkeypatch.chdir(folder)
    return folder


def _install_recorded(router: respx.Router, snapshot: bytes | None) -> None:
    for cls in builtin_providers():
        if (FIXTURES / cls.name / "routes.json").exists():
            install_respx(router, cls)
    if snapshot is not None:
        router.get(url__regex=r"https://ci\.example\.com/.*").mock(
            return_value=httpx.Response(200, content=snapshot, headers={"Content-Type": "application/gzip"}))


def _with_keys(patch: pytest.MonkeyPatch) -> None:
    for cls in builtin_providers():
        for env in {cls.key_env, *getattr(cls, "credential_envs", ())} - {None}:
            patch.setenv(env, PLACEHOLDER_CREDENTIAL)


@pytest.fixture(scope="module")
def team_snapshot(tmp_path_factory) -> Path:
    """A team's snapshot file, as the nightly machine with the keys writes it: one refresh over
    the recorded providers, then `rentopt snapshot export` (made once for all examples)."""
    folder = tmp_path_factory.mktemp("team")
    with pytest.MonkeyPatch.context() as patch, respx.mock(assert_all_called=False) as router:
        patch.setenv("RENTOPT_HOME", str(folder / "home"))
        patch.setenv("RENTOPT_PLUGINS", "builtin")
        _with_keys(patch)
        _install_recorded(router, None)
        runner = CliRunner()
        refreshed = runner.invoke(cli, ["refresh", "--quiet"])
        assert refreshed.exit_code == 0, refreshed.output
        exported = runner.invoke(cli, ["snapshot", "export", str(folder / "team-prices.json.gz")])
        assert exported.exit_code == 0, exported.output
    return folder / "team-prices.json.gz"


@pytest.fixture
def recorded_providers(monkeypatch, example_folder, team_snapshot):
    """Every builtin provider answers from its recorded fixtures; a team's snapshot URL and file
    hold the team's export."""
    _with_keys(monkeypatch)
    (example_folder / "team-prices.json.gz").write_bytes(team_snapshot.read_bytes())
    with respx.mock(assert_all_called=False) as router:
        _install_recorded(router, team_snapshot.read_bytes())
        yield router


# What an example needs done first on the fresh home, as README describes it: exporting the
# store needs one (the nightly machine refreshes, then exports).
def _precondition(args: list[str]) -> list[str] | None:
    if args[:2] == ["snapshot", "export"]:
        return ["refresh", "--from", "team-prices.json.gz", "--quiet"]
    return None


def test_the_examples_are_found():
    examples = all_examples()
    assert len(examples) > 40
    assert "rentopt quote --model 13b --mode lora --days 10" in examples
    assert any(e.startswith("rentopt refresh --from https://") for e in examples)
    assert any("--gpu H100:8" in e for e in examples)


@pytest.mark.parametrize("example", all_examples())
def test_every_readme_and_help_example_runs_on_a_fresh_home(example, recorded_providers, rentopt_home):
    assert not rentopt_home.exists() or not any(rentopt_home.iterdir())  # a fresh home
    args = _command(example)
    if (first := _precondition(args)) is not None:
        done = CliRunner().invoke(cli, first)
        assert done.exit_code == 0, done.output
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == EXPECTED_STATUS.get(example, 0), f"{example}\n{result.output}"
    assert "internal error" not in result.output and "Usage:" not in result.output
    assert "rentopt: error" not in result.output


def test_cut_off_what_is_not_rentopts():
    assert _command('rentopt report --format json | jq ".jobs[0]"') == ["report", "--format", "json"]
    assert _command("rentopt gpus H100                 what a bare H100 means") == ["gpus", "H100"]
    assert _command('rentopt report --workload "llama-3.1-8b qlora 3d" -o team.html  # mail it') == \
        ["report", "--workload", "llama-3.1-8b qlora 3d", "-o", "team.html"]
    assert _command("15 3 * * *  /usr/local/bin/rentopt refresh --quiet".split("  ", 1)[1]) == ["refresh", "--quiet"]
    assert os.sep in str(ROOT)
