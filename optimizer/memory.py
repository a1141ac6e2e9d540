"""Peak GPU memory per GPU for training and inference, by mechanism.

The estimate is a sum of mechanisms, each with its source. All sizes are bytes per GPU until
the end, where they are reported in GB (1e9 B). Three views are reported, because published
numbers measure different things (reference/memory-formulas.md §0):

- allocated (`peak_gb_per_gpu`): live tensors, what `torch.cuda.max_memory_allocated` reports;
- reserved: what PyTorch's caching allocator holds (allocated + fragmentation slack);
- device: what nvidia-smi shows (reserved + CUDA context, cuBLAS/NCCL workspaces).

`required_gb_per_gpu` = the device view, or the allocated view with the margin on its uncertain part
plus the CUDA context where that is larger; feasibility compares it with the card.

The peak is the larger of two moments of a training step:
- forward/backward: resident states + saved activations + the loss/logits transient (the
  end of forward is where every saved activation and the logits are alive at once);
- optimizer step: resident states + the optimizer's temporaries (activations are freed).
Gradients are counted as resident during forward: with gradient accumulation (the usual way
to reach a useful batch at micro-batch 1) the previous micro-steps' gradients are alive while
the next forward runs.
"""

from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass, field

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.models import GpuSpec, MemoryBreakdown, MemoryEstimate, ModelSpec, TrainingSetup

GB = 1e9

# --- per-parameter byte accounting --------------------------------------------------------------
# Mixed precision AdamW: 2 (16-bit weight) + 2 (16-bit grad) + 4 (fp32 master) + 8 (fp32 m, v)
# = 16 B/param. ZeRO paper, Rajbhandari et al. 2020 (arXiv:1910.02054) §3.1; seed 002.
# Pure 16-bit ("bf16-true": LitGPT --precision bf16-true, torchtune dtype bf16): weights, grads
# and both Adam moments in bf16, no master copy = 8 B/param (memory-formulas.md §1).
# fp32: 4 + 4 + 8 = 16 B/param, no master (EleutherAI "Transformer Math 101").
# DeepSpeed ZeRO also keeps fp32 gradient partitions for its optimizer: +4 B/param sharded
# (comment in deepspeed/runtime/zero/stage_1_and_2.py; its estimators use 18 B/param;
# Megatron theoretical_memory_usage.py likewise 18).
DEEPSPEED_FP32_GRAD_BYTES = 4

# FP8 as shipped by Transformer Engine and torchao float8: matmul inputs are cast to fp8, the
# weights, master weights and optimizer states stay as in bf16 mixed precision, and TE keeps an
# fp8 copy of each weight (+1 B/param) (NVIDIA TransformerEngine docs "FP8 primer";
# pytorch/ao torchao/float8/README.md). MS-AMP-style fp8 optimizer states (seed 002's "~60 GB
# for 7B") are not modelled.
FP8_WEIGHT_CACHE_BYTES = 1

# Optimizer state bytes per trainable parameter, excluding the master copy.
# AdamW: m and v (EleutherAI Transformer Math 101). 8-bit Adam (bitsandbytes): 1 B each
# (Dettmers et al. 2021, arXiv:2110.02861). SGD with momentum: one buffer.
MOMENTS = {"adamw": 2, "paged-adamw": 2, "adamw-8bit": 2, "paged-adamw-8bit": 2, "sgd": 1, "none": 0}
EIGHT_BIT_OPTIMIZERS = ("adamw-8bit", "paged-adamw-8bit")
# Paged optimizers (bitsandbytes PagedAdamW, PagedAdamW8bit) allocate their state with
# cudaMallocManaged: unified memory that the driver pages to host RAM when the GPU is full, and
# that PyTorch's caching allocator never sees (bitsandbytes docs "Paged optimizers";
# memory-formulas.md §0, §6). A run that fits only with it has the state in host RAM, so the state
# is charged there. The fp32 master copy of mixed precision is the model's own parameter, not
# optimizer state: it stays on the GPU.
PAGED_OPTIMIZERS = ("paged-adamw", "paged-adamw-8bit")

# --- quantised storage ----------------------------------------------------------------------------
# NF4: 4 bits per weight + one fp32 absmax per block of 64 = 4.5 bits; double quantisation stores
# the absmax in 8 bits with an fp32 constant per 256 blocks = 4.127 bits (Dettmers et al. 2023,
# QLoRA, arXiv:2305.14314 §3). Only linear layers inside the blocks are quantised; embeddings,
# lm_head and norms stay 16-bit (transformers' bitsandbytes integration skips lm_head).
NF4_BITS = 4.5
NF4_DQ_BITS = 4 + 8 / 64 + 32 / (64 * 256)
# LLM.int8: 1 B per weight plus fp16 row statistics (Dettmers et al. 2022, arXiv:2208.07339).
INT8_BITS = 8.25
INT4_BITS = 4.5  # GPTQ/AWQ int4 with group size 128: 4 bits + fp16 scale and zero per group

# --- activations ----------------------------------------------------------------------------------
# Korthikanti et al. 2022 (arXiv:2205.05198, Table 2): per layer, s*b*h*(34 + 5*a*s/h) bytes for a
# GPT block (16-bit activations with dropout). The 5*a*s^2*b term is the attention score,
# softmax and dropout tensors; FlashAttention (Dao et al. 2022) never materialises them and
# saves only the output and an fp32 log-sum-exp per row (4*a*s*b).
ATTN_SCORE_BYTES = 5
FLASH_LSE_BYTES = 4
# With non-selective gradient checkpointing (HF, torchtune, LitGPT), each layer keeps only its
# input (2*s*b*h) and one layer's full activations are rebuilt during backward (Korthikanti
# Table 2 "full recompute" row + one layer; memory-formulas.md §4.1).

