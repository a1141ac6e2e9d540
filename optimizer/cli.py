"""The `rentopt` command line. Thin: parse flags, call one library function, render.

Domain errors become one line on stderr and an exit code (2 bad input, 3 no feasible plan,
1 anything else); they never surface as a traceback. Heavy modules (the solver, HTTP) are
imported inside the commands that need them, so `rentopt estimate` starts fast.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from optimizer import __version__
from optimizer.errors import RentoptError


class RentoptGroup(click.Group):
    """Turns domain and validation errors into one clear line and the documented exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RentoptError as exc:
            fail(str(exc), exc.exit_code)
        except _validation_error() as exc:  # pydantic
            fail(describe_validation_error(exc), 2)


def _validation_error() -> type[Exception]:
    from pydantic import ValidationError

    return ValidationError


def describe_validation_error(exc: Any) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "__root__")
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        parts.append(f"{where}: {msg}" if where else msg)
    return "invalid input: " + "; ".join(parts)


def fail(message: str, code: int) -> None:
    click.echo(f"rentopt: error: {message}", err=True)
    sys.exit(code)


@click.group(cls=RentoptGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rentopt")
def cli() -> None:
    """rentopt: the cheapest way to rent GPUs for a training job, and exactly what it will be billed.

    \b
    Start here:
      rentopt quote --model 13b --mode lora --days 10      whole-job plans, priced line by line
      rentopt estimate --model 7b --mode full --gpus 8 --zero 3   memory per GPU and what fits
      rentopt refresh                                      pull current prices (run it nightly)
      rentopt offers --gpu H100-SXM-80GB                   the offers behind the quotes
      rentopt report -o report.html                        a provider comparison for your team

    Prices come from the local store (RENTOPT_HOME) or, until the first refresh, from a dated
    snapshot bundled with rentopt; every output says which and how old.
    """


@cli.command("models")
@click.argument("model", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table for people; json (with aliases and notes) for scripts.")
def models_command(model: str | None, fmt: str) -> None:
    """List the model presets that --model accepts, or show what one MODEL resolves to.

    \b
    Examples:
      rentopt models                          every preset: shape, parameter count, source
      rentopt models --format json            the same as JSON, with each preset's aliases
      rentopt models 13b                      which shape a bare size stands for
      rentopt models Qwen/Qwen2.5-7B-Instruct an alias or Hugging Face repo id
      rentopt models ./my-model/config.json   the shape read from a config.json

    MODEL (and --model elsewhere) is a preset id or alias, case-insensitive; a size such as
    7b, 6.7b or 350m, mapped to the nearest standard decoder shape (the output says which); or
    a path to a Hugging Face config.json. Params are totals; MoE models also show the
    parameters active per token.
    """
    import json

    from tabulate import tabulate

    from optimizer.workload import describe, format_params, list_presets, resolve_model

    specs = [resolve_model(model)] if model else list_presets()
    rows = [describe(spec) for spec in specs]
    if fmt == "json":
        click.echo(json.dumps(rows[0] if model else rows, indent=2))
        return
    table = [
        [r["id"], r["family"], format_params(r["params"]),
         "" if r["active_params"] is None else format_params(r["active_params"]),
         r["layers"], r["hidden"], f"{r['heads']}/{r['kv_heads']}", r["vocab"], r["source"]]
        for r in rows
    ]
    headers = ["id", "family", "params", "active", "layers", "hidden", "heads/kv", "vocab", "source"]
    click.echo(tabulate(table, headers=headers, disable_numparse=True))
    for note in rows[0]["notes"] if model else ():
        click.echo(f"note: {note}")


def main() -> None:
    try:
        cli(prog_name="rentopt")
    except KeyboardInterrupt:
        click.echo("rentopt: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug: say so in one line; the traceback only on request
        if os.environ.get("RENTOPT_DEBUG"):
            raise
        click.echo(f"rentopt: internal error: {type(exc).__name__}: {exc} (set RENTOPT_DEBUG=1 for a traceback)", err=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
