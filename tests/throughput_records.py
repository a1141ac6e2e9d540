"""Published throughput measurements (tests/data/throughput-measurements.json) as rentopt inputs.

Each record states, in its own words, the model, GPU, parallelism, interconnect, micro-batch,
sequence length, checkpointing and what was measured. The rules below translate those words
into a ModelSpec, a TrainingSetup, a Layout and the run facts a Layout does not carry
(tokens per optimizer step, selective recomputation), with generic keyword rules: no record
is special-cased by id. Used by tests/test_timing_calibration.py and tools/fit_throughput.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rentopt.optimizer.feasibility import PCIE_X16_GBPS
from rentopt.optimizer.hardware import all_gpus, get_gpu
from rentopt.optimizer.models import GpuSpec, Layout, ModelSpec, TrainingSetup
from rentopt.optimizer.timing import Knobs

DATA = Path(__file__).parent / "data" / "throughput-measurements.json"

# Sources kept out of the fit (tools/fit_throughput.py never sees them): they test the model on
# frameworks, GPUs and parallel layouts it was not tuned on (Megatron TP/PP on H100 clusters,
# torchtitan FSDP2 on 64 A100, Answer.AI's cloud table: A5000/RTX 6000 Ada over PCIe, A100/H100).
# Answer.AI's dual-3090 rig is held out too: its link is only described as "slow PCI lanes" on an
# older motherboard, so it cannot set the link or overlap constants.
HELD_OUT_FAMILIES = ("nvidia-megatron-lm", "pytorch-torchtitan")
HELD_OUT_ID_PREFIXES = ("aai-a5000", "aai-6000ada", "aai-a100", "aai-h100", "aai-3090")

# Multi-node records that do not state the fabric: the standard configuration of the system
# (DGX A100: 8 x 200 Gb/s HDR; DGX H100: 8 x 400 Gb/s NDR), per node.
ASSUMED_FABRIC_GBPS = {"Ampere": 1600.0, "Hopper": 3200.0}


DEVICE_RUNS = Path(__file__).parent / "data" / "device"


def load_records() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8")) + device_records()


def device_records() -> list[dict]:
    """The project's own training steps on a lent accelerator (tools/device_calibration.py): small
    randomly initialised Llama-shaped decoders, one GPU, one optimizer step per micro-batch, every
    third case held out."""
    out = []
    for path in sorted(DEVICE_RUNS.glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        gpu = run["device"]
        for i, case in enumerate(c for c in run.get("training", []) if "tokens_per_second" in c):
            full = case["mode"] == "full"
            out.append({
                "id": f"own-{path.stem}-{case['case']}-{case['mode']}-s{case['seq_len']}-b{case['micro_batch']}"
                      f"-{'gc' if case['grad_checkpointing'] else 'nogc'}",
                "kind": "measured", "source_family": "rentopt-own-device",
                "source": f"tests/data/device/{path.name} (tools/device_calibration.py, {run['date']}, "
                          f"torch {run['torch']}, CUDA {run['cuda']})",
                "quote": json.dumps(case, sort_keys=True),
                "model": f"random {case['case']} decoder", "params_b": case["params"] / 1e9,
                "layers": case["layers"], "hidden": case["h"], "heads": case["heads"], "kv_heads": case["kv"],
                "vocab": case["vocab"], "intermediate": case["inter"],
                "mode": case["mode"], "lora_rank": None if full else 16, "lora_targets": None if full else "all-linear",
                "precision": "bf16 (autocast over fp32 weights)" if full else "bf16 base, fp32 adapters",
                "optimizer": "adamw (fused)", "gpu": gpu, "gpu_class": "datacenter", "num_gpus": 1, "num_nodes": 1,
                "interconnect": None, "parallelism": "single", "seq_len": case["seq_len"],
                "micro_batch": case["micro_batch"], "global_batch": case["micro_batch"],
                "global_batch_unit": "sequences", "grad_checkpointing": case["grad_checkpointing"],
                "flash_attention": True, "packing": True, "measured": {"grad_accum": 1},
                "tokens_per_s_per_gpu": case["tokens_per_second"],
                "framework": "plain PyTorch eager (SDPA, fused AdamW)",
                "notes": "own measurement; mean of 4 steps after 2 warm-up steps",
                "split": "held-out" if i % 3 == 2 else "fit",
            })
    return out


def rate_records() -> list[dict]:
    return [r for r in load_records() if r["kind"] == "measured"]


def held_out(r: dict) -> bool:
    if r.get("split"):  # issue-22 records state their own split
        return r["split"] == "held-out"
    return r["source_family"] in HELD_OUT_FAMILIES or r["id"].startswith(HELD_OUT_ID_PREFIXES)


def excluded(r: dict) -> str | None:
    """Why a record cannot be compared at all (printed, not scored), or None."""
    if r["gpu"].startswith("A6000") and r.get("tokens_per_s_per_gpu"):  # "A6000" as written, no generation
        g = get_gpu("RTX-A6000-48GB")
        factor = 6 if r["mode"] in ("full", "pretrain") else 4
        implied = factor * r["params_b"] * 1e9 * r["tokens_per_s_per_gpu"] / 1e12
        if implied > 0.75 * (g.bf16_tflops or 0):
            return (f"implies {implied:.0f} TFLOPS on a {g.bf16_tflops:g}-TFLOPS Ampere RTX A6000 "
                    "(the record itself says the card was probably an RTX 6000 Ada)")
    try:
        record_gpu(r)
    except GpuNotInCatalog as e:
        return str(e)
    if _unknown_length(r):
        return "unpacked batches padded to each batch's longest sample: the real tokens per micro-batch are not stated"
    return None


def _unknown_length(r: dict) -> bool:
    notes = (r.get("notes") or "").lower()
    return r.get("packing") is False and "pads to the batch max" in notes


def record_model(r: dict) -> ModelSpec:
    """The record's architecture; MLP gating and embedding tying are chosen by the combination
    whose parameter count reproduces the published total."""
    base = dict(name=r["model"], layers=r["layers"], hidden=r["hidden"], heads=r["heads"],
                kv_heads=r["kv_heads"] or r["heads"], intermediate=r["intermediate"], vocab=r["vocab"])
    target = r["params_b"] * 1e9
    candidates = [ModelSpec(**base, mlp_gated=g, tied_embeddings=t) for g in (True, False) for t in (False, True)]
    best = min(candidates, key=lambda m: abs(m.computed_params - target))
    return best.model_copy(update={"params": int(target)})


class GpuNotInCatalog(LookupError):
    """The record's card has no catalog entry yet: the record is kept but cannot be translated."""


