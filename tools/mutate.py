"""Break one rule at a time and see whether a test notices: a small mutation check.

    python tools/mutate.py                   # every mutation (5-10 min on two shared cores)
    python tools/mutate.py --module billing  # one module's mutations
    python tools/mutate.py --name fabric     # mutations whose name contains "fabric"
    python tools/mutate.py --check           # only check that every snippet is still found
    python tools/mutate.py --list            # the mutations, one a line

Each mutation (`MUTATIONS`) is a one-line break of a rule that decides money or feasibility:
a source snippet that must occur exactly once in its file and what replaces it. The snippet,
not a line number, locates it, so a mutation survives edits elsewhere in the file; when the
snippet is gone (the code was rewritten) the report says so and names the mutation, and the
list is updated by hand. Each mutation runs the tests that cover its module (`TESTS`) on a
copy of the working tree (tracked and untracked files, what `git ls-files` lists), never on
the checkout itself, with `pytest -x`: the first failing test kills it.

A mutation that survives is either a rule no test guards (write the test) or equivalent: a
change no input can observe. Equivalent ones are listed with the reason (`equivalent=`) and
counted apart. The exit status is 0 when every mutation was killed or is equivalent, 1 when one
survived or its snippet is missing, 2 for a usage error.

Not part of the test suite (it runs the suite's modules dozens of times); run it before closing
a change to a rule. tests/test_mutate.py checks the tool itself on a scratch file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The tests that cover each module: what a mutation of that module runs (pytest node ids or files).
TESTS: dict[str, tuple[str, ...]] = {
    "feasibility": ("tests/test_rules_feasibility.py", "tests/test_rules_planner.py", "tests/test_feasibility.py",
                    "tests/test_capabilities.py", "tests/test_measured_peak.py",
                    "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.feasibility]",
                    "tests/test_parallel_layouts.py", "tests/test_quote.py"),
    "planner": ("tests/test_rules_planner.py", "tests/test_first_pass_oracle.py", "tests/test_quote.py",
                "tests/test_runnable_plans.py",
                "tests/test_parallel_layouts.py",
                "tests/test_measured_peak.py", "tests/test_solver_property.py", "tests/test_report_per_provider.py",
                "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.planner]"),
    "job": ("tests/test_rules_planner.py", "tests/test_first_pass_oracle.py", "tests/test_quote.py",
            "tests/test_runnable_plans.py", "tests/test_measured_peak.py",
            "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.job]"),
    "solver": ("tests/test_rules_solver.py", "tests/test_solver.py", "tests/test_solver_property.py",
               "tests/test_prune_segments.py", "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.solver]"),
    "billing": ("tests/test_rules_billing.py", "tests/test_billing.py", "tests/test_solver.py",
                "tests/test_solver_property.py", "tests/test_quote.py",
                "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.billing]"),
    "timing": ("tests/test_rules_timing.py", "tests/test_timing.py", "tests/test_parallel_layouts.py",
               "tests/test_timing_calibration.py",
               "tests/test_timing_cli.py", "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.timing]"),
    "memory": ("tests/test_rules_memory.py", "tests/test_memory.py", "tests/test_parallel_layouts.py",
               "tests/test_memory_calibration.py",
               "tests/test_memory_litgpt_tables.py", "tests/test_memory_published_fsdp.py",
               "tests/test_measured_peak.py", "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.memory]"),
    "first_pass": ("tests/test_first_pass_oracle.py", "tests/test_rules_planner.py", "tests/test_billing.py",
                   "tests/test_solver_property.py", "tests/test_heads_per_key.py",
                   "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.first_pass]"),
    "stage_hours": ("tests/test_first_pass_oracle.py", "tests/test_rules_planner.py", "tests/test_billing.py",
                    "tests/test_quote.py",
                    "tests/test_doctests.py::test_docstring_examples[rentopt.optimizer.stage_hours]"),
    "skypilot": ("tests/providers/test_skypilot_rules.py", "tests/providers/test_skypilot.py",
                 "tests/test_doctests.py::test_docstring_examples[rentopt.providers.skypilot]"),
}
FILES = {"feasibility": "optimizer/feasibility.py", "planner": "optimizer/planner.py", "solver": "optimizer/solver.py",
         "billing": "optimizer/billing.py", "timing": "optimizer/timing.py", "memory": "optimizer/memory.py",
         "skypilot": "providers/skypilot.py", "first_pass": "optimizer/first_pass.py",
         "stage_hours": "optimizer/stage_hours.py", "job": "optimizer/job.py"}


@dataclass(frozen=True)
class Mutation:
    """One rule broken: `find` (exactly once in the module's file) becomes `replace`."""

    module: str
    name: str  # the rule as broken, in words
    find: str
    replace: str
    equivalent: str = ""  # why no input can tell the difference, when none can

    @property
    def path(self) -> str:
        return FILES[self.module]


M = Mutation
MUTATIONS: tuple[Mutation, ...] = (
    # --- feasibility.py: the seeds' rules -------------------------------------------------------
    M("feasibility", "plain Ethernet accepted for multi-node training",
      'FABRICS_FOR_TRAINING = ("infiniband", "roce")', 'FABRICS_FOR_TRAINING = ("infiniband", "roce", "ethernet")'),
    M("feasibility", "an InfiniBand fabric of unstated speed taken as >= 200 Gb/s",
      "if (shape.fabric_gbps or 0) < MIN_FABRIC_GBPS:", "if (shape.fabric_gbps or MIN_FABRIC_GBPS) < MIN_FABRIC_GBPS:"),
    M("feasibility", "a fabric just under 200 Gb/s accepted",
      "if (shape.fabric_gbps or 0) < MIN_FABRIC_GBPS:", "if (shape.fabric_gbps or 0) < MIN_FABRIC_GBPS - 1:"),
    M("feasibility", "a multi-node shape not checked for its fabric at all",
      "    if shape.nodes <= 1:\n        return None\n    if shape.fabric not in",
      "    if shape.nodes <= 2:\n        return None\n    if shape.fabric not in"),
    M("feasibility", "an unstated interconnect treated as NVLink",
      'return self.interconnect == "nvlink"', 'return self.interconnect != "pcie"'),
    M("feasibility", "every SXM/OAM board assumed to have NVLink",
      'return "nvlink" if gpu.form_factor in ("SXM", "OAM") and gpu.has_nvlink else "pcie"',
      'return "nvlink" if gpu.form_factor in ("SXM", "OAM") else "pcie"'),
    M("feasibility", "tensor parallel allowed over PCIe",
      "if rung.tp > 1 and not shape.nvlink:", "if rung.tp > 1 and False:"),
    M("feasibility", "FlashAttention-2 assumed on pre-Ampere cards",
      "elif gpu.flash_attention >= 2:", "elif gpu.flash_attention >= 0:"),
    M("feasibility", "fp8 falling back to bf16 on a card without bf16",
      'precision = "bf16-mixed" if gpu.bf16 else "fp16-mixed"', 'precision = "bf16-mixed"'),
    M("feasibility", "bf16 kept on a card without bf16",
      "if precision in _NEEDS_BF16 and not gpu.bf16:", "if precision in _NEEDS_BF16 and False:"),
    M("feasibility", "tensor-parallel sizes that do not divide the attention heads",
      "and per_node % t == 0 and model.heads % t == 0]", "and per_node % t == 0]"),
    M("feasibility", "a two-GCD card (MI250X) giving each process the whole card's memory",
      "catalog /= gpu.devices_per_card", "catalog /= 1"),
    M("feasibility", "an offer's own larger memory ignored (modded cards)",
      "if offer_memory_gb and offer_memory_gb > gpu.memory_gb * 1.1:", "if False:"),
    M("feasibility", "host RAM for the offloaded state not checked",
      "if host_needed and host_needed > _host_ram(shape) * HOST_RAM_USABLE:", "if False:"),
    M("feasibility", "a stack the user did not allow planned anyway",
      "if gpu.stack not in capabilities.allowed_stacks:", "if False:"),
    M("feasibility", "bitsandbytes assumed where it is unsupported",
      'if gpu.bitsandbytes == "unsupported":', "if False:"),
    M("feasibility", "a layout's setup rebuilt with eager attention where it runs a fused kernel other than FlashAttention",
      'return attention != "eager"', 'return attention.startswith("flash")'),
    M("feasibility", "the job compared with the card's memory without the margin",
      "required = mem.required_gb_per_gpu", "required = mem.device_gb_per_gpu"),

    # --- planner.py ------------------------------------------------------------------------------
    M("planner", "an N-node layout offered on offers with fewer nodes available",
      "at = rows[t.nodes_available[rows] >= nodes]", "at = rows"),
    M("stage_hours", "export timed at the download speed",
      'return holder.net_down_mbps if transfer == "import" else holder.net_up_mbps',
      "return holder.net_down_mbps"),
    M("stage_hours", "import timed at the upload speed",
      'return holder.net_down_mbps if transfer == "import" else holder.net_up_mbps',
      "return holder.net_up_mbps"),
    M("stage_hours", "spot restarts after a preemption not counted",
      "lost = every / 2 + RESTART_HOURS", "lost = every / 2"),
    M("stage_hours", "spot work lost since the last checkpoint not counted",
      "lost = every / 2 + RESTART_HOURS", "lost = RESTART_HOURS"),
    M("stage_hours", "hyperscaler spot priced at the marketplace's preemption rate",
      "cls = PROVIDER_CLASS.get(provider, \"marketplace\")", "cls = \"marketplace\""),
    M("stage_hours", "a training stage's hours without its import",
      "return import_h + work_h * factor + export_h", "return work_h * factor + export_h"),
    M("stage_hours", "a validation's hours without its import",
      "return validate_h + import_h", "return validate_h"),
    M("first_pass", "--rent-days narrowing comparing total cost with cost-per-token bounds",
      "        if self.per_token:  # ranked by cost per token (prune_arrays divides likewise)\n"
      "            lb_t = lb_t / tr.tokens",
      "        if False:  # ranked by cost per token (prune_arrays divides likewise)\n"
      "            lb_t = lb_t / tr.tokens"),
    # the first pass's own hours: the same functions as the exact pass's, so a break is at a call
    M("first_pass", "first pass: import time left out of the rough hours",
      "    hours = training_hours(imports, run, factor, exports)", "    hours = training_hours(0.0, run, factor, exports)"),
    M("first_pass", "first pass: spot lost work ignored",
      "    factor = 1.0 if spot_factor is None else np.where(kind == 1, spot_factor[row], 1.0)", "    factor = 1.0"),
    M("planner", "first pass: export timed at the download speed",
      'export_h = transfer_hours_per_row(float(prep.export_gb), t, "export")',
      'export_h = transfer_hours_per_row(float(prep.export_gb), t, "import")'),
    M("planner", "first pass: a validation's copy-out timed at the download speed",
      'out_h = transfer_hours_per_row(float(prep.destroy_gb), t, "export")',
      'out_h = transfer_hours_per_row(float(prep.destroy_gb), t, "import")'),
    M("first_pass", "first pass: the pessimistic wall clock taken at the typical speed",
      "    wall = training_hours(imports, slow, factor, exports)", "    wall = training_hours(imports, run, factor, exports)"),
    M("first_pass", "every key's heads at once: a validation counted under its first key only",
      "    flat = keys[by_cost].ravel()", "    flat = keys[by_cost][:, :1].ravel()"),
    M("first_pass", "every key's heads at once: each key's dearest members taken",
      '    by_cost = np.argsort(cost, kind="stable")', '    by_cost = np.argsort(-cost, kind="stable")'),
    M("first_pass", "first pass: a validation's destroy wall without its copy-out",
      "return ValidateColumns(row, piece, pieces, starts, hours, out_h, hours + out_h)",
      "return ValidateColumns(row, piece, pieces, starts, hours, out_h, hours)"),
    M("planner", "a host's maximum rental not enforced",
      "too_long = tr.hours > t.max_hours[tr.row]", "too_long = tr.hours > np.inf"),
    M("job", "kept checkpoints left off the disk",
      "disk_gb=files + req.data_gb + keep * ckpt,", "disk_gb=files + req.data_gb,"),
    M("job", "a full fine-tune exporting only adapters",
      'final = files if setup.mode == "full" else rounded_gb(train_mem.trainable_params_b * 4)',
      "final = rounded_gb(train_mem.trainable_params_b * 4)"),
    M("job", "the --days reference finish without its validation hours",
      "slow = Decimal(str(tokens / speed.low / 3600)) + (req.validate_hours or 0) + req.idle_days * 24 + 1",
      "slow = Decimal(str(tokens / speed.low / 3600)) + req.idle_days * 24 + 1"),
    M("job", "--days work measured at the pessimistic speed",
      "tokens = speed.typical * float(hours) * 3600", "tokens = speed.low * float(hours) * 3600"),
    M("first_pass", "a pair's destroy path allowed past the deadline in the first pass",
      "np.inf if deadline is None else deadline + DEADLINE_EPS)", "np.inf)",
      equivalent="the pair's rough bounds then also cover the destroy option: its lower bound can only fall and "
                 "its upper bound only rise, so the first pass keeps a superset of what it kept, and the exact pass "
                 "(which checks the deadline itself) chooses the same plans; only speed can differ"),
    M("planner", "a training run validated on another GPU of its architecture when its own model holds the job",
      "return model if model in present else arch", "return arch"),
    M("planner", "a training run validated only on its own GPU model when no offer of it holds the job",
      "return model if model in present else arch", "return model"),
    M("planner", "first pass: a training run validated on another GPU of its architecture when its own model holds "
      "the job", "return np.where(model >= 0, model, arch)", "return np.where(arch >= 0, arch, model)"),
    M("planner", "first pass: a training run validated only on its own GPU model when no offer of it holds the job",
      "return np.where(model >= 0, model, arch)", "return model"),
    M("planner", "first pass: per-provider validations not split by provider (a key at one provider served by all)",
      "        if self.per_provider:\n            codes = self.provider_code[rows]",
      "        if False:\n            codes = self.provider_code[rows]"),
    M("planner", "per-provider plans validated at any provider (the keys without the provider)",
      "return (model, arch) if provider is None else ((provider, *model), (provider, *arch))", "return (model, arch)"),
    M("planner", "per-provider plans told apart by provider and GPU (a provider's best can be pruned away)",
      'group = (c.offer.provider, "") if self.per_provider else (c.offer.provider, c.gpu.id)',
      "group = (c.offer.provider, c.gpu.id)"),

    # --- solver.py -------------------------------------------------------------------------------
    M("solver", "enumeration keeping the first plan of each group instead of its best",
      "if t.group not in best or top.key < best[t.group].key:", "if t.group not in best:"),
    M("solver", "a plan with unknown charges tying with a fully priced one",
      "return (self.score, self.unknown, self.unrounded, self.choice.train)",
      "return (self.score, False, self.unrounded, self.choice.train)"),
    M("solver", "CP-SAT: a plan with unknown charges tying with a fully priced one",
      "model.minimize(2 * total + u)", "model.minimize(2 * total)"),
    M("solver", "a same-instance pair choosing destroy when copying out misses the deadline",
      "    if not _fits(inst, _destroy_wall(v) + inst.idle_hours + t.wall):\n        return keep",
      "    if False:\n        return keep"),
    M("solver", "a validation pruned as dominated by one faster, cheaper validation that may sit on the "
                "training instance",
      "survives = va.lo[order] <= second_before", "survives = va.lo[order] <= best_before"),
    M("solver", "the deadline checked without the idle gap",
      "else deadline - idle_hours - walls)", "else deadline - walls)"),
    M("solver", "a group's bound taken from its worst plan",
      "np.minimum.at(group_ub, tr.group, plan_hi)", "np.maximum.at(group_ub, tr.group, plan_hi)"),
    M("solver", "the K-th best group's bound taken as the best's",
      "threshold = finite[top_k - 1] if len(finite) >= top_k else _INF_F",
      "threshold = finite[0] if len(finite) >= top_k else _INF_F"),
    M("solver", "the budget ignored when enumerating",
      "options = [o for o in options if budget is None or _total(o, alone) <= budget]", "options = options"),
    M("solver", "a destroy plan allowed past the deadline when enumerating",
      "elif destroy_ok:", "elif True:"),
    M("solver", "ranking a fixed rental by total cost instead of cost per token",
      'return total / t.tokens if inst.rank_by == "per_token" else total  # type: ignore[operator]',
      "return total  # type: ignore[operator]"),

    # --- timing.py (public behaviour only; snippets kept short for the lead's rewrite) -------------
    M("timing", "the pipeline bubble ignored",
      "bubble = pipeline_bubble(pp, layout.virtual_stages, accum)", "bubble = 1.0"),
    M("timing", "NVLink's bidirectional figure used as one-way bandwidth",
      "nominal = (layout.link_gbps or gpu.scaleup_link_gbps or 600.0) / 2",
      "nominal = (layout.link_gbps or gpu.scaleup_link_gbps or 600.0)"),
    M("timing", "the node fabric's Gb/s read as GB/s",
      "fabric = (layout.fabric_gbps or MIN_FABRIC_GBPS) / 8 * LINK_EFFICIENCY[\"fabric\"]",
      "fabric = (layout.fabric_gbps or MIN_FABRIC_GBPS) * LINK_EFFICIENCY[\"fabric\"]"),
    M("timing", "gradient checkpointing's recomputed forward not priced",
      "mm_passes = 1.0 + bwd + r", "mm_passes = 1.0 + bwd"),
    M("timing", "LoRA priced with full fine-tuning's weight gradients",
      'return {"full": 2.0, "lora": 1.0, "qlora": 1.0}.get(mode, 0.0)',
      'return {"full": 2.0, "lora": 2.0, "qlora": 2.0}.get(mode, 0.0)'),
    M("timing", "tensor-parallel all-reduces left out",
      "t_tp = L / pp * per_layer * _collective_seconds(act, 2.0, tp, tp, 1, layout, gpu, ls)", "t_tp = 0.0"),

    # --- memory.py (public behaviour only) ----------------------------------------------------
    M("memory", "QLoRA quantising embeddings and lm_head too",
      "other = (P - model.block_linear_params) * 2", "other = (P - model.block_linear_params) * bits / 8"),
    M("memory", "FSDP full fine-tuning keeping a persistent 16-bit copy beside the fp32 shard",
      "            resident = 0.0\n", "            pass\n"),
    M("memory", "LoRA + ZeRO-2 not sharding adapter gradients",
      "elif setup.zero >= 2 or setup.fsdp:", "elif setup.zero >= 3 or setup.fsdp:"),
    M("memory", "ZeRO-1 not sharding the optimizer state",
      "if setup.zero >= 1 or setup.fsdp:\n        state /= dp", "if setup.zero >= 2 or setup.fsdp:\n        state /= dp"),
    M("memory", "mixed precision without the fp32 master copy",
      "return _Precision(weight=2, grad=2, master=4, moment=4, act=2)",
      "return _Precision(weight=2, grad=2, master=0, moment=4, act=2)"),
    M("memory", "the safety margin applied to nothing",
      "required = states + max(device - states, margined)", "required = device"),

    # --- billing.py ------------------------------------------------------------------------------
    M("billing", "compute, disk and transfer converted at the latest exchange rate, not the price's day's",
      "return fx.convert(amount, price_currency, currency, on=priced_on)",
      "return fx.convert(amount, price_currency, currency)"),
    M("billing", "a prepaid month lasting 720 h whatever the provider's month",
      "hours = offer.month_hours\n", "hours = 720\n"),
    M("billing", "several hourly options: the dearest kept",
      "hourly = price if hourly is None else min(hourly, price)", "hourly = price if hourly is None else max(hourly, price)"),
    M("billing", "metered time billed without its minimum charge",
      "return max(minimum_s, -(-used_s // granularity_s) * granularity_s)", "return -(-used_s // granularity_s) * granularity_s"),
    M("billing", "disk billed without the free allowance",
      "billable = max(Decimal(0), gb_per_node - terms.free_disk_gb) * nodes",
      "billable = gb_per_node * nodes"),
    M("billing", "an unknown disk price billed as free",
      'return Line(what, "GB-month", gb_months, None, None, note=note + ": price unknown")',
      'return Line(what, "GB-month", gb_months, Decimal(0), Decimal(0), note=note)'),
    M("billing", "a stopped instance's disk billed at the running rate",
      "stopped_storage_gb_month=_optional(offer, fx, currency, offer.stopped_storage_price),",
      "stopped_storage_gb_month=_optional(offer, fx, currency, offer.storage_gb_month),"),
    M("billing", "AutoDL-style retention ignored (a stopped instance kept past it)",
      "if idle_hours > 0 and terms.stopped_max_hours is not None and idle_hours > terms.stopped_max_hours:",
      "if False:"),
    M("billing", "a lease outlasting the host's maximum rental",
      "if terms.max_hours is not None and span > terms.max_hours:", "if False:"),
    M("billing", "extra nodes of a multi-node run not importing",
      'transfer_line(terms, t.import_gb * others, "ingress", f"nodes 2-{t.nodes} import") if others else None))',
      "None))"),
    M("billing", "stop versus destroy decided on totals that hide unknown prices",
      "return a.total <= b.total and set(a.unknown_kinds) <= set(b.unknown_kinds)", "return a.total <= b.total"),
    M("billing", "a stopped instance that bills in full charged only its disk over the gap",
      'return terms.stopped_bills == "everything"', "return False"),
    M("billing", "rough bounds not padded for line rounding",
      "return Decimal(1).scaleb(unit) * lines  # type: ignore[arg-type]", "return Decimal(0)"),

    # --- providers/skypilot.py: the catalog parser ------------------------------------------------
    M("skypilot", "an empty on-demand price read as 0 instead of unknown",
      'return to_decimal(text) if text and text.strip() else None', 'return to_decimal(text) if text and text.strip() else Decimal(0)'),
    M("skypilot", "Vast's total memory over a row's GPUs taken per GPU",
      "memory_gib /= r.count", "memory_gib /= 1"),
    M("skypilot", "a fractional GPU row planned as a whole GPU",
      "if r.count != int(r.count):", "if False:"),
    M("skypilot", "a GCP GPU priced without its host VM",
      "price = r.price + host.price if r.price is not None and host.price is not None else None",
      "price = r.price"),
    M("skypilot", "the cheapest GCP host not chosen",
      "return min(candidates, key=lambda h: (h.price, h.instance), default=None)",
      "return max(candidates, key=lambda h: (h.price, h.instance), default=None)"),
    M("skypilot", "Azure's V1,V2 generation lines dropped instead of joined back",
      "elif len(row) > width and joins_last:", "elif False:"),
    M("skypilot", "a row cut short (too few fields) read with its missing fields empty",
      "        elif row:\n            bad += 1", "        elif row:\n            rows.append(row + [\"\"] * (width - len(row)))"),
    M("skypilot", "per-GiB cloud prices taken as per-GB",
      "return (Decimal(per_gib) / _GIB_PER_GB).quantize(Decimal(\"0.000001\"))",
      "return Decimal(per_gib).quantize(Decimal(\"0.000001\"))"),
    M("skypilot", "Lambda's 8x A100 taken as PCIe",
      'form = "sxm4" if m["n"] == "8" else "pcie"', 'form = "pcie"'),
)


class SnippetError(Exception):
    """A mutation's snippet is not in its file exactly once."""


def apply(source: str, mutation: Mutation) -> str:
    """`source` with the mutation's snippet replaced; SnippetError naming the mutation when the
    snippet is missing or occurs more than once (edit MUTATIONS in tools/mutate.py)."""
    count = source.count(mutation.find)
    if count != 1:
        where = "is no longer in" if count == 0 else f"occurs {count} times in"
        raise SnippetError(f"[{mutation.module}] {mutation.name!r}: its snippet {where} {mutation.path} "
                           f"(the code moved or changed: update this mutation in tools/mutate.py):\n    "
                           + mutation.find.replace("\n", "\n    "))
    return source.replace(mutation.find, mutation.replace)


def copy_tree(target: Path) -> None:
    """The working tree's files (tracked and untracked, not ignored) into `target`, laid out so
    that `import rentopt.optimizer` finds the copy first (the editable install maps it to the
    checkout otherwise)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = ROOT / name
        if not src.is_file():  # deleted in the working tree
            continue
        dst = target / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    for part in ("optimizer", "providers"):
        (target / "rentopt" / part).symlink_to(target / part, target_is_directory=True)


@dataclass
class Result:
    mutation: Mutation
    outcome: str  # killed | survived | equivalent | missing | timeout | error
    seconds: float
    detail: str = ""


def run_one(mutation: Mutation, tree: Path, timeout: float, tests: tuple[str, ...] | None = None) -> Result:
    path = tree / mutation.path
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(apply(original, mutation), encoding="utf-8")
    except SnippetError as exc:
        return Result(mutation, "missing", 0.0, str(exc))
    start = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header",
               *(tests or TESTS[mutation.module])]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(mutation, "timeout", time.monotonic() - start, f"no result in {timeout:.0f} s")
    finally:
        path.write_text(original, encoding="utf-8")
    seconds = time.monotonic() - start
    if done.returncode == 1:  # a test failed: the break was noticed
        failed = next((ln.split(" ")[1] for ln in done.stdout.splitlines() if ln.startswith("FAILED ")), "")
        return Result(mutation, "killed", seconds, failed or _first_error(done.stdout))
    if done.returncode == 0:
        return Result(mutation, "equivalent" if mutation.equivalent else "survived", seconds, mutation.equivalent)
    return Result(mutation, "error", seconds, f"pytest exit {done.returncode}: {_first_error(done.stdout + done.stderr)}")


def _first_error(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "Error" in ln or ln.startswith("E ")), lines[-1] if lines else "")


def baseline(tree: Path, modules: list[str], timeout: float) -> str | None:
    """None when the unmutated tests pass on the copy; else what failed (a broken baseline makes
    every mutation look killed)."""
    tests = sorted({t for m in modules for t in TESTS[m]})
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests], cwd=tree,
                          env=env, capture_output=True, text=True, timeout=timeout * 3)
    return None if done.returncode == 0 else done.stdout[-3000:] + done.stderr[-2000:]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--module", action="append", choices=sorted(TESTS), help="only this module's mutations (repeatable)")
    ap.add_argument("--name", help="only mutations whose name contains this text")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--check", action="store_true", help="only check that every snippet is found exactly once")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per mutation (default 900)")
    ap.add_argument("--json", type=Path, help="also write the results to this file")
    ap.add_argument("--tests", nargs="+", help="run these tests instead of each module's (to see which test guards a rule)")
    args = ap.parse_args(argv)
    chosen = [m for m in MUTATIONS if (not args.module or m.module in args.module)
              and (not args.name or args.name.lower() in m.name.lower())]
    if not chosen:
        print("mutate: no mutation matches", file=sys.stderr)
        return 2
    if args.list:
        for m in chosen:
            print(f"{m.module:12} {m.name}" + (f"  [equivalent: {m.equivalent}]" if m.equivalent else ""))
        return 0
    if args.check:
        problems = []
        for m in chosen:
            try:
                apply((ROOT / m.path).read_text(encoding="utf-8"), m)
            except SnippetError as exc:
                problems.append(str(exc))
        print("\n".join(problems) if problems else f"all {len(chosen)} snippets found exactly once")
        return 1 if problems else 0
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="rentopt-mutate-") as scratch:
        tree = Path(scratch)
        copy_tree(tree)
        broken = None if args.tests else baseline(tree, sorted({m.module for m in chosen}), args.timeout)
        if broken is not None:
            print("mutate: the tests fail before any mutation; fix them first:\n" + broken, file=sys.stderr)
            return 2
        for i, m in enumerate(chosen, 1):
            r = run_one(m, tree, args.timeout, tuple(args.tests) if args.tests else None)
            results.append(r)
            print(f"[{i:3}/{len(chosen)}] {r.outcome:10} {r.seconds:6.1f}s  {m.module:12} {m.name}"
                  + (f"\n{'':22}{'by ' if r.outcome == 'killed' else ''}{r.detail}" if r.detail else ""), flush=True)
    counts = {k: sum(r.outcome == k for r in results) for k in ("killed", "survived", "equivalent", "missing",
                                                                   "timeout", "error")}
    ran = len(results) - counts["missing"]
    survivors = counts["survived"] + counts["equivalent"]
    print(f"\n{len(results)} mutations: {counts['killed']} killed, {counts['survived']} survived, "
          f"{counts['equivalent']} equivalent (survive by design), {counts['missing']} snippets missing, "
          f"{counts['timeout']} timed out, {counts['error']} errors; "
          f"survivors {survivors}/{ran} = {100 * survivors / max(ran, 1):.1f} %")
    for r in results:
        if r.outcome in ("survived", "equivalent", "missing", "error", "timeout"):
            print(f"  {r.outcome}: [{r.mutation.module}] {r.mutation.name}" + (f" -- {r.detail}" if r.detail else ""))
    if args.json:
        args.json.write_text(json.dumps([{"module": r.mutation.module, "name": r.mutation.name, "outcome": r.outcome,
                                          "seconds": round(r.seconds, 1), "detail": r.detail} for r in results],
                                        indent=1), encoding="utf-8")
    bad = counts["survived"] + counts["missing"] + counts["error"] + counts["timeout"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
