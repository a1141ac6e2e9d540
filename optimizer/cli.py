"""The `rentopt` command line. Thin: parse flags, call one library function, render.

Domain errors become one line on stderr and an exit code (2 bad input, 3 no feasible plan,
4 rentopt's own files cannot be used, 1 anything else); they never surface as a traceback.
Heavy modules (the solver, HTTP) are imported inside the commands that need them, so
`rentopt estimate` starts fast.

Every number a user types is bounded here, at the boundary: finite, positive where it must be,
and at most a stated maximum far beyond any real job (ten years of training, a petabyte of
data), so the planner's exact integer arithmetic never meets an absurd value.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from rentopt import __version__
from rentopt.optimizer.errors import RentoptError


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


@contextmanager
def loading_modules() -> Iterator[None]:
    """Around a command's imports: the cyclic garbage collector paused, and what the imports
    built frozen after (gc.freeze: left out of every later collection).

    Modules, their classes, functions and pydantic schemas live until the process ends, so a
    collection finds nothing among them; yet each full collection during the command rescans
    them all (numpy's, pydantic's and rentopt's tracked objects). Paused and frozen, they are
    scanned no more (benchmarks/bench_quote.py measures it); the collector still runs for the
    command's own work.

    Frozen only when `main()` runs the command (the process is one command: the console
    script, `python -m`): a test or a program that invokes `cli` in a longer-lived process
    keeps its collector as it was, so garbage it has not collected yet is never frozen for good.

    Frozen while the collector is still paused: gc.freeze also zeroes the young generation's
    count, which the imports ran up to 24-29k objects; enabled first, the collector's next
    allocation scanned all of them (4-5 ms per command's imports, finding 16-139 garbage
    objects, which now stay until the process ends).
    """
    import gc

    from rentopt.optimizer.gc_pause import gc_paused

    with gc_paused():
        yield
        if _one_command_process:
            gc.freeze()


_one_command_process = False  # set by main()


def fail(message: str, code: int) -> None:
    from rentopt.optimizer.text import one_line  # a name in the message may hold a terminal escape

    click.echo(f"rentopt: error: {one_line(' '.join(message.split()))}", err=True)
    sys.exit(code)


# The sane maxima of the numbers a user types. Far beyond any real job, so they never bind one;
# they keep the planner's exact integer money (CP-SAT's int64 micro-units) far from overflow.
MAX_DAYS = 3650  # ten years; the longest term any provider sells is 3 years (AWS, Azure reservations)
MAX_HOURS = 8760  # a year, for --validate-hours and --checkpoint-every
# 1e15 tokens: 60 x Llama 3's 15.6T pre-training tokens (Meta, "The Llama 3 Herd of Models", 2024).
MAX_TOKENS = 1e15
MAX_DATA_GB = 1_000_000  # a petabyte
# 1e9 in the quote currency: the solver counts money in 3.6e9 units per currency unit
# (billing.SCALE: per-second micro-units), and CP-SAT's int64 ends at 9.2e18.
MAX_BUDGET = 1_000_000_000
# Per GPU: the largest GPU memory sold is 288 GB (AMD MI355X); a measured peak above 10x that is a typo.
MAX_GPU_MEMORY_GB = 4096.0


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange also lets nan and inf through (every comparison with nan is False)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class Verbosity:
    """The group's -q/-v, for commands that print progress (refresh)."""

    def __init__(self, quiet: bool = False, verbose: int = 0):
        self.quiet, self.verbose = quiet, verbose


@click.group(cls=RentoptGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="rentopt")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr: no progress or log lines.")
@click.option("-v", "--verbose", count=True,
              help="Log lines on stderr (retries, skipped rows): -v INFO, -vv DEBUG. Default: RENTOPT_LOG, else none.")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: int) -> None:
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

    -q and -v go before the command (rentopt -v refresh). Log lines are redacted (no key, token
    or secret ever appears) and carry a timestamp when stderr is not a terminal (cron, CI).
    """
    with loading_modules():
        from rentopt.optimizer.settings import SettingsError, apply_config, settings

    ctx.obj = Verbosity(quiet, verbose)
    # A command's help never depends on the environment (click shows it after this callback and
    # does not pass the command's own arguments here: they are read from the command line).
    if any(arg in ("--help", "-h") for arg in sys.argv[1:]):
        configure_logging(None, quiet=quiet, verbose=verbose)
        return
    hugepages = os.environ.get(HUGEPAGE_SETTING, "0")
    try:
        int(hugepages)  # as numpy reads it: a bad value would fail numpy's import mid-command
    except ValueError:
        raise SettingsError(f"{HUGEPAGE_SETTING}={hugepages!r}: NumPy reads it as a whole number "
                            "(0: huge pages off, 1: on)") from None
    apply_config()  # the config file's keys, providers and currency, where the environment sets none
    current = settings()  # a bad RENTOPT_* value stops here: one line, exit 2
    configure_logging(current.log_level, quiet=quiet, verbose=verbose)


def workload_options(f: Any) -> Any:
    """The workload flags shared by `estimate` and `quote`."""
    options = [
        click.option("--model", "-m", "model_name", required=True, metavar="MODEL",
                     help="Preset (13b, llama-3.1-8b, qwen2.5-7b), size (6.7b, 350m) or path to a config.json."),
        click.option("--mode", required=True, type=click.Choice(["full", "lora", "qlora", "inference"], case_sensitive=False),
                     help="full fine-tune, LoRA (16-bit base), QLoRA (4-bit base), or inference."),
        click.option("--seq-len", type=click.IntRange(min=1), default=2048, show_default=True, help="Tokens per sequence."),
        click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True, help="Sequences per GPU per step."),
        click.option("--gpus", type=click.IntRange(min=1), default=None, help="estimate: GPUs in total (default 1). quote: only offers with exactly this many GPUs per node "
                          "(default: any; the quote chooses the node count)."),
        click.option("--zero", type=click.IntRange(0, 3), default=None, help="DeepSpeed ZeRO stage (quote: pins the layout)."),
        click.option("--fsdp", is_flag=True, default=False, help="Shard with PyTorch FSDP instead of ZeRO."),
        click.option("--fsdp-frozen-unsharded", is_flag=True, default=False,
                     help="FSDP that keeps a frozen LoRA base unsharded through backward (PyTorch before the "
                          "frozen-parameter reshard, pytorch/pytorch#95805; LitGPT's 2023 tables). Default: "
                          "modern FSDP (FSDP2, torchtune, Accelerate) reshards it."),
        click.option("--offload", type=click.Choice(["none", "optimizer", "all"], case_sensitive=False), default=None,
                     help="Move optimizer state (and parameters) to CPU RAM; with --fsdp use all (FSDP CPUOffload)."),
        click.option("--grad-checkpointing", "grad_checkpointing", type=click.Choice(["full", "selective"],
                     case_sensitive=False), is_flag=False, flag_value="full", default=None, metavar="[full|selective]",
                     help="Recompute activations in backward. full (the flag alone): keep only layer inputs, rerun "
                          "each layer's forward (~1/3 more compute). selective: keep about half, rerun the cheap "
                          "part (torchtitan's default, Megatron --recompute-granularity selective). Not given: on "
                          "only where memory needs it (estimate's headline figures assume full)."),
        click.option("--no-grad-checkpointing", "no_grad_checkpointing", is_flag=True, default=False,
                     help="Never recompute activations."),
        click.option("--activation-offload", is_flag=True, default=False,
                     help="Stream saved activations to host RAM and back (torchtune/torchtitan activation "
                          "offloading): less GPU memory, PCIe traffic hidden behind compute where it can be."),
        click.option("--compile", "compile_", is_flag=True, default=False,
                     help="torch.compile: fused elementwise kernels and fewer launches (faster memory-bound work)."),
        click.option("--flash-attention/--no-flash-attention", default=True, show_default=True,
                     help="FlashAttention/SDPA: no seq^2 attention scores."),
        click.option("--lora-rank", type=click.IntRange(min=1), default=16, show_default=True),
        click.option("--lora-targets", default="all-linear", show_default=True,
                     help="Comma list of q,k,v,o,gate,up,down,lm_head, or all-linear."),
        click.option("--precision", type=click.Choice(["bf16", "bf16-mixed", "bf16-true", "fp16", "fp16-mixed", "fp32", "fp8"], case_sensitive=False),
                     default=None,
                     help="bf16 = bf16-mixed (fp32 master + states); bf16-true keeps everything in bf16. Not given: "
                          "bf16, and cards without BF16 run fp16 with loss scaling (said so); given, it is pinned "
                          "and cards that lack it are ruled out."),
        click.option("--allow-stack", metavar="STACKS", default=None,
                     help="Also plan non-CUDA cards: rocm (AMD MI300X), gaudi (Intel Gaudi 2), ascend (Huawei 910B), "
                          "comma-separated, e.g. --allow-stack rocm,gaudi."),
        click.option("--rope-scaling", type=FiniteFloatRange(min=1, min_open=True), metavar="FACTOR", default=None,
                     help="RoPE scaling factor you configure (YaRN, linear): lets --seq-len go past the model's "
                          "trained context, e.g. --rope-scaling 4 for Qwen2.5 at 128K."),
        click.option("--optimizer", type=click.Choice(["adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "none"], case_sensitive=False),
                     default="adamw", show_default=True),
        click.option("--optimizer-in-backward", is_flag=True, help="Step each parameter during backward (no gradient buffer)."),
        click.option("--grad-accumulation/--no-grad-accumulation", default=True, show_default=True,
                     help="Gradient accumulation keeps earlier micro-steps' gradients alive through forward; "
                          "off: one optimizer step per micro-batch (less memory for a full fine-tune)."),
        click.option("--tensor-parallel", type=click.IntRange(min=1), default=None, help="Tensor-parallel size (NVLink only in quotes)."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=True, show_default=True,
                     help="With --tensor-parallel: split the norm/dropout activations over the TP group too "
                          "(Megatron-LM, torchtitan; same traffic as plain TP)."),
        click.option("--pipeline-parallel", type=click.IntRange(min=1), default=None,
                     help="Pipeline stages (1F1B schedule; the bubble costs (stages-1)/micro-batches per step)."),
        click.option("--virtual-stages", type=click.IntRange(min=1), default=1, show_default=True,
                     help="Layer chunks per GPU for the interleaved 1F1B schedule (Megatron "
                          "--num-layers-per-virtual-pipeline-stage): a smaller bubble, more traffic."),
        click.option("--context-parallel", type=click.IntRange(min=1), default=None,
                     help="Split each sequence over this many GPUs (ring attention), for 32k+ token sequences."),
        click.option("--global-batch", type=click.IntRange(min=1), default=None,
                     help="Sequences per optimizer step over all GPUs (default: 128 x 2048 tokens; 1M tokens "
                          "with pipeline parallel). Sets the pipeline bubble and the per-step work."),
        click.option("--quant", type=click.Choice(["none", "nf4", "int8", "int4"], case_sensitive=False), default="none", show_default=True,
                     help="Weight quantisation for --mode inference."),
        click.option("--double-quant/--no-double-quant", default=True, show_default=True, help="NF4 double quantisation (QLoRA)."),
        click.option("--chunked-loss", is_flag=True,
                     help="Chunked cross-entropy (torchtune CEWithChunkedOutputLoss): no whole-batch fp32 logits."),
        click.option("--fused-loss", is_flag=True,
                     help="Fused linear cross-entropy (Liger, unsloth, cut cross-entropy): the logits exist one "
                          "chunk at a time."),
        click.option("--margin", type=FiniteFloatRange(0, 1), default=0.15, show_default=True,
                     help="Headroom on the uncertain part of the allocated estimate (activations, loss, "
                          "gathered weights) for spikes it does not model (0.15 = 15 %); the allocator slack "
                          "already in the nvidia-smi view counts toward it."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


WORKLOAD_KEYS = ("model_name", "mode", "seq_len", "micro_batch", "gpus", "zero", "fsdp", "fsdp_frozen_unsharded",
                 "offload", "grad_checkpointing", "flash_attention", "lora_rank", "lora_targets", "precision",
                 "allow_stack", "rope_scaling", "optimizer", "optimizer_in_backward", "grad_accumulation",
                 "tensor_parallel", "quant",
                 "double_quant", "chunked_loss", "fused_loss", "margin", "no_grad_checkpointing", "activation_offload", "compile_",
                 "sequence_parallel", "pipeline_parallel", "virtual_stages", "context_parallel", "global_batch")


def _workload(kw: dict[str, Any]) -> tuple[Any, Any]:
    """(ModelSpec, TrainingSetup) from the shared workload flags. A --seq-len past the model's
    trained context is a warning on stderr (and a model note) with RoPE scaling, an error without."""
    from rentopt.optimizer.models import TrainingSetup
    from rentopt.optimizer.workload import check_context, resolve_model

    model = resolve_model(kw["model_name"])
    if kw.get("rope_scaling"):
        model = model.model_copy(update={"rope_scaling": kw["rope_scaling"]})
    warnings = check_context(model, kw["seq_len"])
    for warning in warnings:
        click.echo(f"rentopt: warning: {warning}", err=True)
    if warnings:
        model = model.model_copy(update={"notes": (*model.notes, *(f"warning: {w}" for w in warnings))})
    checkpointing = kw["grad_checkpointing"]
    if checkpointing is not None and kw["no_grad_checkpointing"]:
        raise click.UsageError("--grad-checkpointing and --no-grad-checkpointing contradict each other")
    setup = TrainingSetup(
        mode=kw["mode"], seq_len=kw["seq_len"], micro_batch=kw["micro_batch"], gpus=kw["gpus"] or 1,
        zero=kw["zero"] or 0, fsdp=kw["fsdp"], fsdp_frozen_unsharded=kw["fsdp_frozen_unsharded"],
        offload=kw["offload"] or "none",
        grad_checkpointing=False if kw["no_grad_checkpointing"] else (None if checkpointing is None else True),
        recompute=(checkpointing or "full").lower(), activation_offload=kw["activation_offload"],
        compile=kw["compile_"], sequence_parallel=kw["sequence_parallel"],
        pipeline_parallel=kw["pipeline_parallel"] or 1, context_parallel=kw["context_parallel"] or 1,
        virtual_stages=kw["virtual_stages"],
        tokens_per_step=kw["global_batch"] * kw["seq_len"] if kw["global_batch"] else None,
        flash_attention=kw["flash_attention"],
        lora_rank=kw["lora_rank"], lora_targets=kw["lora_targets"], precision=kw["precision"] or "bf16",
        optimizer="none" if kw["mode"] == "inference" else kw["optimizer"],
        optimizer_in_backward=kw["optimizer_in_backward"], grad_accumulation=kw["grad_accumulation"],
        tensor_parallel=kw["tensor_parallel"] or 1,
        quant=kw["quant"], double_quant=kw["double_quant"], chunked_loss=kw["chunked_loss"],
        fused_loss=kw["fused_loss"], margin=kw["margin"],
    )
    return model, setup


def _pins(kw: dict[str, Any]) -> Any:
    """The layout choices the user fixed (feasibility.Pins) from the workload flags."""
    from rentopt.optimizer.feasibility import Pins

    return Pins(zero=kw["zero"], fsdp=kw["fsdp"] or None, tensor_parallel=kw["tensor_parallel"],
                pipeline_parallel=kw["pipeline_parallel"], context_parallel=kw["context_parallel"],
                offload=kw["offload"], capabilities=_capabilities(kw))


def _capabilities(kw: dict[str, Any]) -> Any:
    """The capability policy from the workload flags: --precision given pins it; --allow-stack."""
    from rentopt.optimizer.feasibility import Capabilities

    return Capabilities(precision_pinned=kw["precision"] is not None,
                        allowed_stacks=Capabilities.parse_stacks(kw["allow_stack"]))


@cli.command("estimate")
@workload_options
@click.option("--gpu", "gpu_name", metavar="GPU",
              help="Also estimate speed on this GPU (catalog id or alias, e.g. RTX-4090-24GB, 'A100 80GB'), "
                   "on --gpus of them in total.")
@click.option("--nodes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Spread --gpus over this many nodes (needs --fabric-gbps when more than 1).")
@click.option("--fabric-gbps", type=FiniteFloatRange(min=0, min_open=True, max=1e6), metavar="GBPS",
              help="InfiniBand/RoCE bandwidth per node in Gb/s for --nodes > 1 (e.g. 400, 1600, 3200).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table", show_default=True)
def estimate_command(fmt: str, gpu_name: str | None, nodes: int, fabric_gbps: float | None, **kw: Any) -> None:
    """Memory per GPU for a training (or inference) job, which GPUs can hold it, and (with --gpu)
    how fast it runs there.

    \b
    Examples:
      rentopt estimate --model 13b --mode lora
      rentopt estimate --model 7b --mode full --gpus 8 --zero 3 --format json
      rentopt estimate --model llama-3.1-70b --mode qlora --seq-len 4096
      rentopt estimate --model ./config.json --mode inference --quant nf4 --seq-len 32768
      rentopt estimate --model 7b --mode qlora --gpu RTX-4090-24GB --gpus 2 --micro-batch 4
      rentopt estimate --model 70b --mode full --gpu H100-SXM-80GB --gpus 32 --nodes 4 --fabric-gbps 3200

    The breakdown is the usual training-memory accounting (weights, gradients, optimizer state,
    activations, overhead; Hugging Face, huggingface.co/docs/transformers/model_memory_anatomy).
    Three totals, because published numbers measure different things: allocated (PyTorch's
    max_memory_allocated), reserved (caching allocator) and device (nvidia-smi); "required"
    adds the safety margin on the uncertain part (never on the exact weights, gradients and
    optimizer state) and is what rentopt compares with a card's memory. GB = 1e9 bytes.

    With --gpu, rentopt picks the cheapest layout that holds the job on that node shape (SXM/OAM
    parts NVLinked, other cards on PCIe) and reports tokens per second for all GPUs together
    (low, typical, high), MFU and scaling efficiency, from a speed model fitted to published runs
    (MosaicML llm-foundry, torchtune, Qwen, Answer.AI fsdp_qlora, LitGPT).
    """
    from rentopt.optimizer.feasibility import classes_that_fit
    from rentopt.optimizer.hardware import all_gpus, resolve_user_gpu
    from rentopt.optimizer.memory import estimate
    from rentopt.optimizer.render import estimate_json, estimate_table
    from rentopt.optimizer.timing import layout_speed

    model, setup = _workload(kw)
    est = estimate(model, setup)
    speed = None
    if gpu_name is not None:
        pins = _pins(kw)
        speed = layout_speed(model, setup, resolve_user_gpu(gpu_name), kw["gpus"] or 1, nodes, fabric_gbps, pins)
    elif nodes > 1 or fabric_gbps is not None:
        fail("--nodes and --fabric-gbps describe the node shape of --gpu: pass --gpu too", 2)
    gpus = all_gpus()
    fits = classes_that_fit(model, setup, gpus, capabilities=_capabilities(kw))
    classes = {g.id: g.gpu_class for g in gpus}
    layout_memory = None
    if speed is not None and speed.layout is not None:
        from rentopt.optimizer.feasibility import layout_setup

        layout_memory = estimate(model, layout_setup(setup, speed.layout))  # its offloaded state: host RAM
    if fmt == "json":
        click.echo(estimate_json(est, fits, classes, speed, model=model, setup=setup, layout_memory=layout_memory))
    else:
        click.echo(estimate_table(model, setup, est, fits, classes, speed, layout_memory))


def _tokens_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """--tokens 2e9, 2B, 500M, 1.5T."""
    if value is None:
        return None
    text = value.strip().upper().replace("_", "").replace(",", "")
    mult = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(text[-1:], 1.0)
    try:
        n = float(text[:-1] if mult != 1.0 else text) * mult
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a token count (e.g. 2e9, 500M, 2B)") from None
    if n <= 0:
        raise click.BadParameter("must be a positive number of tokens")
    if not math.isfinite(n) or n < 1 or n > MAX_TOKENS:
        raise click.BadParameter(f"must be from 1 to {MAX_TOKENS:.0e} tokens")
    return n


def _decimal_option(*, allow_zero: bool, maximum: float) -> Any:
    """A click callback parsing a Decimal flag: positive (or non-negative when `allow_zero`),
    finite and at most `maximum`."""
    def parse(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
        from decimal import Decimal, InvalidOperation

        if value is None:
            return None
        try:
            amount = Decimal(value.strip())
        except (InvalidOperation, ValueError):
            raise click.BadParameter(f"{value!r} is not a number") from None
        if not amount.is_finite() or amount < 0 or (amount == 0 and not allow_zero):
            raise click.BadParameter("must not be negative" if allow_zero else "must be a positive number")
        if amount > Decimal(repr(maximum)):
            raise click.BadParameter(f"{value} is more than the sane maximum, {maximum:,g}")
        # Beyond micro-units nothing is billed; a 1e-400 would only make the arithmetic inexact.
        if amount and amount < Decimal("0.000001"):
            raise click.BadParameter(f"{value} is too small to mean anything (below 0.000001)")
        return amount

    return parse


_days_option = _decimal_option(allow_zero=False, maximum=MAX_DAYS)
_idle_days_option = _decimal_option(allow_zero=True, maximum=MAX_DAYS)
_hours_option = _decimal_option(allow_zero=False, maximum=MAX_HOURS)
_data_gb_option = _decimal_option(allow_zero=True, maximum=MAX_DATA_GB)
_budget_option = _decimal_option(allow_zero=False, maximum=MAX_BUDGET)
# --max-price of `rentopt offers`, per node-hour: far above 200 per GPU-hour (optimizer/sanity.py)
# x 1024 GPUs (offers_io.OFFER_LIMITS) in JPY.
_positive_decimal_option = _decimal_option(allow_zero=False, maximum=1e9)


@cli.command("quote")
@workload_options
@click.option("--tokens", callback=_tokens_option, metavar="T",
              help="The job's size in training tokens (2e9, 500M, 2B); every plan is priced for them.")
@click.option("--epochs", type=FiniteFloatRange(min=0, min_open=True, max=1e6), metavar="E",
              help="With --dataset-tokens: the job is E passes over the dataset.")
@click.option("--dataset-tokens", callback=_tokens_option, metavar="N", help="Tokens in the dataset (with --epochs).")
@click.option("--days", callback=_days_option, metavar="D",
              help="The job takes D days on the reference layout --on; converted to tokens (the deadline defaults "
                   "to the reference's own finish).")
@click.option("--on", "on_spec", metavar="SPEC",
              help="The reference layout for --days: 8xRTX-4090, A100-SXM-80GB, 2xH100-SXM-80GB. Default: the fewest "
                   "A100-SXM-80GB that hold the job.")
@click.option("--rent-days", callback=_days_option, metavar="D",
              help="A fixed rental period instead: each plan trains D days; ranked by cost per billion tokens.")
@click.option("--gpu", "gpu_names", multiple=True, metavar="GPU[:N]",
              help="Only these GPUs (comma list or repeated; ':8' also fixes the GPUs per node): H100-SXM-80GB,A100:8.")
@click.option("--exclude-gpu", "exclude_gpus", multiple=True, metavar="GPU", help="Never these GPUs (comma list or repeated).")
@click.option("--min-gpu-memory", type=FiniteFloatRange(min=0), metavar="GB", help="Only GPUs with at least GB of memory.")
@click.option("--max-nodes", type=click.IntRange(min=1, max=64), default=8, show_default=True,
              help="At most this many nodes of one offer (multi-node needs InfiniBand/RoCE >= 200 Gb/s).")
@click.option("--providers", "providers", metavar="A,B", help="Only offers from these providers.")
@click.option("--offers-file", type=click.Path(dir_okay=False, path_type=Path),
              help="Plan over this JSON (`rentopt offers --format json`) or hand-written CSV instead of the store.")
@click.option("--currency", default=None, metavar="CODE",
              help="Currency of the quote (offers are converted). Default: RENTOPT_CURRENCY or the config file's, else USD.")
@click.option("--fx", "fx_overrides", multiple=True, metavar="CODE=RATE", help="Exchange rate override, units per USD (--fx CNY=7.1).")
@click.option("--validate-hours", callback=_hours_option, default=None, metavar="H",
              help="Length of the validation run: the same job at micro-batch 1, on a cheap instance of the training "
                   "GPU. Default: sized to the job, 10 % of the training time, at least 0.5 h (100 steps to steady "
                   "memory and speed), at most 4 h; the quote says which.")
@click.option("--no-validate", is_flag=True, help="Skip the validation stage.")
@click.option("--idle-days", callback=_idle_days_option, default="0", show_default=True, metavar="N",
              help="Gap between validation and training (keep the instance stopped, or destroy: priced both ways).")
@click.option("--keep-checkpoints", type=click.IntRange(min=0, max=1000), default=2, show_default=True,
              help="Checkpoints kept on disk (2: the latest and the best).")
@click.option("--data-gb", callback=_data_gb_option, default="10", show_default=True, metavar="GB",
              help="Dataset size on the instance's disk.")
@click.option("--deadline-days", callback=_days_option, metavar="D",
              help="Validation, gap and training done within D days, at the slow end of the speed range.")
@click.option("--budget", callback=_budget_option, metavar="X", help="Total at most X in --currency.")
@click.option("--top", type=click.IntRange(min=1, max=50), default=5, show_default=True,
              help="Plans to show, each on a different provider or GPU.")
@click.option("--spot/--no-spot", default=False, show_default=True,
              help="Also consider interruptible prices, priced with the expected cost of lost work.")
@click.option("--checkpoint-every", callback=_hours_option, default="1", show_default=True, metavar="H",
              help="Hours between checkpoints (what a spot preemption loses).")
@click.option("--measured-peak-gb", type=FiniteFloatRange(min=0, min_open=True, max=MAX_GPU_MEMORY_GB), metavar="G",
              help="Peak GPU memory measured in validation (nvidia-smi): re-plan from it instead of the estimate.")
@click.option("--measured-tokens-per-second", type=FiniteFloatRange(min=0, min_open=True, max=1e9), metavar="R",
              help="Tokens/s measured in validation: calibrates every layout's speed (where: --measured-on).")
@click.option("--measured-on", "measured_on", metavar="SPEC",
              help="The layout the measurements were taken on (default: the --days reference).")
@click.option("--explain", is_flag=True,
              help="List every rejected offer with the number that failed; with no plan, the binding constraint, "
                   "the closest misses and the rejections by reason.")
@click.option("--allow-suspect", is_flag=True,
              help="Also plan with suspect prices (under 1/5 of what the other providers ask for the GPU; "
                   "held out by default, listed by --explain and `rentopt offers --suspect`).")
@click.option("--details", "-v", "details", is_flag=True,
              help="The whole quote: every plan's stages, line items, notes and price sources, and the assumptions "
                   "(default: one screen with the plans and the #1 plan's stages).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "markdown"], case_sensitive=False), default="table",
              show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the quote to FILE instead of stdout (written whole or not at all).")
def quote_command(tokens: float | None, epochs: float | None, dataset_tokens: float | None, days: Any,
                  on_spec: str | None, rent_days: Any, gpu_names: tuple[str, ...], exclude_gpus: tuple[str, ...],
                  min_gpu_memory: float | None, max_nodes: int, providers: str | None, offers_file: Path | None,
                  currency: str, fx_overrides: tuple[str, ...], validate_hours: Any, no_validate: bool, idle_days: Any,
                  keep_checkpoints: int, data_gb: Any, deadline_days: Any, budget: Any, top: int, spot: bool,
                  checkpoint_every: Any, measured_peak_gb: float | None, measured_tokens_per_second: float | None,
                  measured_on: str | None, explain: bool, allow_suspect: bool, details: bool, fmt: str,
                  output: Path | None, **kw: Any) -> None:
    """The cheapest way to run a training job, as whole-job plans priced line by line.

    \b
    Examples:
      rentopt quote --model 13b --mode lora --days 10
      rentopt quote --model 7b --mode full --days 10 --on 8xRTX-4090
      rentopt quote --model 7b --mode full --tokens 2B --deadline-days 7 --currency CNY
      rentopt quote --model 8b --mode qlora --epochs 3 --dataset-tokens 150M --spot --format json
      rentopt quote --model 13b --mode lora --rent-days 14 --gpu RTX-4090-24GB,A100-SXM-80GB
      rentopt quote --model 13b --mode lora --days 10 --idle-days 14 --explain

    Plans are compared for the same work, in tokens: --tokens (or --epochs x --dataset-tokens)
    says it directly; --days D says "D days on the reference layout" (--on; by default the
    fewest A100-SXM-80GB that hold the job) and the speed model converts it. Each plan shows its
    finish time, tokens/s range and cost per billion tokens. --rent-days instead fixes the rental
    period and ranks plans by cost per billion tokens.

    Each plan is a sequence of stages: validate (the same job at micro-batch 1, on a cheap
    instance of the training GPU), idle (keep the instance stopped, or destroy after copying out:
    priced both ways), train, and export (copy weights and checkpoints out before destroying).
    Bills include compute in the cheapest mix of the offer's units (hour/day/week/month/term, one
    rental across stages on the same instance), disk while running and stopped, egress and
    ingress; an unknown price is shown as unknown, never as 0. No feasible plan: exit status 3
    with the binding constraint.
    """
    from decimal import Decimal

    with loading_modules():
        from rentopt.optimizer.catalog import load_fx, load_offers
        from rentopt.optimizer.currency import parse_fx_option
        from rentopt.optimizer.job import GpuFilter, QuoteRequest, gpu_name_notes, parse_gpu_filter, parse_reference
        from rentopt.optimizer.planner import build_quote
        from rentopt.optimizer.render import quote_json, quote_markdown, quote_table

    basis = "--tokens"
    if (epochs is None) != (dataset_tokens is None):
        raise click.UsageError("--epochs and --dataset-tokens go together: the job is epochs x dataset tokens")
    if epochs is not None:
        if tokens is not None:
            raise click.UsageError("give --tokens or --epochs with --dataset-tokens, not both")
        tokens = epochs * dataset_tokens  # type: ignore[operator]
        basis = f"--epochs {epochs:g} x --dataset-tokens {dataset_tokens:g}"
    if sum(x is not None for x in (tokens, days, rent_days)) != 1:
        raise click.UsageError("size the job with exactly one of --tokens (or --epochs with --dataset-tokens), "
                               "--days (work on a reference layout) or --rent-days (a fixed rental period)")
    if on_spec is not None and days is None:
        raise click.UsageError("--on names the layout that --days are measured on; it needs --days")
    model, setup = _workload(kw)
    fx = load_fx(overrides=dict(parse_fx_option(x) for x in fx_overrides))
    pins = _pins(kw)
    gpu_filter = GpuFilter(include=parse_gpu_filter(gpu_names), exclude=tuple(g for g, _ in parse_gpu_filter(exclude_gpus)),
                           min_memory_gb=min_gpu_memory, gpus_per_node=kw["gpus"], max_nodes=max_nodes)
    name_notes = gpu_name_notes([*gpu_names, *exclude_gpus], [on_spec, measured_on])
    request = QuoteRequest(
        model=model, setup=setup, tokens=tokens, days=days, rent_days=rent_days,
        reference=parse_reference(on_spec) if on_spec else None, currency=_currency(currency),
        validate_hours=None if no_validate else (validate_hours or Decimal(4)), idle_days=idle_days,
        validate_sized=validate_hours is None and not no_validate,
        keep_checkpoints=keep_checkpoints, data_gb=data_gb, deadline_days=deadline_days, budget=budget,
        top=top, spot=spot, allow_suspect=allow_suspect, checkpoint_every_hours=checkpoint_every, measured_peak_gb=measured_peak_gb,
        measured_tokens_per_second=measured_tokens_per_second,
        measured_on=parse_reference(measured_on) if measured_on else None, pins=pins, gpu_filter=gpu_filter,
        tokens_basis=basis, assumptions=tuple(name_notes),
    )
    from rentopt.optimizer.errors import NoFeasiblePlan
    from rentopt.optimizer.gc_pause import gc_paused
    from rentopt.optimizer.render import no_plan_json, no_plan_text

    # The collector paused for reading and planning (gc_pause.py): they allocate tens of thousands
    # of objects and next to no cycles (counted in commit f7c11b5), so every collection was a
    # rescan for nothing.
    with gc_paused():
        offers = load_offers(_comma_list(providers), offers_file, lazy=True)
        _warn(offers.warnings)
        try:
            quote = build_quote(request, offers, fx, list_rejected=explain or fmt == "json")
        except NoFeasiblePlan as exc:
            # JSON: the error as a JSON object on stdout (scripts read stdout) and the exit status;
            # --explain: why, on stdout. The one-line error goes to stderr either way.
            if fmt == "json":
                click.echo(no_plan_json(exc))
            elif explain:
                click.echo(no_plan_text(exc))
            raise
    if fmt == "json":
        text = quote_json(quote) + "\n"
    elif fmt == "markdown":
        text = quote_markdown(quote, job=_job_line(model, setup)) + "\n"
    else:
        text = quote_table(quote, explain=explain, details=details, job=_job_line(model, setup)) + "\n"
    if output is None:
        click.echo(text, nl=False)
    else:
        _write_output(output, text, "quote")


def _warn(lines: list[str]) -> None:
    """Warnings every output format gets, on stderr (stored offers a reader left out)."""
    from rentopt.optimizer.text import one_line

    for line in lines:
        click.echo(one_line(f"rentopt: warning: {line}"), err=True)


def _write_output(path: Path, text: str, what: str) -> None:
    """Write a command's answer to -o FILE whole (temp file, fsync, rename), or say why not."""
    from rentopt.optimizer.errors import InputError
    from rentopt.optimizer.paths import write_atomically

    try:
        write_atomically(path, text)
    except OSError as exc:
        raise InputError(f"cannot write the {what} to {path}: {exc.strerror or exc}; choose another -o path") from None
    click.echo(f"wrote {path}", err=True)


