"""The README and --help stay true: every command has help with an example and is in README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_every_command_has_help_with_an_example_and_is_in_the_readme(name):
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output, f"`rentopt {name} --help` shows no example"
    assert f"rentopt {name}" in README, f"README.md does not show `rentopt {name}`"


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```sh\n(.+?)\n```", setup, flags=re.S)
    assert len(commands) == 2
    install, tests = commands
    assert "pip install ." in install and "rentopt quote" in install
    assert "'.[test]'" in tests and tests.rstrip().endswith("pytest")
    ci = (Path(__file__).resolve().parent.parent / ".ci" / "run").read_text(encoding="utf-8")
    assert tests.split("&& ", 2)[-1].strip() in ci  # the same install + test command


def _all_flags() -> list[tuple[str, str]]:
    return sorted({(name, opt) for name, cmd in cli.commands.items() for p in cmd.params
                   for opt in (*p.opts, *p.secondary_opts) if opt.startswith("--") and opt != "--help"})


@pytest.mark.parametrize("command, flag", _all_flags())
def test_every_flag_of_every_command_is_in_the_readme(command, flag):
    assert flag in README, f"README.md does not mention `rentopt {command} {flag}`"