# Logits and loss (memory-formulas.md §4.3): HF-style causal-LM training holds, at the end of
# forward, the 16-bit logits, their fp32 up-cast (transformers src/transformers/loss/loss_utils.py
# ForCausalLMLoss: `logits = logits.float()`), cross-entropy's saved fp32 log-softmax, and then
# its fp32 gradient: 2 + 4 + 4 + 4 = 14 B per token per vocabulary entry. Megatron charges
# 4*s*b*V; chunked or fused cross-entropy (torchtune, Liger, unsloth) removes most of it.
LOSS_FP32_BYTES = 12
# Chunked cross-entropy still keeps every chunk's fp32 log-softmax for backward (4 B) but never
# the whole-sequence up-cast and gradient: torchtune's Llama-3.2-3B table drops 51.0 -> 42.9 GiB
# with chunked CE alone at s*b*V = 1.05e9, ~8 B per element (torchtune README, memory-formulas.md §4.3).
CHUNKED_LOSS_BYTES = 4
# Fused linear cross-entropy (Liger FusedLinearCrossEntropy, unsloth, Apple's cut cross-entropy)
# never holds the logits of the whole batch: it computes the loss and its gradient chunk by chunk
# inside the forward. Liger sizes a chunk at about tokens x hidden / vocab rows (inc_factor =
# ceil(V / H), chunk = next power of 2 of tokens / inc_factor; linkedin/Liger-Kernel
# src/liger_kernel/ops/fused_linear_cross_entropy.py), so one chunk's logits are about s*b*h
# elements: its 16-bit logits (2 B), their fp32 up-cast (4 B) and fp32 gradient (4 B), plus the
# 16-bit gradient of the hidden states kept for backward (2 B) = 12 B per s*b*h.
FUSED_LOSS_BYTES_PER_HIDDEN = 12

# QLoRA activations are larger than LoRA's: bitsandbytes' 4-bit matmul saves its own 16-bit
# input and dequantises each weight on the fly. LitGPT's Llama-2-7B runs (seq 1304, mb 1): LoRA
# 21.30 GB vs QLoRA 14.14 GB while the weights shrink by ~9.5 GB, i.e. ~2.3 GB more saved
# activations = ~6.7 bytes * s*b*h per layer (Lightning-AI/litgpt tutorials/resource-tables.md;
# memory-formulas.md §6).
QLORA_SAVED_INPUT_BYTES = 6.7

# --- overheads ------------------------------------------------------------------------------------
# Caching-allocator slack: reserved exceeds allocated by 2-15 % in published pairs
# (memory-formulas.md §0; Answer.AI fsdp_qlora: 10.22 GiB reserved vs 9.16 GiB allocated). The
# slack comes from memory that is freed and re-allocated in varying sizes every step (activations,
# the loss path, gathered parameters, gradients freed by zero_grad(set_to_none=True)); weights
# and optimizer state are allocated once and pack exactly. We charge 20 % of the transient part.
ALLOCATOR_SLACK = 0.20
# nvidia-smi minus reserved: CUDA context, cuBLAS/cuDNN handles, and NCCL communicator buffers
# (allocated outside the caching allocator): +0.5-1.5 GiB (memory-formulas.md §0).
CUDA_CONTEXT_GB = 0.8
NCCL_BUFFERS_GB = 0.5

# The optimizer step is assumed fused (torch AdamW fused=True, DeepSpeed FusedAdam, torchtune
# configs' `fused: True`): no parameter-sized temporaries. PyTorch's foreach path would add one
# copy of the optimizer state at step time (torch/optim/adamw.py `_multi_tensor_adamw`).

# DeepSpeed ZeRO-3 defaults (deepspeed/runtime/zero/config.py): up to stage3_max_live_parameters
# = 1e9 parameters may stay gathered on a GPU, and parameters reused within
# stage3_max_reuse_distance = 1e9 are not released. This is why measured ZeRO-3 peaks sit far
# above the estimator's 4 x largest layer (memory-formulas.md §2).
ZERO3_MAX_LIVE_PARAMS = 1e9

# DDP keeps gradient buckets that duplicate the gradients unless gradient_as_bucket_view=True
# (torch.nn.parallel.DistributedDataParallel docs, `gradient_as_bucket_view`).


@dataclass
class _Bytes:
    """Per-GPU bytes by component, plus notes explaining each modelling choice."""

    weights: float = 0.0  # resident parameters (sharded, quantised, frozen, adapters)
    gathered: float = 0.0  # parameters all-gathered for compute (ZeRO-3 / FSDP), a weights cost
    gradients: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0  # saved for backward, or KV cache + prefill workspace for inference
    logits: float = 0.0  # loss path transient at the end of forward
    # Gradient checkpointing: the one layer rebuilt at a time during backward. It exists only after
    # the loss and its gradient have been consumed (backward runs the loss first, then lm_head,
    # then recomputes the last layer), so it never coexists with the loss transient.
    recompute: float = 0.0
    buffers: float = 0.0  # DDP buckets, dequantisation, ZeRO reduce buckets
    backward_gathered: float = 0.0  # parameters left unsharded by the end of backward (frozen FSDP units)
    grads_in_forward: bool = True  # gradient accumulation: earlier micro-steps' gradients live through forward
    cpu_offload: float = 0.0
    activations_offloaded: float = 0.0  # the part of cpu_offload that is saved activations (per micro-batch)
    notes: list[str] = field(default_factory=list)

    @property
    def states(self) -> float:
        return self.weights + self.gathered + self.gradients + self.optimizer

    @property
    def transient(self) -> float:
        """Memory freed and re-allocated every step: where the caching allocator fragments."""
        return (self.activations + self.logits + self.recompute + self.gathered + self.gradients
                + self.buffers + self.backward_gathered)

    @property
    def forward_peak(self) -> float:
        """Saved activations plus the larger of the loss transient (end of forward) and the
        layer being recomputed (backward)."""
        return self.activations + max(self.logits, self.recompute)

    @property
    def peak(self) -> float:
        # The forward/backward boundary holds every saved activation and the loss; the end of
        # backward holds whatever sharded training failed to release, with activations freed.
        if self.grads_in_forward:
            return self.states + self.buffers + max(self.forward_peak, self.backward_gathered)
        # Without gradient accumulation the gradients are created during backward while the saved
        # activations are freed layer by layer, so what is alive moves from (activations + loss) at
        # the end of forward to the gradients at the end of backward (zero_grad(set_to_none=True)
        # freed the last step's): the peak is the larger end.
        fixed = self.weights + self.gathered + self.optimizer + self.buffers
        return fixed + max(self.forward_peak, self.gradients, self.backward_gathered)