def _currency(given: str | None) -> str:
    """--currency, else RENTOPT_CURRENCY (or the config file's currency), else USD."""
    from rentopt.optimizer.settings import settings

    return (given or settings().currency or "USD").strip().upper()


def _job_line(model: Any, setup: Any) -> str:
    return f"Quote for {model.name}, {setup.mode}" + (f" ({'; '.join(model.notes)})" if model.notes else "")


@cli.command("models")
@click.argument("model", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table", show_default=True,
              help="table for people; json (with aliases and notes) for scripts.")
def models_command(model: str | None, fmt: str) -> None:
    """List the model presets that --model accepts, or show what one MODEL resolves to.

    \b
    Examples:
      rentopt models                          every preset: shape, parameter count, source
      rentopt models --format json            the same as JSON, with each preset's aliases
      rentopt models 13b                      which shape a bare size stands for
      rentopt models Qwen/Qwen2.5-7B-Instruct    an alias or Hugging Face repo id
      rentopt models ./my-model/config.json   the shape read from a config.json

    MODEL (and --model elsewhere) is a preset id or alias, case-insensitive; a size such as
    7b, 6.7b or 350m, mapped to the nearest standard decoder shape (the output says which); or
    a path to a Hugging Face config.json. Params are totals; MoE models also show the
    parameters active per token.
    """
    import json

    from tabulate import tabulate

    from rentopt.optimizer.workload import describe, format_params, list_presets, resolve_model

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