def record_gpu(r: dict) -> GpuSpec:
    g = r["gpu"].split("(")[0]  # the name as written, not the record's commentary
    for key in ("GB300", "GB200"):  # Grace-Blackwell superchips: only once the catalog holds them
        if key in g:
            for spec in all_gpus():
                if spec.id.startswith(key):
                    return spec
            raise GpuNotInCatalog(f"{key} has no entry in the GPU catalog")
    if g.strip() == "NVIDIA H200":  # nvidia-smi's name for the SXM part
        return get_gpu("H200-SXM-141GB")
    for key, gid in (("H200", "H200-SXM-141GB"), ("B200", "B200-SXM-180GB"), ("B300", "B300-SXM-288GB"),
                     ("H100", "H100-SXM-80GB"), ("4090", "RTX-4090-24GB"), ("3090", "RTX-3090-24GB"),
                     ("A5000", "RTX-A5000-24GB"), ("6000 Ada", "RTX-6000-Ada-48GB"), ("A6000", "RTX-A6000-48GB")):
        if key in g:
            return get_gpu(gid)
    if "A100" in g:
        return get_gpu("A100-SXM4-40GB" if "40" in g.split("A100", 1)[1][:8] else "A100-SXM4-80GB")
    raise ValueError(f"no GPU rule for {g!r}")


def _mode(r: dict) -> str:
    return "full" if r["mode"] == "pretrain" else r["mode"]


def _targets(r: dict) -> str:
    t = (r.get("lora_targets") or "").lower()
    if not t or "c_attn" in t or "all" in t and "gate" not in t:
        return "all-linear"
    names = {"q": ("q_proj", "q,", "q "), "k": ("k_proj",), "v": ("v_proj", ",v", "v ("), "o": ("o_proj", "output_proj"),
             "gate": ("gate",), "up": ("up_proj",), "down": ("down",)}
    found = [n for n, keys in names.items() if any(k in t + " " for k in keys)]
    return ",".join(found) or "all-linear"


def _structured(r: dict) -> bool:
    """Records that state their layout in fields (tp, pp, cp, vpp, activation_checkpointing, ...)."""
    return r.get("tp") is not None