@dataclass(frozen=True)
class _Precision:
    """Bytes per element of each kind of state under one precision setting."""

    weight: float  # bytes per resident 16/32-bit weight
    grad: float
    master: float  # fp32 master copy (mixed precision)
    moment: float  # bytes per optimizer moment
    act: float  # bytes per activation element


def _precision(setup: TrainingSetup) -> _Precision:
    p = setup.precision
    if p == "fp32":
        return _Precision(weight=4, grad=4, master=0, moment=4, act=4)
    if p == "bf16-true":
        return _Precision(weight=2, grad=2, master=0, moment=2, act=2)
    # bf16-mixed, fp16-mixed, fp8 (fp8 keeps bf16 weights with fp32 master/optimizer state)
    return _Precision(weight=2, grad=2, master=4, moment=4, act=2)


def _moment_bytes(setup: TrainingSetup, prec: _Precision) -> float:
    if setup.optimizer in EIGHT_BIT_OPTIMIZERS:
        return 1.0
    return prec.moment


def _uses_deepspeed(setup: TrainingSetup) -> bool:
    return setup.zero > 0


def _sharded(setup: TrainingSetup) -> bool:
    return setup.zero == 3 or setup.fsdp


def shard_group(setup: TrainingSetup) -> int:
    """GPUs that ZeRO/FSDP shard states over: the data-parallel replicas times the context-parallel
    group, which holds identical parameters (Megatron-LM's distributed optimizer shards over
    data x context parallel ranks; torchtitan applies FSDP over its dp_shard x cp mesh)."""
    return setup.data_parallel * setup.context_parallel


# --- parameter counts ------------------------------------------------------------------------------


def adapter_params(model: ModelSpec, setup: TrainingSetup) -> int:
    """LoRA parameters: r * (d_in + d_out) per adapted matrix (Hu et al. 2021, arXiv:2106.09685).

    >>> from rentopt.optimizer.models import ModelSpec, TrainingSetup
    >>> llama7 = ModelSpec(name="x", layers=32, hidden=4096, heads=32, kv_heads=32,
    ...                    intermediate=11008, vocab=32000)
    >>> adapter_params(llama7, TrainingSetup(mode="lora", lora_rank=8, lora_targets="q,v"))
    4194304
    """
    return setup.lora_rank * adapted_width(model, setup, experts=model.num_experts)


def adapted_width(model: ModelSpec, setup: TrainingSetup, *, experts: int, fused: bool = False) -> int:
    """d_in + d_out summed over the linears LoRA adapts, every layer (an MLP linear `experts`
    times: all of them held in memory, those a token is routed to in its traffic) and the LM
    head if adapted; a target the model lacks (a gate on a non-gated MLP) adds nothing.
    `fused`: the adapters sit on Megatron's fused projections (NeMo's `linear_qkv` and
    `linear_fc1`), so the adapted ones of q, k, v share one input, as do gate and up.

    >>> from rentopt.optimizer.models import ModelSpec, TrainingSetup
    >>> llama7 = ModelSpec(name="x", layers=32, hidden=4096, heads=32, kv_heads=32,
    ...                    intermediate=11008, vocab=32000)
    >>> adapted_width(llama7, TrainingSetup(mode="lora"), experts=1)  # 32 x (4 x 8192 + 2 x 15104 + 15104)
    2498560
    >>> adapted_width(llama7, TrainingSetup(mode="lora"), experts=1, fused=True)  # qkv 16384, fc1 26112
    2105344
    """
    shapes = model.linear_shapes()
    per_layer = 0
    for target in setup.lora_targets:
        if target == "lm_head" or target not in shapes:
            continue
        d_in, d_out = shapes[target]
        per_layer += (experts if target in ("gate", "up", "down") else 1) * (d_in + d_out)
    if fused:  # one input per fused projection, however many of its parts are adapted
        for group, copies in ((("q", "k", "v"), 1), (("gate", "up"), experts)):
            adapted = [t for t in group if t in setup.lora_targets and t in shapes]
            per_layer -= copies * sum(shapes[t][0] for t in adapted[1:])
    head = model.hidden + model.vocab if "lm_head" in setup.lora_targets else 0
    return model.layers * per_layer + head


def trainable_params(model: ModelSpec, setup: TrainingSetup) -> int:
    if setup.mode == "full":
        return model.total_params
    if setup.mode in ("lora", "qlora"):
        return adapter_params(model, setup)
    return 0


# --- components ------------------------------------------------------------------------------------