@cli.command("gpus")
@click.argument("name", required=False)
@click.option("--class", "gpu_class", type=click.Choice(["datacenter", "workstation", "consumer"], case_sensitive=False),
              help="Only GPUs of this class.")
@click.option("--min-memory", type=FiniteFloatRange(min=0), metavar="GB", help="Only GPUs with at least GB of memory.")
@click.option("--names", is_flag=True, help="List every spelling rentopt reads and the catalog id(s) it maps to.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table", show_default=True,
              help="table for people; json (GpuSpec objects with sources and notes) for scripts.")
def gpus_command(name: str | None, gpu_class: str | None, min_memory: float | None, names: bool, fmt: str) -> None:
    """List the GPU catalog: the ids that --gpu and offers use, with memory, speed, interconnect
    and what a job can run on each card; or show where one spelling NAME maps.

    \b
    Examples:
      rentopt gpus --class datacenter --min-memory 80
      rentopt gpus --format json
      rentopt gpus H100                 what a bare "H100" means (offers, price sheets)
      rentopt gpus --names              every spelling and the id(s) it maps to

    BF16 TFLOPS are dense peaks (no sparsity); cards without BF16 show their FP16 rate. NVLink is
    bidirectional GB/s per GPU, "none" when the card has none. CC is NVIDIA's compute capability;
    FlashAttn the newest FlashAttention generation with kernels for the card (2: Ampere and newer,
    3: Hopper); stack the vendor software a job needs (non-CUDA cards are planned only with
    --allow-stack). Names are read one way everywhere a person writes one (--gpu, --exclude-gpu,
    --on, offers files, price sheets), case-insensitive: a bare name that several cards share
    reads as the usual variant (H100 and H200: SXM, as SkyPilot and gpuhunt read them) and the
    quote says so; a bare A100 (40 or 80 GB) asks you to choose. Provider feeds never guess.
    """
    import json

    from tabulate import tabulate

    from rentopt.optimizer.hardware import normalise, read_gpu_name, select_gpus, spellings

    if name is not None:
        read, feed = read_gpu_name(name), normalise(name)
        if fmt == "json":
            # price_sheet: the one reader's answer (--gpu, --on, offers files and sheets read it so)
            click.echo(json.dumps({"reads_as": read.model_dump(mode="json"),
                                   "price_sheet": read.model_dump(mode="json"),
                                   "provider_feed": feed.model_dump(mode="json")}, indent=2))
            return
        if read.gpu is not None:
            others = [c for c in read.candidates if c != read.gpu]
            click.echo(f"{name!r} reads as {read.gpu} ({read.status})" + (
                f": the card a bare name means in price sheets and catalogs; write {' or '.join(others)} (or give "
                "form_factor or gpu_memory_gb in a sheet) for another" if read.status == "default" else ""))
            click.echo("  the same in --gpu, --exclude-gpu, --on, offers files and price sheets"
                       + ("" if feed.gpu == read.gpu else
                          f"; a provider's feed must say which ({feed.status} there: never guessed)"))
        elif read.candidates:
            click.echo(f"{name!r} is ambiguous: choose {', '.join(read.candidates)} ({read.note})")
        else:
            click.echo(f"{name!r} is unknown: {read.note}; `rentopt gpus --names` lists every spelling")
        return
    if names:
        rows = spellings()
        if fmt == "json":
            click.echo(json.dumps(rows, indent=2))
        else:
            click.echo(tabulate([[r["spelling"], ", ".join(r["ids"]), r["how"]] for r in rows],
                                headers=["spelling", "maps to", "how"], disable_numparse=True))
        return
    selected = select_gpus(gpu_class, min_memory)
    if fmt == "json":
        click.echo(json.dumps([g.model_dump(mode="json") for g in selected], indent=2))
        return
    if not selected:
        click.echo("No GPU in the catalog matches these filters; loosen --class or --min-memory.", err=True)
        return
    table = [
        [g.id, g.gpu_class, f"{g.memory_gb:g}", _tflops_cell(g.bf16_tflops, g.fp16_tflops),
         f"{g.memory_bandwidth_gbps:g}", f"{g.nvlink_gbps:g}" if g.nvlink_gbps else "none",
         g.pcie_gen or "?", g.form_factor, g.compute_capability or "-", "yes" if g.fp8 else "no",
         str(g.flash_attention) if g.flash_attention else "-",
         g.stack if g.host_arch == "x86_64" else f"{g.stack}/{g.host_arch}"]
        for g in selected
    ]
    headers = ["id", "class", "memory GB", "BF16 TFLOPS", "bandwidth GB/s", "NVLink GB/s", "PCIe gen", "form factor",
               "CC", "FP8", "FlashAttn", "stack"]
    click.echo(tabulate(table, headers=headers, disable_numparse=True))