def _grad_checkpointing(r: dict) -> bool:
    ac = r.get("activation_checkpointing")
    if ac is not None:
        return ac in ("full", "selective")
    if r["grad_checkpointing"] is not None:
        return bool(r["grad_checkpointing"])
    # Megatron's and NeMo's benchmark recipes run no recompute or only selective (attention-core)
    # recompute, which fused attention makes free; torchtune's and Qwen's recipes turn
    # checkpointing on by default.
    return not r["source_family"].startswith("nvidia-")


def _optimizer(r: dict) -> tuple[str, bool]:
    opt = (r.get("optimizer") or "").lower()
    if "paged" in opt:
        return "paged-adamw", False
    if "8bit" in opt or "8-bit" in opt:
        return "adamw-8bit", False
    return "adamw", "backward" in opt


def _micro_batch(r: dict) -> int:
    """Sequences per micro-batch. torchtitan's pipelines split each rank's local batch into as many
    micro-batches as there are stages unless told otherwise (torchtitan pipelining docs)."""
    local = r["micro_batch"] or 1
    pp = r.get("pp") or 1
    if pp > 1 and "torchtitan" in r["framework"].lower() and local % pp == 0:
        return local // pp
    return local


def record_setup(r: dict) -> TrainingSetup:
    mode = _mode(r)
    optimizer, in_backward = _optimizer(r)
    kw = dict(mode=mode, seq_len=r["seq_len"] or 2048, micro_batch=_micro_batch(r), gpus=r["num_gpus"] or 1,
              grad_checkpointing=_grad_checkpointing(r), flash_attention=r["flash_attention"] is not False,
              precision="fp8" if r.get("fp8") or "fp8" in r["precision"].lower() else "bf16-mixed",
              optimizer=optimizer, optimizer_in_backward=in_backward)
    if _structured(r):
        kw.update(tensor_parallel=r["tp"] or 1, pipeline_parallel=r["pp"] or 1, context_parallel=r["cp"] or 1,
                  virtual_stages=(r.get("vpp") or 1) if (r["pp"] or 1) > 1 else 1,
                  sequence_parallel=bool(r.get("sequence_parallel")),
                  recompute="selective" if r.get("activation_checkpointing") == "selective" else "full",
                  activation_offload=r.get("activation_checkpointing") == "offload",
                  compile=bool(r.get("compile")))
    elif "activation offload" in r["parallelism"].lower():
        # Answer.AI's cloud table: the column "CPU+Activation Offload" True means train.py's
        # --use_cpu_offload and --use_activation_cpu_offload together (benchmarks_03_2024.md)
        kw["activation_offload"] = True
    if mode in ("lora", "qlora"):
        kw["lora_rank"] = r["lora_rank"] or 16
        kw["lora_targets"] = _targets(r)
    return TrainingSetup(**kw)


def _parallel(r: dict) -> dict:
    p = r["parallelism"].lower()
    out = dict(zero=0, fsdp=False, tensor_parallel=1, pipeline_parallel=1, offload="none", strategy="ddp")
    if _structured(r):
        tp, pp, cp = r["tp"] or 1, r["pp"] or 1, r["cp"] or 1
        dp = (r["num_gpus"] or 1) // (tp * pp * cp)
        out.update(tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp,
                   virtual_stages=(r.get("vpp") or 1) if pp > 1 else 1,
                   sequence_parallel=bool(r.get("sequence_parallel")) and tp > 1)
        if r.get("fsdp"):
            out.update(fsdp=True, strategy="fsdp")
        elif dp * cp > 1 and ("distributed optimizer" in p or "zero" in p or tp * pp * cp > 1):
            out.update(zero=1, strategy="zero1")  # Megatron-Core's distributed optimizer
        if "cpu offload" in p:
            out["offload"] = "all"
        return out
    if m := re.search(r"tp=(\d+),\s*pp=(\d+)", p):
        out.update(tensor_parallel=int(m[1]), pipeline_parallel=int(m[2]), zero=1, strategy="tp+pp")
    elif "shard_grad_op" in p or "zero2" in p:
        out.update(zero=2, strategy="zero2")
    elif "full_shard" in p or "zero3" in p or p.startswith("fsdp"):
        out.update(fsdp="zero3" not in p, zero=3 if "zero3" in p else 0, strategy="fsdp")
    elif "single" in p:
        out.update(strategy="single")
    offload_marked = "**" in r["quote"] and "cpu offload" in (r.get("notes") or "").lower()
    if "cpu offload" in p or offload_marked:
        out["offload"] = "all"
    return out