def _weights(model: ModelSpec, setup: TrainingSetup, prec: _Precision, out: _Bytes) -> None:
    P = model.total_params
    tp_pp = setup.tensor_parallel * setup.pipeline_parallel
    if setup.mode == "full":
        resident = P * prec.weight / tp_pp
        if setup.fsdp and prec.master:
            # FSDP mixed precision keeps only the fp32 shard (the master copy, counted with the
            # optimizer) and casts it to 16 bits as it all-gathers a unit (torch FSDP MixedPrecision
            # / fully_shard MixedPrecisionPolicy param_dtype): no persistent 16-bit copy.
            resident = 0.0
        if setup.precision == "fp8":
            resident += P * FP8_WEIGHT_CACHE_BYTES / tp_pp
        if _sharded(setup):
            resident = _shard_or_offload(resident, setup, out)
            out.gathered += _gathered_bytes(model, setup, prec.weight, trainable=True, out=out)
        out.weights += resident
        return
    if setup.mode == "qlora":
        bits = NF4_DQ_BITS if setup.double_quant else NF4_BITS
        quantised = model.block_linear_params * bits / 8
        other = (P - model.block_linear_params) * 2  # embeddings, lm_head, norms stay 16-bit
        frozen = (quantised + other) / tp_pp
        if _sharded(setup):
            # FSDP/ZeRO-3 can shard the 4-bit weights when bnb_4bit_quant_storage matches the model
            # dtype (PEFT docs accelerate/fsdp.md, deepspeed.md; Answer.AI fsdp_qlora).
            frozen = _shard_or_offload(frozen, setup, out)
            out.gathered += _gathered_bytes(model, setup, bits / 8, trainable=False, out=out)
            out.notes.append("QLoRA under FSDP/ZeRO-3: 4-bit base sharded (bnb_4bit_quant_storage = model dtype)")
        out.weights += frozen
        # bitsandbytes dequantises one weight matrix to 16-bit for each matmul (transient).
        biggest = max(a * b for a, b in model.linear_shapes().values())
        out.buffers += biggest * 2 / setup.tensor_parallel
    elif setup.mode == "lora":
        frozen = P * prec.weight / tp_pp
        if setup.zero == 3:
            # DeepSpeed partitions every parameter under zero.Init, frozen or not.
            frozen = _shard_or_offload(frozen, setup, out)
            out.gathered += _gathered_bytes(model, setup, prec.weight, trainable=False, out=out)
        elif setup.fsdp:
            # Modern FSDP reshards a frozen unit once its input gradients are computed: FSDP1 since
            # pytorch/pytorch#101982 (a multi-grad hook on the unit's inputs), FSDP2 fully_shard
            # always; torchtune and Accelerate with PEFT's separate wrap policy for trainable and
            # frozen parameters use it. Measured: torchtune Llama-3.1-70B LoRA on 8 x A100 27.6 GiB
            # per GPU (README), PEFT's Llama-2-70B LoRA on 8 x H100 72-80 GB (docs accelerate/fsdp.md),
            # far below the 140 GB base. Before that, a unit whose flat parameter needs no gradient
            # never got the post-backward reshard (pytorch/pytorch#95805), so by the end of backward
            # every frozen unit was unsharded next to its shard: LitGPT's 2023 FSDP tables, 7B on
            # 2 x A100 22.18 GB vs 21.30 on one (tutorials/resource-tables.md). --fsdp-frozen-unsharded
            # models that.
            if setup.fsdp_frozen_unsharded:
                out.backward_gathered += frozen
                out.notes.append("LoRA under FSDP without frozen resharding: the end of backward holds the whole base")
            frozen = _shard_or_offload(frozen, setup, out)
            out.gathered += _gathered_bytes(model, setup, prec.weight, trainable=False, out=out)
        out.weights += frozen
    else:  # inference
        out.weights += _inference_weights(model, setup) / tp_pp
        return
    # Adapters (trainable, tiny): PEFT keeps them in fp32 next to a 16-bit base
    # (peft tuners_utils._cast_adapter_dtype, autocast_adapter_dtype=True); pure-16-bit stacks
    # (LitGPT bf16-true, torchtune) keep them in bf16.
    adapter_weight = 2 if setup.precision == "bf16-true" else 4
    out.weights += adapter_params(model, setup) * adapter_weight / tp_pp


def _shard_or_offload(resident: float, setup: TrainingSetup, out: _Bytes) -> float:
    """Parameters sharded over the data-parallel group (ZeRO-3/FSDP), or moved to host memory
    entirely with --offload all (ZeRO-3 offload_param, FSDP CPUOffload)."""
    if setup.offload == "all":
        # Each rank offloads only its own shard (ZeRO-3 partitions before offload_param; FSDP
        # shards, then CPUOffload moves the shard).
        out.cpu_offload += resident / shard_group(setup)
        return 0.0
    return resident / shard_group(setup)


def _inference_weights(model: ModelSpec, setup: TrainingSetup) -> float:
    P = model.total_params
    linear = model.block_linear_params
    dense = 4 if setup.precision == "fp32" else 2
    if setup.quant == "none":
        return P * dense
    bits = {"int8": INT8_BITS, "int4": INT4_BITS}.get(setup.quant)
    if setup.quant == "nf4":
        bits = NF4_DQ_BITS if setup.double_quant else NF4_BITS
    return linear * bits / 8 + (P - linear) * 2