def _tflops_cell(bf16: float | None, fp16: float | None) -> str:
    if bf16:
        return f"{bf16:g}"
    return f"none (FP16 {fp16:g})" if fp16 else "none"


def _comma_list(value: str | None) -> list[str] | None:
    """Provider or plugin names: 'RunPod, vast' -> ['runpod', 'vast'] (their ids are lower case, and
    people write them as the provider's brand does); None or empty -> None (meaning: all)."""
    names = [n.strip().lower() for n in (value or "").split(",") if n.strip()]
    return names or None


@cli.command("refresh")
@click.option("--providers", "names", metavar="A,B",
              help="Only these provider plugins (comma-separated; `rentopt providers` lists them). Default: all.")
@click.option("--from", "source", metavar="FILE|URL",
              help="Import a snapshot file written by `rentopt snapshot export` (a team's nightly catalog) instead.")
@click.option("--quiet", is_flag=True, help="Print nothing but errors (for cron); the same as `rentopt -q refresh`.")
@click.option("--time-budget", type=FiniteFloatRange(min=0, min_open=True, max=86400), metavar="SECONDS",
              help="Seconds each provider (or a --from URL's download) may take in all (every request, retry "
                   "and wait) before it fails like any other fault. Default: RENTOPT_REFRESH_BUDGET, else 300.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table", show_default=True,
              help="json: exit_code, store, and per provider status, counts, error and problems.")