def record_layout(r: dict, setup: TrainingSetup, gpu: GpuSpec) -> Layout:
    n = r["num_gpus"] or 1
    nodes = r["num_nodes"] or 1
    domain = getattr(gpu, "nvlink_domain_gpus", None)
    if domain:  # GB200/GB300 NVL72: one NVLink domain across the rack's trays
        # the fewest NVLink domains that split the GPUs evenly (256 GPUs: 4 domains of 64)
        nodes = -(-n // domain)
        while n % nodes:
            nodes += 1
    text = (r["interconnect"] or "").lower()
    if gpu.form_factor == "SXM":
        link, gbps = "nvlink", gpu.nvlink_gbps
    elif gpu.gpu_class == "consumer" or "no p2p" in text:
        link, gbps = "pcie-no-p2p", PCIE_X16_GBPS[gpu.pcie_gen or 4]
    else:
        link, gbps = "pcie", PCIE_X16_GBPS[gpu.pcie_gen or 4]
    fabric = None
    if nodes > 1:
        if m := re.search(r"(\d+)\s*gbps", text):
            fabric = float(m[1])
        else:
            fabric = ASSUMED_FABRIC_GBPS["Hopper" if "Hopper" in gpu.architecture else "Ampere"]
    par = _parallel(r)
    attention = "flash-attention-2" if setup.flash_attention else "eager"
    framework = r["framework"].lower()
    if any(k in framework for k in ("megatron", "transformer engine", "te kernels", "sdpa, fused adamw")) \
            and any(a in gpu.architecture for a in ("Hopper", "Blackwell")):
        # Megatron-Core runs Transformer Engine's fused (cuDNN) attention, Hopper-native like FA3
        attention = "flash-attention-3"
    return Layout(gpu=gpu.id, gpus_per_node=n // nodes, nodes=nodes, micro_batch=setup.micro_batch,
                  grad_checkpointing=setup.grad_checkpointing, precision=setup.precision,
                  attention=attention, recompute=setup.recompute, activation_offload=setup.activation_offload,
                  compile=setup.compile,
                  link=link, link_gbps=gbps, fabric_gbps=fabric, required_gb_per_gpu=0.0,
                  gpu_memory_gb=gpu.memory_gb, **par)


def record_knobs(r: dict, setup: TrainingSetup, layout: Layout) -> Knobs:
    """Tokens per optimizer step and selective recomputation, from the record's words."""
    per_replica = setup.micro_batch * setup.seq_len
    measured = r.get("measured") or {}
    unit = (r.get("global_batch_unit") or "").lower()
    if _structured(r) and r.get("global_batch") and "sequences" in unit:
        tokens = r["global_batch"] * setup.seq_len  # the stated global batch (pipelines split it)
    elif measured.get("grad_accum"):
        tokens = per_replica * layout.data_parallel * measured["grad_accum"]
    elif r.get("global_batch") and "sequences" in unit:
        tokens = r["global_batch"] * setup.seq_len
    else:
        tokens = per_replica * layout.data_parallel  # no accumulation stated: one micro-batch per step
    recompute = None
    ac = str(measured.get("activation_checkpointing", "")).lower()
    if "selective" in ac and not _structured(r):
        # torchtitan: 'selective layer' checkpoints every second block; 'selective op' saves the
        # matmul outputs except every second one: either way about half the forward is rerun.
        recompute = 0.5
    # NeMo's and Megatron-Bridge's LoRA adapts the fused projections (linear_qkv, linear_fc1:
    # the records' target lists say so), one adapter where PEFT has two or three
    fused = r["source_family"] in ("nvidia-nemo-24.07", "nvidia-megatron-bridge") and setup.mode in ("lora", "qlora")
    return Knobs(tokens_per_step=tokens, recompute=recompute, tp_overlap="tp-comm-overlap" in r["parallelism"],
                 fused_projections=fused)


def translate(r: dict) -> tuple[ModelSpec, TrainingSetup, Layout, GpuSpec, Knobs]:
    gpu = record_gpu(r)
    model, setup = record_model(r), record_setup(r)
    layout = record_layout(r, setup, gpu)
    return model, setup, layout, gpu, record_knobs(r, setup, layout)