def _gathered_bytes(model: ModelSpec, setup: TrainingSetup, bytes_per_param: float, *,
                    trainable: bool, out: _Bytes) -> float:
    """Parameters materialised on each GPU while sharded training computes.

    FSDP all-gathers one wrapped block at a time and prefetches the next (torch FSDP
    BackwardPrefetch.BACKWARD_PRE, forward_prefetch): ~2 blocks, plus the unsharded gradient of
    the block being reduce-scattered. DeepSpeed ZeRO-3 keeps up to stage3_max_live_parameters
    gathered (default 1e9) and does not release parameters it will reuse soon, so its gathered
    set is the smaller of the model and that limit.
    """
    block = model.block_params / setup.tensor_parallel
    if setup.zero == 3:
        live = min(model.total_params / setup.pipeline_parallel, ZERO3_MAX_LIVE_PARAMS)
        out.notes.append("ZeRO-3: up to stage3_max_live_parameters (1e9) parameters stay gathered per GPU")
        gathered = max(live, 2 * block) * bytes_per_param
    else:
        gathered = 2 * block * bytes_per_param
        # The root unit (embeddings, final norm, lm_head: everything not inside a wrapped block)
        # is not resharded after forward, since backward needs it first (torch fully_shard docs:
        # the root's reshard_after_forward is set to False; FSDP1's root likewise), so it stays
        # gathered through the step. Embeddings and lm_head stay 16-bit under QLoRA.
        root = (model.embedding_params + model.lm_head_params + model.hidden) / setup.tensor_parallel
        gathered += root * max(bytes_per_param, 2)
        out.notes.append("FSDP: the root unit (embeddings, lm_head) stays gathered from forward to backward")
    if setup.offload == "all" and shard_group(setup) > 1:
        # CPU offload copies a unit's shard to the GPU before its all-gather (torch FSDP CPUOffload;
        # FSDP2 CPUOffloadPolicy, pytorch/pytorch#120256: "one H2D copy for each parameter before
        # all-gather"): the two gathered blocks' shards.
        gathered += 2 * block * bytes_per_param / shard_group(setup)
    if trainable:
        gathered += block * 2  # the block's unsharded 16-bit gradient before reduce-scatter
    return gathered


def _gradients_and_optimizer(model: ModelSpec, setup: TrainingSetup, prec: _Precision, out: _Bytes) -> None:
    """Gradients and optimizer state per GPU.

    DeepSpeed ZeRO follows its own estimators (deepspeed/runtime/zero/stage_1_and_2.py
    estimate_zero2_model_states_mem_needs, stage3.py estimate_zero3_model_states_mem_needs):
    per partition, fp32 gradients (4) + fp32 master (4) + Adam moments (8); ZeRO-1/2 also keep
    a 16-bit gradient partition (ZeRO-1: the full 16-bit gradients, all-reduced); with
    ZeRO-Offload the gradient partitions move to the CPU with the optimizer (Ren et al. 2021,
    arXiv:2101.06840 §4). Elsewhere (DDP, FSDP, single GPU): 16-bit gradients + master + moments.
    """
    if not setup.trains:
        return
    T = trainable_params(model, setup) / (setup.tensor_parallel * setup.pipeline_parallel)
    dp = shard_group(setup)
    adapters = setup.mode in ("lora", "qlora")
    if adapters:
        # PEFT keeps adapters in fp32 (no separate master); pure-16-bit stacks keep them in bf16.
        grad = 2 if setup.precision == "bf16-true" else 4
        master = 0
    else:
        grad, master = prec.grad, prec.master
    moments = MOMENTS[setup.optimizer] * _moment_bytes(setup, prec)
    offloaded = setup.offload in ("optimizer", "all")
    paged = setup.optimizer in PAGED_OPTIMIZERS and not offloaded
    state = T * (master + moments)
    if paged:
        state = T * master  # the moments are paged: charged to host RAM below

    if setup.zero and not adapters:
        grads16 = T * grad if setup.zero == 1 else (T * grad / dp if setup.zero == 2 else 0.0)
        grads32 = T * DEEPSPEED_FP32_GRAD_BYTES / dp
        out.notes.append("DeepSpeed ZeRO: fp32 gradient partitions, as in its own estimators (18 B/param)")
        if offloaded:
            out.cpu_offload += grads32 + (grads16 if setup.zero == 2 else 0.0)
            grads32 = 0.0
            grads16 = grads16 if setup.zero == 1 else 0.0
        grads = grads16 + grads32
    else:
        grads = T * grad
        if setup.optimizer_in_backward:
            # torchtune optimizer_in_bwd: each parameter steps as its gradient arrives, so the full
            # gradient buffer never exists; one block's gradients are transient.
            grads = min(grads, model.block_params * grad)
        elif setup.fsdp and setup.offload == "all":
            # FSDP CPUOffload keeps the sharded gradients on the CPU (each is copied out after its
            # reduce-scatter) and steps the optimizer there (torch.distributed.fsdp.CPUOffload).
            out.cpu_offload += grads / dp
            grads = 0.0
            out.notes.append("FSDP CPU offload: parameters, gradients and the optimizer step on the CPU")
        elif setup.zero >= 2 or setup.fsdp:
            grads /= dp
        elif dp > 1 and setup.zero == 0 and not adapters:
            out.buffers += T * grad
            out.notes.append("DDP: gradient buckets duplicate the gradients (gradient_as_bucket_view=False)")

    if setup.zero >= 1 or setup.fsdp:
        state /= dp
    if paged:
        paged_state = T * moments / (dp if setup.zero >= 1 or setup.fsdp else 1)
        out.cpu_offload += paged_state
        out.notes.append(f"paged optimizer: its {paged_state / GB:.2f} GB of state is in unified memory, "
                         "counted against host RAM, not the GPU")
    if offloaded:
        out.cpu_offload += state
        state = 0.0
        if setup.offload == "all" and not _sharded(setup):
            out.notes.append("--offload all without ZeRO-3/FSDP only offloads the optimizer")
    out.gradients += grads
    out.optimizer += state