@click.pass_obj
def refresh_command(verbosity: Verbosity | None, names: str | None, source: str | None, quiet: bool,
                    time_budget: float | None, fmt: str) -> None:
    """Fetch current prices from every provider plugin into the local price store.

    \b
    Examples:
      rentopt refresh
      rentopt refresh --providers vast,runpod --time-budget 60
      rentopt refresh --providers skypilot       # SkyPilot's catalog: gcp, azure, lambda, ...
      rentopt refresh --from https://ci.example.com/rentopt-snapshot.json.gz
      rentopt refresh --format json | jq '.providers[] | select(.status != "ok")'
      15 3 * * *  /home/me/.venv/bin/rentopt refresh --quiet   # cron: the path `rentopt providers` prints

    Plugins are fetched at the same time; each provider's prices are stored on their own. One
    that fails (an error, a timeout, a slow or hung server past its time budget) keeps its last
    good prices (marked stale); one without its API key is skipped with the variable to set. The
    skypilot plugin reads RENTOPT_SKYPILOT_CATALOG (a folder or URL of <cloud>/vms.csv files),
    else ~/.sky/catalogs/v8, else SkyPilot's published catalog. When two plugins deliver the same
    provider (vast directly and from SkyPilot's catalog), the newer prices are kept, never a mix.

    A row whose price is outside the sane range is rejected and counted ("refused rows"), never
    stored: per GPU-hour 0.001 to 200 USD (0.006 to 1500 CNY; other currencies at their exchange
    rate), storage up to 5 USD per GB-month, transfer up to 5 USD per GB - an order of magnitude
    beyond the cheapest consumer card and the dearest 8-GPU node on sale. So is a row with a GPU
    id rentopt does not know, a currency it has no rate for, a provider name that is not a plain
    name, a control character in its offer id, or a date more than a day ahead (README: Reliability).
    Each source may download at most its byte limit (RENTOPT_MAX_DOWNLOAD_MB raises it).

    \b
    Exit status (for cron):
      0  every selected provider refreshed
      1  some failed (their last good prices are kept)
      2  bad input: a flag or a RENTOPT_* variable
      3  none succeeded (price sheets, read from local files, do not count)
      4  rentopt's own files cannot be used (RENTOPT_HOME read-only or not a directory, disk
         full, the store damaged or being written by another refresh), or memory ran out
    """
    from dataclasses import replace

    from rentopt.optimizer.errors import FileSystemError, StoreError
    from rentopt.optimizer.refresh import EXIT_LOCAL_FILES, format_report, report_json, run_import, run_refresh
    from rentopt.providers.base import HttpSettings

    verbosity = verbosity or Verbosity()
    quiet = quiet or verbosity.quiet
    settings = HttpSettings.from_env()
    if time_budget is not None:
        settings = replace(settings, budget_s=time_budget)
    show_progress = not quiet and fmt == "table" and (sys.stderr.isatty() or verbosity.verbose > 0)
    progress = (lambda line: click.echo(line, err=True)) if show_progress else None
    if source is not None and names:
        raise click.UsageError("--from imports a whole snapshot file; leave out --providers")
    try:
        if source is not None:
            report = run_import(source, settings=settings)
        else:
            report = run_refresh(_comma_list(names), progress=progress, settings=settings)
    except FileSystemError:
        raise
    except StoreError as exc:  # damaged, foreign, newer or locked: rentopt's own files, for cron
        fail(str(exc), EXIT_LOCAL_FILES)
    from rentopt.optimizer.text import one_line

    if fmt == "json":
        click.echo(report_json(report))
    elif quiet:
        for r in report.results:
            if r.status == "failed" or (r.status == "skipped" and r.requested):
                click.echo(one_line(f"rentopt: {r.label}: {r.status}: {r.error}"), err=True)
    else:
        click.echo(format_report(report))
    sys.exit(report.exit_code)


@cli.command("offers")
@click.option("--gpu", metavar="GPU", help="A catalog id or alias (H100-SXM-80GB, 'RTX 4090'; see `rentopt gpus`).")
@click.option("--min-gpus", type=click.IntRange(min=1), help="At least this many GPUs per node.")
@click.option("--min-gpu-memory", type=FiniteFloatRange(min=0), metavar="GB", help="At least GB of memory per GPU.")
@click.option("--providers", "--provider", "providers", metavar="A,B",
              help="Only these providers (comma-separated), as in quote and report; --provider also works.")
@click.option("--max-price", callback=_positive_decimal_option, metavar="PRICE",
              help="At most PRICE per node-hour, in each offer's own currency (no conversion; see --currency).")
@click.option("--currency", metavar="CODE", help="Only offers priced in this currency (USD, CNY, ...).")
@click.option("--spot/--no-spot", default=None, help="Only interruptible (spot) offers, or only on-demand ones.")
@click.option("--region", help="Region contains this text (case-insensitive), e.g. us-east, EU.")
@click.option("--offers-file", type=click.Path(dir_okay=False, path_type=Path), help="List this JSON/CSV offers file instead of the store.")
@click.option("--sort", type=click.Choice(["price", "gpu", "provider", "memory"], case_sensitive=False), default="price", show_default=True,
              help="price: cheapest first within each currency; memory: most memory per GPU first.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many rows. Default: 50 for a table, all for json/csv.")
@click.option("--suspect", is_flag=True,
              help="Only suspect prices: under 1/5 of the median the other providers ask for the same GPU "
                   "(quotes hold them out unless --allow-suspect), each with its numbers.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"], case_sensitive=False), default="table", show_default=True,
              help="json (Offer objects) and csv read back with --offers-file.")
def offers_command(gpu: str | None, min_gpus: int | None, min_gpu_memory: float | None, providers: str | None,
                   max_price: Any, currency: str | None, spot: bool | None, region: str | None,
                   offers_file: Path | None, sort: str, limit: int | None, suspect: bool, fmt: str) -> None:
    """List the offers behind the quotes, with price, currency and age of every price.

    \b
    Examples:
      rentopt offers --gpu H100-SXM-80GB --min-gpus 8
      rentopt offers --min-gpu-memory 48 --max-price 2 --currency USD --sort price
      rentopt offers --providers vast --format csv > vast.csv

    Prices are per node-hour (all GPUs of the offer): the hourly price, or for an offer sold by
    the day/week/month that price per hour of it. The header says where they come from: the
    price store, or the bundled snapshot and its date until you run `rentopt refresh`.
    """
    from datetime import datetime, timezone

    from rentopt.optimizer.catalog import find_offers
    from rentopt.optimizer.hardware import resolve_user_gpu
    from rentopt.optimizer.offers_io import OFFER_TABLE_HEADERS, offer_table_rows, write_offers_csv, write_offers_json
    from rentopt.optimizer.offers_writer import write_listed_csv, write_listed_json
    from rentopt.optimizer.models import OfferQuery

    names = _comma_list(providers)
    query = OfferQuery(
        providers=tuple(names) if names else None, gpus=(resolve_user_gpu(gpu).id,) if gpu else None,
        min_gpus=min_gpus, min_gpu_memory_gb=min_gpu_memory, spot=spot, region=region,
        currency=currency.strip().upper() if currency else None, max_hour_price=max_price,
    )
    found = find_offers(query, offers_file=offers_file, sort=sort, limit=limit or (50 if fmt == "table" else None),
                        suspect=suspect, objects=fmt == "table")  # json/csv of a file: from its columns
    from rentopt.optimizer.text import one_line  # every line one inert line: names may hold escapes

    if fmt != "table":
        _warn(found.warnings)
        click.echo(one_line(f"# {found.label}: {found.shown()} offers"), err=True)
        for line in found.sources():
            click.echo(one_line(f"# prices: {line}"), err=True)
        if fmt == "json":
            if found.listed is not None:
                write_listed_json(found.listed, sys.stdout)
            else:
                write_offers_json(found.offers, sys.stdout)
        else:
            left_out = write_offers_csv(found.offers, sys.stdout) if found.listed is None else \
                write_listed_csv(found.listed, sys.stdout)
            for left in left_out:
                click.echo(one_line(f"# left out {left.provider}/{left.offer_id}: no price a CSV line can express"),
                           err=True)
        if not found.shown():  # stdout holds only the (empty) list or header: why, beside it
            for line in (found.empty_reason or "No offer matches these filters; loosen them "
                         "(see `rentopt offers --help`).").splitlines():
                click.echo(one_line(f"# {line}"), err=True)
        return
    from tabulate import tabulate

    click.echo(one_line(f"Offers from the {found.label}"))
    for line in found.sources():
        click.echo(one_line(f"prices: {line}"))
    for note in found.notes:
        click.echo(one_line(f"note: {note}"))
    if not found.offers:
        click.echo(one_line(found.empty_reason or "No offer matches these filters; loosen them (see `rentopt offers --help`)."))
        return
    rows = offer_table_rows(found.offers, datetime.now(timezone.utc))
    click.echo(tabulate(rows, headers=OFFER_TABLE_HEADERS, disable_numparse=True))


@cli.command("providers")
@click.option("--format", "fmt", type=click.Choice(["table", "json"], case_sensitive=False), default="table", show_default=True,
              help="json: per provider key status (never the key), offers, last success, stale, last error.")
def providers_command(fmt: str) -> None:
    """Show each provider plugin: API key set (never the key), last refresh, staleness, errors.

    \b
    Examples:
      rentopt providers
      rentopt providers --format json

    Also lists plugins that failed to load. Reads the price store without changing it.
    """
    from rentopt.optimizer.refresh import format_overview, overview_json, provider_overview

    import json

    overview = provider_overview()
    command = rentopt_command_path()
    if fmt == "json":
        data = json.loads(overview_json(overview))
        data["rentopt_command"] = command
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(format_overview(overview))
    click.echo("")
    click.echo(f"rentopt command: {command}")
    click.echo(f"crontab line (crontab -e): 15 3 * * *  {command} refresh --quiet")