def _layer_activation_bytes(model: ModelSpec, setup: TrainingSetup, act: float) -> float:
    """Saved activations of one decoder layer on one GPU, in bytes.

    Derived for pre-norm blocks in the spirit of Korthikanti et al. 2022 Table 2 (element counts
    from the tensors autograd saves):
    - two norm inputs and the two normed outputs feeding attention and MLP: 4h
    - q, k, v after RoPE (kept by attention) and the attention output (input of o): q + 2kv + q
    - gated MLP (SwiGLU/GeGLU): gate and up outputs, the activation output and the product
      entering `down`: 4f; plain MLP: the first linear's output and the activation output: 2f
    For Llama-2-7B this is ~37.5*s*b*h at 16 bits, close to Korthikanti's 34 for GPT blocks.
    Tensor parallel splits the attention and MLP tensors over its group; the norm tensors only
    with sequence parallel (Korthikanti Table 2: 10 + 24/t without, 34/t with it). Context
    parallel gives each GPU s/cp of every sequence.
    """
    h, f = model.hidden, model.intermediate
    split = 2 * model.q_dim + 2 * model.kv_dim
    split += (4 * f if model.mlp_gated else 2 * f) * max(1, model.experts_per_token)
    tp = setup.tensor_parallel
    norms_tp = tp if setup.sequence_parallel else 1
    per_token = (4 * h / norms_tp + split / tp) * act
    s, b = setup.seq_len / setup.context_parallel, setup.micro_batch
    total = s * b * per_token
    a = model.heads / tp
    if setup.flash_attention:
        total += FLASH_LSE_BYTES * a * s * b
    else:
        # scores of this GPU's s/cp queries against the whole sequence
        total += ATTN_SCORE_BYTES * a * s * setup.seq_len * b * (act / 2)
    return total


def _layer_input_bytes(model: ModelSpec, setup: TrainingSetup, act: float) -> float:
    """One layer's input (what full checkpointing keeps per layer): s/cp x b x h 16-bit elements,
    split over the TP group only with sequence parallel."""
    tp = setup.tensor_parallel if setup.sequence_parallel else 1
    return setup.seq_len / setup.context_parallel * setup.micro_batch * model.hidden * (act / 2) * 2 / tp


def pipeline_in_flight(setup: TrainingSetup) -> float:
    """Micro-batches whose activations the first pipeline stage holds, in units of its own layers.

    1F1B: the first stage holds `pp` micro-batches in flight (Narayanan et al. 2021, arXiv:2104.04473
    §2.2), so its activation memory equals an unsplit model's. Interleaved 1F1B with v chunks per
    GPU holds (1 + (p-1)/(p v)) times that (Korthikanti et al. 2022, arXiv:2205.05198 §4.2.3).
    """
    p, v = setup.pipeline_parallel, setup.virtual_stages
    if p == 1:
        return 1.0
    return p * (1.0 + (p - 1) / (p * v)) if v > 1 else float(p)


# Selective checkpointing as torchtitan runs it by default (activation_checkpoint.mode =
# "selective": every second layer checkpointed, or every second matmul output recomputed): about
# half of each layer's saved tensors are kept and half of the forward is rerun
# (torchtitan docs/activation_checkpointing; Liang et al. 2024, arXiv:2410.06511 §2.3).
SELECTIVE_KEPT = 0.5
# Activation offloading keeps the layers being computed on the GPU (the current one and the
# prefetched next, forward and backward) and streams the rest to pinned host memory (torchtune
# OffloadActivations; Megatron-Core --cpu-offloading-num-layers).
OFFLOAD_RESIDENT_LAYERS = 2


def _activations(model: ModelSpec, setup: TrainingSetup, prec: _Precision, out: _Bytes) -> None:
    s, b, L = setup.seq_len / setup.context_parallel, setup.micro_batch, model.layers
    act = prec.act
    layers_here = L / setup.pipeline_parallel
    per_layer = _layer_activation_bytes(model, setup, act)
    if setup.mode == "qlora":
        per_layer += QLORA_SAVED_INPUT_BYTES * s * b * model.hidden / setup.tensor_parallel
    layer_input = _layer_input_bytes(model, setup, act)
    if setup.grad_checkpointing is not False and setup.recompute == "selective":
        kept = SELECTIVE_KEPT * per_layer + (1 - SELECTIVE_KEPT) * layer_input
        saved = layers_here * kept
        out.recompute += per_layer  # rebuilt in backward, after the loss transient is freed
        out.notes.append("selective checkpointing: about half of each layer's activations kept, the rest recomputed")
    elif setup.grad_checkpointing is not False:  # None (not given) is counted as on; see TrainingSetup
        # Layer inputs kept for every layer; one layer rebuilt during backward, plus the gradient
        # flowing through it (same size as its input).
        saved = layers_here * layer_input
        out.recompute += per_layer
        out.notes.append("gradient checkpointing: layer inputs kept, one layer recomputed at a time "
                         "(after the loss transient is freed)")
    else:
        saved = layers_here * per_layer
    saved *= pipeline_in_flight(setup)
    if setup.activation_offload:
        resident = OFFLOAD_RESIDENT_LAYERS * per_layer
        if saved > resident:
            out.cpu_offload += saved - resident
            out.activations_offloaded += saved - resident
            saved = resident
        out.notes.append("activation offloading: saved activations in pinned host memory, two layers on the GPU")
    out.activations += saved
    out.logits += _loss_bytes(model, setup)


def _loss_bytes(model: ModelSpec, setup: TrainingSetup) -> float:
    """The loss path's transient at the end of forward, per GPU (see LOSS_FP32_BYTES); context
    parallel gives each GPU s/cp tokens of every sequence."""
    s, b = setup.seq_len / setup.context_parallel, setup.micro_batch
    if setup.fused_loss:
        return s * b * model.hidden * FUSED_LOSS_BYTES_PER_HIDDEN / setup.tensor_parallel
    logit_bytes = 4 if setup.precision == "fp32" else 2
    loss_bytes = CHUNKED_LOSS_BYTES if setup.chunked_loss else LOSS_FP32_BYTES
    return s * b * model.vocab * (logit_bytes + loss_bytes) / setup.tensor_parallel