def rentopt_command_path() -> str:
    """The absolute path of the `rentopt` being run, for a crontab line: cron's PATH is
    /usr/bin:/bin, where a virtual environment's or pipx's rentopt is not."""
    import shutil

    here = Path(sys.argv[0])
    if here.name == "rentopt" and here.is_file():
        return str(here.resolve().parent / here.name) if not here.is_absolute() else str(here)
    beside = Path(sys.executable).parent / "rentopt"
    if beside.is_file():
        return str(beside)
    found = shutil.which("rentopt")
    return str(Path(found).absolute()) if found else "rentopt"


@cli.group("config")
def config_group() -> None:
    """rentopt's config file: API keys, providers and currency for jobs without your shell's
    environment (cron).

    \b
    Examples:
      rentopt config show
      rentopt config path

    The file is config.toml in the platform's config folder (RENTOPT_CONFIG names another):

    \b
      currency = "EUR"                 # quote's and report's default --currency
      providers = ["vast", "lambda"]   # the providers a plain `rentopt refresh` fetches
      [keys]
      LAMBDA_API_KEY = "..."           # any provider credential variable

    An environment variable of the same name wins over the file. Keep the file private
    (chmod 600): `config show` warns when others can read it, and never prints a key.
    """


@config_group.command("show")
def config_show_command() -> None:
    """Show the settings the config file and the environment give, keys redacted.

    \b
    Examples:
      rentopt config show
    """
    from tabulate import tabulate

    from rentopt.optimizer.settings import config_path, read_config, shown_config
    from rentopt.providers.base import load_providers

    path = config_path()
    config = read_config(path)
    registry, _ = load_providers()
    names = tuple(sorted({env for cls in registry.values()
                          for env in (cls.key_env, *getattr(cls, "credential_envs", ())) if env}))
    click.echo(f"config file: {path} ({'found' if config.found else 'not found: every setting from the environment'})")
    if config.found and config.keys and path.stat().st_mode & 0o077:
        click.echo(f"warning: {path} holds keys and other users can read it; run chmod 600 {path}")
    click.echo(tabulate(shown_config(config, key_names=names), headers=["setting", "value", "from"],
                        disable_numparse=True))


@config_group.command("path")
def config_path_command() -> None:
    """Print the config file's path (whether or not it exists).

    \b
    Examples:
      rentopt config path
    """
    from rentopt.optimizer.settings import config_path

    click.echo(str(config_path()))


class _SnapshotGroup(click.Group):
    """`rentopt snapshot import` is a natural guess; importing is `rentopt refresh --from`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] == "import":
            raise click.UsageError("there is no `snapshot import`: import a snapshot file or URL with "
                                   "`rentopt refresh --from FILE|URL`", ctx)
        return super().resolve_command(ctx, args)


@cli.group("snapshot", cls=_SnapshotGroup)
def snapshot_group() -> None:
    """Share a price catalog: export the store's offers as a snapshot file for other machines.

    \b
    Examples:
      rentopt snapshot export team-prices.json.gz
      rentopt refresh --from team-prices.json.gz        # on another machine, no API keys needed

    The file has the format of the snapshot bundled with rentopt: per provider, its offers with
    their source and date, and its price history.
    """


@snapshot_group.command("export")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
def snapshot_export_command(file: Path) -> None:
    """Write the price store's current offers (every provider, with sources, dates and history) to FILE.

    \b
    Examples:
      rentopt snapshot export prices.json.gz       # gzip-compressed (a .gz name)
      rentopt snapshot export prices.json          # plain JSON

    Read it back anywhere with `rentopt refresh --from FILE` (or an https:// URL where you
    publish it, e.g. from a nightly CI job that holds the API keys).
    """
    from rentopt.optimizer.catalog import encode_snapshot, export_snapshot, snapshot_json
    from rentopt.optimizer.errors import InputError

    snapshot = export_snapshot()
    data = encode_snapshot(snapshot) if file.suffix == ".gz" else snapshot_json(snapshot)
    from rentopt.optimizer.paths import write_atomic

    try:  # atomically: a full disk leaves the previous export at that path as it was
        write_atomic(file, data)
    except OSError as exc:
        raise InputError(f"cannot write {file}: {exc.strerror or exc}; the previous file there (if any) is "
                         "unchanged") from None
    counts = ", ".join(f"{p.provider} {len(p.offers)}" for p in snapshot.providers)
    click.echo(f"wrote {file}: {len(snapshot.offers)} offers ({counts})", err=True)


@cli.command("report")
@click.option("--format", "fmt", type=click.Choice(["markdown", "html", "json"], case_sensitive=False), default=None,
              help="Default: from the -o suffix (.md/.markdown, .html/.htm, .json), else markdown on stdout. "
                   "json: the same sections as data, for scripts.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to FILE instead of stdout.")
@click.option("--since", default="30d", show_default=True, help="History window: 7d, 30d, 12w, 6m (days, weeks, months).")
@click.option("--currency", default=None, metavar="CODE",
              help="Currency of every amount (offers are converted). Default: RENTOPT_CURRENCY or the config file's, else USD.")
@click.option("--fx", "fx_overrides", multiple=True, metavar="CODE=RATE", help="Exchange rate override, units per USD (--fx CNY=7.1).")
@click.option("--workload", "workloads", multiple=True, metavar='"MODEL MODE DAYSd|TOKENS"',
              help='Another job to price at every provider, e.g. "llama-3.1-8b qlora 3d" or "7b full 2B".')
@click.option("--providers", metavar="A,B", help="Only these providers (comma-separated).")
@click.option("--gpu", "gpu_names", multiple=True, metavar="GPU",
              help="Only these GPUs (comma list or repeated), names read as quote's --gpu reads them: "
                   "H100 is the H100-SXM-80GB (said in a note), see `rentopt gpus`.")
@click.option("--min-gpu-memory", type=FiniteFloatRange(min=0), metavar="GB", help="Only GPUs with at least GB of memory.")
def report_command(fmt: str | None, output: Path | None, since: str, currency: str, fx_overrides: tuple[str, ...],
                   workloads: tuple[str, ...], providers: str | None, gpu_names: tuple[str, ...],
                   min_gpu_memory: float | None) -> None:
    """A provider comparison for your team: freshness, prices per GPU-hour, whole-job costs, history.

    \b
    Examples:
      rentopt report -o report.html
      rentopt report --currency CNY --fx CNY=7.1 --since 12w > report.md
      rentopt report --workload "llama-3.1-8b qlora 3d" --providers vast,runpod,lambda -o team.html
      rentopt report --gpu H100 -o h100.html
      rentopt report --min-gpu-memory 48 --format json | jq '.prices[].gpu'
      rentopt report --format json | jq '.jobs[0].providers[0]'

    Whole-job costs cover four reference jobs (7B QLoRA 3 days, 13B LoRA 10 days, 7B full
    fine-tune 10 days, 70B LoRA 14 days) plus each --workload. HTML is one self-contained file
    (inline charts, nothing fetched; a bar chart whose bars span more than 10x is drawn on a log
    scale, and its caption says so; phones get charts drawn for their width). -o must end in .md,
    .markdown, .html, .htm or .json unless --format says which. Amounts are converted at the ECB
    reference rate of each price's day (--fx wins). Reads the price store (or the bundled
    snapshot) and never changes it.

    --gpu and --min-gpu-memory narrow every section to those GPUs; providers with no such offer
    drop out and the header says so. No offer left: exit status 2.
    """
    import gc

    with loading_modules():
        from rentopt.optimizer.catalog import load_fx
        from rentopt.optimizer.currency import check_quote_currency, parse_fx_option
        from rentopt.optimizer.gc_pause import gc_paused
        from rentopt.optimizer.report import (
            ReportRequest,
            build_report,
            format_for,
            parse_since,
            parse_workload,
            read_gpus,
            render,
            write_report,
        )

    gpus, gpu_notes = read_gpus(gpu_names)
    request = ReportRequest(since=parse_since(since), since_text=since.strip(), currency=_currency(currency),
                            workloads=tuple(parse_workload(w) for w in workloads),
                            providers=tuple(_comma_list(providers) or ()) or None,
                            gpus=gpus, min_gpu_memory_gb=min_gpu_memory, gpu_notes=gpu_notes)
    fmt = format_for(output, fmt)  # a bad -o suffix fails before any work
    check_quote_currency(request.currency)
    fx = load_fx(overrides=dict(parse_fx_option(x) for x in fx_overrides))
    # The collector paused while the report is built and rendered, as for a quote's planning
    # (gc_pause.py): it reads a store's offers and history and plans every reference job over
    # them, hundreds of thousands of objects, and the cycles among them (~17k objects over a
    # 100k-offer store) are not worth the rescans (~0.1 s of CPU). Frozen after, as
    # `loading_modules` freezes the imports: the next allocation would otherwise scan
    # everything the report allocated.
    with gc_paused():
        text = render(build_report(request, fx), fmt)
        if _one_command_process:
            gc.freeze()
    if output is None:
        click.echo(text, nl=False)
    else:
        write_report(output, text)
        click.echo(f"wrote {output}", err=True)


LOG_HANDLER_NAME = "rentopt-cli"
# ISO 8601 local time with its offset, as cron mail and CI logs are read.
LOG_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S%z"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (click's test runner swaps it per call)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: str | None, *, quiet: bool = False, verbose: int = 0) -> None:
    """Log lines on stderr at `level` (RENTOPT_LOG), or as -q/-v say; none by default.

    By default warnings (a skipped row, a failed provider) reach the user through the command's
    own summary, not as log lines. Every record passes the redacting filter (no key, token or
    secret, even in the full request URLs httpx logs at INFO); lines carry a timestamp when
    stderr is not a terminal.
    """
    from rentopt.optimizer.redact import RedactingFilter, install_logger_filters

    install_logger_filters()
    if quiet:
        level = "ERROR" if level else None
    elif verbose:
        level = "DEBUG" if verbose > 1 else "INFO"
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.name == LOG_HANDLER_NAME]:
        root.removeHandler(old)
    handler: logging.Handler
    if level is None:
        # A handler that drops everything keeps Python's last-resort handler from printing warnings.
        handler = logging.NullHandler()
    else:
        handler = _StderrHandler()
        tty = sys.stderr.isatty()
        handler.setFormatter(logging.Formatter(
            "%(name)s: %(levelname)s: %(message)s" if tty else "%(asctime)s %(name)s: %(levelname)s: %(message)s",
            datefmt=LOG_TIME_FORMAT,
        ))
        handler.setLevel(level)
        handler.addFilter(RedactingFilter())
        root.setLevel(min(root.level or logging.WARNING, logging.getLevelName(level)))
    handler.name = LOG_HANDLER_NAME
    root.addHandler(handler)


def _debug_requested() -> bool:
    from rentopt.optimizer.settings import SettingsError, settings

    try:
        return settings().debug
    except SettingsError:
        return False


# NumPy asks the kernel for transparent huge pages for each array of 4 MiB or more, unless
# NUMPY_MADVISE_HUGEPAGE=0 (read when numpy is imported: numpy.org/doc/stable/reference/
# global_state.html). A quote touches each of its large arrays once, so huge pages save it
# nothing, and where the kernel compacts memory to fault one in (THP defrag "madvise", the
# default of many distributions) each fault stalls a large quote in the kernel (measured in
# commit b63cbc3). A value the user set wins.
HUGEPAGE_SETTING = "NUMPY_MADVISE_HUGEPAGE"
# pydantic looks for plugins (observers of every validation, e.g. tracing) the first time it builds
# a model: it reads the entry points of every installed distribution, on every command (1.5-2 ms
# with this project's 39, more in a big environment). rentopt uses none, so the command turns
# the search off for itself (docs.pydantic.dev, "Plugins": PYDANTIC_DISABLE_PLUGINS); a value
# the user set wins, so a plugin can still be run with rentopt on purpose.
PYDANTIC_PLUGINS_SETTING = "PYDANTIC_DISABLE_PLUGINS"
# NumPy's OpenBLAS starts a pool of worker threads, one per core, when numpy is imported, and
# they spin while they wait for work: ~0.07 s of CPU time on another core per command on the
# 2-core development machine (`python -c "import numpy"`: 0.15 s CPU, 0.08 s with one thread;
# the wall time is the same). rentopt multiplies no matrices (no BLAS call), so the command
# asks OpenBLAS for one thread, its own (OPENBLAS_NUM_THREADS, read when OpenBLAS is loaded:
# github.com/OpenMathLib/OpenBLAS, "Setting the number of threads"); a value the user set wins.
BLAS_THREADS_SETTING = "OPENBLAS_NUM_THREADS"
# What main() sets for its own process, each before the library that reads it is loaded (this
# module imports neither numpy nor pydantic at its top); a value the user set wins. The import
# floor of the benchmarks (benchmarks/floors.py) loads its libraries under the same settings.
OWN_PROCESS_SETTINGS = {HUGEPAGE_SETTING: "0", PYDANTIC_PLUGINS_SETTING: "__all__", BLAS_THREADS_SETTING: "1"}


def _one_command() -> None:
    """main() runs one command and the process ends: let the garbage collector know.

    At exit CPython runs full collections over every object still alive, looking for cycles
    whose finalizers should run. After a quote that is every tracked object (numpy's, pydantic's,
    rentopt's modules and catalogs, the plan), scanned to free memory the operating system takes
    back at once (benchmarks/bench_quote.py measures the cost).
    gc.freeze() in an atexit handler (it runs after the command, before those collections)
    leaves that memory to the operating system. Nothing rentopt must finish waits for a
    collection: files are written and closed inside `with` blocks (paths.write_atomically),
    store connections are closed by theirs, logging flushes in its own atexit handler
    (registered earlier, so it runs later) and the interpreter flushes stdout and stderr itself.
    It also lets `loading_modules` freeze what a command's imports built.
    """
    import atexit
    import gc

    global _one_command_process
    _one_command_process = True
    atexit.unregister(gc.freeze)  # once, however often main() runs in one process (tests)
    atexit.register(gc.freeze)


def main() -> None:
    for name, value in OWN_PROCESS_SETTINGS.items():
        os.environ.setdefault(name, value)
    _one_command()
    out_of_memory = False
    # Settings are read (and logging configured) by the group, after click has answered
    # --version and --help: a bad RENTOPT_* value must not hide the help that explains it.
    try:
        cli.main(prog_name="rentopt", standalone_mode=False)
    except click.UsageError as exc:
        # Usage errors (a bad flag value, a missing option) as one line, pointing at --help.
        where = exc.ctx.command_path if exc.ctx else "rentopt"
        fail(f"{exc.format_message()} (see `{where} --help`)", 2)
    except click.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        click.echo("rentopt: aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("rentopt: interrupted", err=True)
        sys.exit(130)
    except RentoptError as exc:  # raised outside a command (the group's own checks)
        fail(str(exc), exc.exit_code)
    except RecursionError:  # input nested too deeply for a parser that slipped past its checks
        if _debug_requested():
            raise
        fail("the input is nested too deeply to be read", 2)
    except MemoryError:
        out_of_memory = True
    except SystemError as exc:  # how a failed allocation inside a C extension (numpy) may surface
        if not _from_a_failed_allocation(exc):
            _internal_error(exc)
        out_of_memory = True
    except Exception as exc:  # a bug: say so in one line; the traceback only on request
        _internal_error(exc)
    else:
        return
    if out_of_memory:  # outside the except block: the failed work's frames (and memory) are released
        _say_out_of_memory()


# Written before it is needed: when memory has run out, formatting or importing anything to say
# so can fail again (a bare "MemoryError" traceback, issue 24).
OUT_OF_MEMORY = (b"rentopt: error: out of memory: the input or the price store is larger than this machine's free "
                 b"memory allows; close other programs, narrow the input (--providers, --gpu, a smaller "
                 b"--offers-file), or run it on a machine with more memory\n")
EXIT_OUT_OF_MEMORY = 4  # README's "rentopt's own resources cannot be used"


def _from_a_failed_allocation(exc: BaseException) -> bool:
    """Whether a SystemError comes from memory running out: a MemoryError in its chain, or the
    "error return without exception set" a C extension gives when its allocation failed."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MemoryError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "without exception set" in str(exc)


def _say_out_of_memory() -> None:
    import gc

    gc.collect()
    try:
        sys.stdout.flush()
    except (MemoryError, OSError, ValueError):
        pass
    try:
        os.write(2, OUT_OF_MEMORY)
    except OSError:
        pass
    os._exit(EXIT_OUT_OF_MEMORY)  # no further allocation at interpreter exit to fail again


def _internal_error(exc: BaseException) -> None:
    if _debug_requested():
        raise exc
    click.echo(f"rentopt: internal error: {type(exc).__name__}: {exc} (set RENTOPT_DEBUG=1 for a traceback)", err=True)
    sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    main()