def _inference_activations(model: ModelSpec, setup: TrainingSetup, out: _Bytes) -> None:
    s, b = setup.seq_len, setup.micro_batch
    kv_bytes = 4 if setup.precision == "fp32" else 2
    # KV cache: 2 (K and V) x layers x tokens x kv heads x head dim x bytes (HF Llama 3.1 blog
    # table: 8B = 131,072 B per token in fp16).
    kv = 2 * model.layers * s * b * model.kv_dim * kv_bytes
    # Prefill workspace: MLP intermediates for the whole prompt (gate, up, product) and the
    # residual/attention tensors of one layer, ~s*b*(3f + 4h) 16-bit elements (derived,
    # memory-formulas.md §7); only the last position's logits are kept (fp32).
    prefill = s * b * (3 * model.intermediate + 4 * model.hidden) * 2
    out.activations += (kv + prefill) / setup.tensor_parallel
    out.logits += b * model.vocab * 4
    out.notes.append("inference: weights + KV cache for seq_len tokens + prefill workspace")


def _checkpoint_bytes(model: ModelSpec, setup: TrainingSetup) -> float:
    """One resumable checkpoint on disk (seed 002: optimizer + scheduler + RNG must be saved).

    Full training: 16-bit weights + fp32 master + optimizer moments; LoRA: the adapters with
    their optimizer state. Scheduler and RNG state are a few KB.
    """
    P = model.total_params
    extra = 1e6  # scheduler, RNG, trainer state
    if setup.mode == "full":
        prec = _precision(setup)
        moments = MOMENTS[setup.optimizer] * _moment_bytes(setup, prec)
        return P * (2 + prec.master + moments) + extra
    if setup.mode in ("lora", "qlora"):
        A = adapter_params(model, setup)
        return A * (4 + 8) + extra
    return 0.0


def _breakdown(model: ModelSpec, setup: TrainingSetup, activation_scale: float = 1.0) -> _Bytes:
    prec = _precision(setup)
    out = _Bytes()
    _weights(model, setup, prec, out)
    if setup.trains:
        _gradients_and_optimizer(model, setup, prec, out)
        _activations(model, setup, prec, out)
        out.grads_in_forward = setup.grad_accumulation
    else:
        _inference_activations(model, setup, out)
    if activation_scale != 1.0:
        out.activations *= activation_scale
        out.logits *= activation_scale
        out.recompute *= activation_scale
    return out


def offloaded_activation_bytes(model: ModelSpec, setup: TrainingSetup) -> float:
    """Bytes of saved activations one GPU sends to host memory per micro-batch (and reads back in
    backward) with activation offloading; 0 without it."""
    return _breakdown(model, setup).activations_offloaded if setup.activation_offload and setup.trains else 0.0


def model_states_gb(model: ModelSpec, setup: TrainingSetup) -> float:
    """Weights + gradients + optimizer state per GPU, the way DeepSpeed's estimators count them.

    DeepSpeed's `estimate_zero3_model_states_mem_needs` counts 4 x the largest layer for gathered
    parameters (fp16 params + grads) instead of the live-parameter buffers; activations and
    buffers are excluded.
    """
    prec = _precision(setup)
    out = _Bytes()
    _weights(model, setup, prec, out)
    _gradients_and_optimizer(model, setup, prec, out)
    gathered = 4 * model.largest_layer_params if setup.zero == 3 else out.gathered
    return (out.weights + gathered + out.gradients + out.optimizer) / GB


@dataclass(frozen=True)
class _Views:
    """The peak as PyTorch reports it (allocated, reserved), as the device holds it, the exactly
    known states, and what a GPU must have (required)."""

    allocated: float
    reserved: float
    device: float
    states: float  # exactly known: resident weights, gradients and optimizer state
    required: float


def _views(parts: _Bytes, setup: TrainingSetup) -> _Views:
    allocated = parts.peak
    reserved = allocated + ALLOCATOR_SLACK * parts.transient
    context = CUDA_CONTEXT_GB * GB + (NCCL_BUFFERS_GB * GB if setup.gpus > 1 else 0.0)
    device = reserved + context
    # The safety margin covers what is uncertain in the allocation (activations, loss transients,
    # gathered buffers); resident weights, gradients and optimizer state are known to the byte
    # (ZeRO paper 16 B/param accounting), so margining them only rejects jobs that fit: the QLoRA
    # paper fine-tunes LLaMA-65B on one 48 GB card (arXiv:2305.14314). The margin and the
    # allocator slack of the reserved view are the same headroom (the seeds' 15-20 % stands for
    # fragmentation and spikes a formula leaves out), so the larger of the two counts, not their
    # sum: charging both rejected Answer.AI's FSDP-QLoRA 7B at micro-batch 10 on two 24 GB cards
    # (needed 27-28 GB by the sum; it ran at 20.97 GiB reserved, benchmarks_03_2024.md).
    states = parts.weights + parts.gradients + parts.optimizer
    margined = (allocated - states) * (1 + setup.margin) + context
    required = states + max(device - states, margined)
    return _Views(allocated, reserved, device, states, required)


def estimate(model: ModelSpec, setup: TrainingSetup, *, activation_scale: float = 1.0) -> MemoryEstimate:
    """The memory estimate for `model` under `setup` (per GPU).

    `activation_scale` rescales only the activations and the loss transient (and the allocator
    slack that follows them), e.g. to match a measured validation peak (activation_scale_for_peak);
    model states are known exactly and never scaled. The estimate depends on the job and its
    layout, not on the card, so a quote's hundreds of node shapes share a few dozen of them:
    results are memoised (MemoryEstimate is immutable, so callers share them safely).
    """
    if not (math.isfinite(activation_scale) and activation_scale >= 0):
        raise ValueError(f"activation_scale must be a finite number >= 0, got {activation_scale!r}")
    return _estimate(model, setup, activation_scale)


@lru_cache(maxsize=4096)
def _estimate(model: ModelSpec, setup: TrainingSetup, activation_scale: float) -> MemoryEstimate:
    parts = _breakdown(model, setup, activation_scale)
    v = _views(parts, setup)

    # The breakdown sums to the device view: activations include the logits/loss transient;
    # overhead is buffers + allocator slack + CUDA context.
    breakdown = MemoryBreakdown(
        weights=_r(parts.weights + parts.gathered
                   + max(0.0, parts.backward_gathered - parts.forward_peak)),
        gradients=_r(parts.gradients),
        optimizer=_r(parts.optimizer),
        activations=_r(parts.forward_peak),
        overhead=_r(parts.buffers + (v.device - v.allocated)),
    )
    notes = _assumptions(model, setup) + parts.notes
    if activation_scale != 1.0:
        notes.append(f"activations and loss transients scaled x{activation_scale:.2f} (from a measured peak); "
                     "model states are not scaled")
    return MemoryEstimate(
        model=model.name,
        params_b=round(model.total_params / 1e9, 3),
        trainable_params_b=round(trainable_params(model, setup) / 1e9, 4),
        peak_gb_per_gpu=_r(v.allocated),
        reserved_gb_per_gpu=_r(v.reserved),
        device_gb_per_gpu=_r(v.device),
        required_gb_per_gpu=_r(v.required),
        states_gb_per_gpu=_r(v.states),
        margin=setup.margin,
        breakdown_gb=breakdown,
        checkpoint_gb=_r(_checkpoint_bytes(model, setup)),
        model_files_gb=_r(model.total_params * 2),
        cpu_offload_gb=_r(parts.cpu_offload),
        assumptions=tuple(dict.fromkeys(notes)),
    )


# A measured peak above the card's label (GiB) by more than this cannot have come from that card.
MEASURED_OVER_CARD = 1.02


def activation_scale_for_peak(model: ModelSpec, setup: TrainingSetup, measured_peak_gb: float, *,
                              gpu: GpuSpec | None = None) -> float:
    """The activation scale that makes the estimate for `setup` (the exact layout the measurement
    ran on) show `measured_peak_gb` in the device view (what nvidia-smi reports, GB = 1e9 B).

    Only activations and loss transients are rescaled: weights, gradients and optimizer state are
    known exactly, so a measurement below them is a wrong measurement or a different layout, not a
    reason to shrink them. Raises InputError for a non-finite or non-positive value, one below the
    layout's fixed part, or one larger than `gpu` holds.

    >>> from rentopt.optimizer.models import ModelSpec, TrainingSetup
    >>> m = ModelSpec(name="x", layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008, vocab=32000)
    >>> s = TrainingSetup(mode="lora", seq_len=2048)
    >>> peak = estimate(m, s).device_gb_per_gpu
    >>> round(activation_scale_for_peak(m, s, peak), 2)
    1.0
    """
    if isinstance(measured_peak_gb, bool) or not isinstance(measured_peak_gb, (int, float)) \
            or not math.isfinite(measured_peak_gb) or measured_peak_gb <= 0:
        raise InputError(f"measured peak {measured_peak_gb!r} must be a positive number of GB (nvidia-smi's peak).")
    target = measured_peak_gb * GB
    if gpu is not None and measured_peak_gb > gpu.memory_gb * 2**30 / GB * MEASURED_OVER_CARD:
        raise InputError(f"measured peak {measured_peak_gb:g} GB is more than {gpu.id} holds "
                         f"({gpu.memory_gb:g} GB); give the peak of one GPU, in GB.")

    def device(scale: float) -> float:
        return _views(_breakdown(model, setup, scale), setup).device

    before_activations = _views(_breakdown(model, setup, 0.0), setup)
    floor = before_activations.device
    if target < floor - 0.005 * GB:
        states = before_activations.states
        raise InputError(
            f"measured peak {measured_peak_gb:g} GB is below the {floor / GB:.1f} GB that this layout needs before "
            f"any activation ({states / GB:.1f} GB of weights, gradients and optimizer state, known exactly, plus "
            f"buffers and CUDA context): it was measured on another layout or GPU (say which with --measured-on), "
            f"or it is not the device peak.")
    low, high = 0.0, 1.0
    while device(high) < target:
        high *= 2
        if high > 1e6:  # activations that cannot reach the peak: nothing to scale
            raise InputError(f"measured peak {measured_peak_gb:g} GB cannot come from this job's activations; "
                             "check the number and the layout it was measured on.")
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if device(mid) < target else (low, mid)
    return high


def _r(x: float) -> float:
    return round(x / GB, 2)


def _assumptions(model: ModelSpec, setup: TrainingSetup) -> list[str]:
    out = [f"precision {setup.precision}, optimizer {setup.optimizer}, seq_len {setup.seq_len}, "
           f"micro_batch {setup.micro_batch}"]
    if setup.trains:
        out.append("gradients counted as resident during forward (gradient accumulation)" if setup.grad_accumulation
                   else "no gradient accumulation: gradients exist only from backward on")
        if setup.fused_loss:
            out.append("fused linear cross-entropy: the logits exist one chunk at a time")
        else:
            out.append("chunked cross-entropy: fp32 log-softmax kept per chunk" if setup.chunked_loss else
                       "HF-style loss: 16-bit logits + fp32 up-cast, log-softmax and its gradient "
                       "(--chunked-loss or --fused-loss need less)")
    if setup.mode in ("lora", "qlora"):
        out.append(f"LoRA rank {setup.lora_rank} on {','.join(setup.lora_targets)}; dropout 0")
    if setup.mode == "qlora":
        out.append("NF4 base " + ("with" if setup.double_quant else "without") + " double quantisation; "
                   "embeddings, lm_head and norms stay 16-bit")
    out.append(f"reserved = allocated + {ALLOCATOR_SLACK:.0%} of the memory re-allocated each step; "
               f"device adds {CUDA_CONTEXT_GB} GB CUDA context" + (f" + {NCCL_BUFFERS_GB} GB NCCL" if setup.gpus > 1 else ""))
    if model.num_experts > 1:
        out.append(f"MoE: all {model.num_experts} experts resident; activations for {model.experts_per_token} per token")
    return out
