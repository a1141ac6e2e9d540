"""Pydantic types shared by every module: hardware, workloads, offers, memory, layouts and plans.

Conventions:
- Money is `Decimal` in the currency named next to it; never float.
- Memory is in GB = 1e9 bytes unless a name says GiB.
- An unknown price is `None`, never 0: a provider that sends 0 or null for a price means "we do
  not know", and treating that as free is the classic catalog bug (SkyPilot #3615).
"""

# No `from __future__ import annotations` here, unlike the other modules: pydantic reads every
# field's annotation when it builds a model, and postponed (string) annotations cost an eval each
# on every start-up (about 2 ms for this module's models, issue 25). A method naming its own class
# quotes it.

from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal, NamedTuple, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

# --------------------------------------------------------------------------------------------
# Hardware


GpuClass = Literal["datacenter", "workstation", "consumer"]
# The vendor software stack a card needs: kernels, wheels and collectives differ per stack.
SoftwareStack = Literal["cuda", "rocm", "gaudi", "ascend"]
HostArch = Literal["x86_64", "aarch64"]
# How well bitsandbytes (QLoRA's NF4 base, 8-bit optimizers) runs on the card's stack.
Bitsandbytes = Literal["supported", "limited", "unsupported"]


class GpuSpec(BaseModel):
    """One GPU model from `data/gpus.toml`. TFLOPS are dense (no 2:4 sparsity)."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    vendor: str
    architecture: str = ""
    gpu_class: GpuClass
    form_factor: str  # SXM, PCIe, OAM, ...
    memory_gb: float
    reported_memory_mib: int | None = None
    memory_bandwidth_gbps: float
    bf16_tflops: float | None  # None: no BF16 (T4, V100): use fp16_tflops
    fp16_tflops: float | None
    fp8_tflops: float | None = None
    fp32_tflops: float | None = None
    nvlink_gbps: float | None  # bidirectional per-GPU NVLink bandwidth; None = no NVLink
    scaleup_gbps: float | None = None  # any intra-node fabric (NVLink, Infinity Fabric, ...)
    p2p: str = "pcie"
    pcie_gen: int | None = None
    # GPU <-> host memory bandwidth per direction, GB/s, where it is not the PCIe slot's: Grace
    # superchips (GH200, GB200, GB300) reach host memory over NVLink-C2C, 900 GB/s bidirectional.
    host_link_gbps: float | None = None
    devices_per_card: int = 1
    max_gpus_per_node: int = 8
    aliases: tuple[str, ...] = ()
    ambiguous_aliases: tuple[str, ...] = ()
    # Ambiguous names this record is what a bare name means on a hand-written sheet or catalog
    # ("H100" -> the SXM card, as SkyPilot and gpuhunt read it); only with sheet_defaults=True.
    sheet_default_for: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    confidence: str = "high"
    notes: str = ""
    # What a job can run on the card (data/gpus.toml states every one of these for every record,
    # with its source; the catalog loader refuses a record that leaves one out):
    compute_capability: str | None = None  # NVIDIA "major.minor" (8.0 = A100); None off CUDA
    bf16: bool = True  # BF16 arithmetic (NVIDIA: Ampere, compute capability 8.0, and newer)
    fp8: bool = False  # FP8 tensor cores usable for training (Ada, Hopper, Blackwell, MI300, Gaudi2)
    flash_attention: int = 0  # newest FlashAttention generation with kernels for it: 0, 2 or 3
    stack: SoftwareStack = "cuda"
    host_arch: HostArch = "x86_64"  # the host CPU the card comes with (GH200: Grace, aarch64)
    bitsandbytes: Bitsandbytes = "supported"
    capability_notes: str = ""  # what the capability fields leave out (limits, versions)
    # What the card really does, from published measurements (data/gpus.toml states these for every
    # record; hardware.matmul_ceiling derives a card without a measurement from `mamf_relative`):
    power_w: float | None = None  # board power limit (TDP/TGP, W); None: not published
    # Maximum achievable matmul TFLOPS (MAMF): the best dense GEMM a published benchmark reached,
    # per input dtype (fp32 accumulate; fp16 only where it differs from bf16 or there is no bf16).
    mamf_bf16_tflops: float | None = None
    mamf_fp16_tflops: float | None = None
    mamf_fp8_tflops: float | None = None
    mamf_source: str = ""  # the benchmark behind the mamf_* figures
    mamf_relative: str | None = None  # unmeasured card: the measured card its ceiling derives from
    mamf_rule: Literal["efficiency", "power"] = "efficiency"  # how (hardware.matmul_ceiling)
    memory_bandwidth_measured_gbps: float | None = None  # achievable (stream/copy benchmark), where published
    memory_bandwidth_source: str = ""
    training_measured: bool = False  # a published, measured LLM training run exists on this card
    training_source: str = ""  # where (or, when False, what was looked at)
    # GPUs that share one NVLink domain: None = the node (HGX boards: 8); GB200/GB300 NVL72 = 72, so
    # a rack's 4-GPU trays talk over NVLink, not the node fabric.
    nvlink_domain_gpus: int | None = None

    @property
    def has_nvlink(self) -> bool:
        """An all-to-all GPU fabric on the board: NVLink, or AMD's Infinity Fabric (xGMI) mesh."""
        return bool(self.scaleup_link_gbps)

    @property
    def scaleup_link_gbps(self) -> float | None:
        """Per-GPU bandwidth of that fabric, GB/s bidirectional (NVLink's figure, or the xGMI mesh's)."""
        if self.nvlink_gbps:
            return self.nvlink_gbps
        return self.scaleup_gbps if self.vendor == "AMD" and self.form_factor == "OAM" else None

    @property
    def peer_to_peer_disabled(self) -> bool:
        """GeForce cards: no P2P over PCIe, so collectives bounce through host memory."""
        return self.gpu_class == "consumer" and not self.has_nvlink

    def dense_tflops(self, precision: str = "bf16") -> float:
        """Dense tensor throughput for training in `precision`; falls back bf16 -> fp16 -> fp32."""
        if precision == "fp8" and self.fp8_tflops:
            return self.fp8_tflops
        if precision.startswith("fp32"):
            return self.fp32_tflops or self.fp16_tflops or 0.0
        return self.bf16_tflops or self.fp16_tflops or self.fp32_tflops or 0.0


# "default": a bare name that several records share ("H100"), read as the variant the field means
# by it (hardware.normalise with sheet_defaults=True, for hand-written sheets and catalogs).
GpuMatchStatus = Literal["exact", "by_memory", "default", "ambiguous", "unknown"]


class GpuMatch(BaseModel):
    """Result of normalising a provider's GPU spelling. `gpu` is None unless the match is certain."""

    # built when a spelling is first matched: a quote of the bundled snapshot or the store matches none
    model_config = ConfigDict(frozen=True, defer_build=True)

    raw: str
    gpu: str | None
    status: GpuMatchStatus
    candidates: tuple[str, ...] = ()
    note: str = ""


# --------------------------------------------------------------------------------------------
# Models (architectures) and training setups


class ModelSpec(BaseModel):
    """A decoder (or encoder-decoder) architecture. Counts are exact where the source gives them."""

    model_config = ConfigDict(frozen=True)

    name: str
    family: str = ""
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int | None = None  # None: hidden // heads
    intermediate: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    mlp_gated: bool = True  # SwiGLU/GeGLU (gate, up, down) vs a plain two-matrix MLP
    qkv_bias: bool = False
    num_experts: int = 1
    experts_per_token: int = 1
    params: int | None = None  # total parameter count when the source states it
    # Context: the positions the model was trained for (config.json max_position_embeddings) and a
    # RoPE scaling factor the user configured on top of it (YaRN, linear, dynamic); None: none.
    max_positions: int | None = None
    rope_scaling: float | None = None
    source: str = ""
    notes: tuple[str, ...] = ()

    @property
    def dim_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.dim_head

    @property
    def q_dim(self) -> int:
        return self.heads * self.dim_head

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of each per-layer projection, keyed by LoRA target name.

        For MoE models gate/up/down are per expert.
        """
        h, f = self.hidden, self.intermediate
        shapes = {
            "q": (h, self.q_dim),
            "k": (h, self.kv_dim),
            "v": (h, self.kv_dim),
            "o": (self.q_dim, h),
            "up": (h, f),
            "down": (f, h),
        }
        if self.mlp_gated:
            shapes["gate"] = (h, f)
        return shapes

    @property
    def attention_params_per_layer(self) -> int:
        s = self.linear_shapes()
        n = sum(a * b for k, (a, b) in s.items() if k in ("q", "k", "v", "o"))
        if self.qkv_bias:
            n += self.q_dim + 2 * self.kv_dim
        return n

    @property
    def mlp_params_per_expert(self) -> int:
        s = self.linear_shapes()
        return sum(a * b for k, (a, b) in s.items() if k in ("gate", "up", "down"))

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def block_linear_params(self) -> int:
        """Parameters in the per-layer linear projections (what NF4/int8 quantisation converts)."""
        router = self.hidden * self.num_experts if self.num_experts > 1 else 0
        return self.layers * (
            self.attention_params_per_layer + self.num_experts * self.mlp_params_per_expert + router
        )

    @property
    def computed_params(self) -> int:
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.block_linear_params + self.embedding_params + self.lm_head_params + norms

    @property
    def total_params(self) -> int:
        return self.params or self.computed_params

    @property
    def active_params(self) -> int:
        """Parameters touched per token (MoE: only `experts_per_token` experts run)."""
        if self.num_experts <= 1:
            return self.total_params
        idle_experts = self.num_experts - self.experts_per_token
        return self.total_params - self.layers * idle_experts * self.mlp_params_per_expert

    @property
    def block_params(self) -> int:
        """Parameters of one decoder block (what FSDP wraps and gathers as a unit)."""
        return self.attention_params_per_layer + self.num_experts * self.mlp_params_per_expert + 2 * self.hidden

    @property
    def largest_layer_params(self) -> int:
        """Largest single module's own (non-recursive) parameters: the embedding or one projection.

        This is DeepSpeed's `largest_layer_params` in estimate_zero3_model_states_mem_needs.
        """
        return max(self.embedding_params, max(a * b for a, b in self.linear_shapes().values()))


Mode = Literal["full", "lora", "qlora", "inference"]
Precision = Literal["bf16-mixed", "bf16-true", "fp16-mixed", "fp32", "fp8"]
OptimizerName = Literal["adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "none"]
Offload = Literal["none", "optimizer", "all"]
# What gradient checkpointing recomputes: "full" reruns each layer's forward in backward (keeps
# only layer inputs); "selective" keeps the matmul outputs and reruns the cheap ops around them
# (PyTorch selective activation checkpointing as torchtitan runs it, Megatron-LM
# --recompute-granularity selective; Korthikanti et al. 2022, arXiv:2205.05198 §5).
Recompute = Literal["full", "selective"]
Quant = Literal["none", "nf4", "int8", "int4"]

LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down", "lm_head")
ALL_LINEAR = ("q", "k", "v", "o", "gate", "up", "down")

PRECISION_ALIASES = {"bf16": "bf16-mixed", "fp16": "fp16-mixed", "bf16-mixed": "bf16-mixed",
                     "bf16-true": "bf16-true", "fp16-mixed": "fp16-mixed", "fp32": "fp32",
                     "fp8": "fp8"}


class TrainingSetup(BaseModel):
    """Everything `rentopt estimate` needs besides the model. Defaults follow the seeds' advice."""

    model_config = ConfigDict(frozen=True)

    mode: Mode
    seq_len: int = Field(2048, gt=0)
    micro_batch: int = Field(1, gt=0)
    gpus: int = Field(1, gt=0)
    zero: int = Field(0, ge=0, le=3)
    fsdp: bool = False
    # FSDP that keeps a frozen LoRA base unsharded from its backward to the end of backward (FSDP
    # before the frozen-parameter reshard, pytorch/pytorch#95805; measured in LitGPT's 2023 tables).
    # Modern FSDP (FSDP2 fully_shard, torchtune, Accelerate with a separate wrap policy) reshards.
    fsdp_frozen_unsharded: bool = False
    offload: Offload = "none"
    # Gradient checkpointing: None = not given, so feasibility turns it on only where memory
    # needs it (the seeds' OOM ladder: smaller batch, then checkpointing, then more cards + ZeRO-3);
    # memory.estimate counts None as on. True/False pin it.
    grad_checkpointing: bool | None = None
    # FlashAttention (or another fused kernel that never stores the seq^2 scores); the seeds turn it on.
    flash_attention: bool = True
    lora_rank: int = Field(16, gt=0)
    lora_targets: tuple[str, ...] = ALL_LINEAR
    precision: Precision = "bf16-mixed"
    optimizer: OptimizerName = "adamw"
    optimizer_in_backward: bool = False
    # Gradient accumulation (the usual way to a useful batch at micro-batch 1): the previous
    # micro-steps' gradients are alive while the next forward runs. Off: one optimizer step per
    # micro-batch, so gradients only exist from backward on (torchtune's tables run so).
    grad_accumulation: bool = True
    tensor_parallel: int = Field(1, gt=0)
    pipeline_parallel: int = Field(1, gt=0)
    # Megatron-style layout knobs (Narayanan et al. 2021; Korthikanti et al. 2022; torchtitan,
    # arXiv:2410.06511): sequence parallel splits the norm/dropout activations over the TP group
    # (no extra traffic: the all-reduce becomes reduce-scatter + all-gather); context parallel
    # splits every sequence over `context_parallel` GPUs (ring attention); `virtual_stages` > 1 is
    # the interleaved 1F1B pipeline schedule (each GPU holds that many chunks of layers).
    sequence_parallel: bool = True
    context_parallel: int = Field(1, gt=0)
    virtual_stages: int = Field(1, gt=0)
    # Tokens per optimizer step over all GPUs (global batch x seq_len); None: the default in
    # timing.py. Only the pipeline bubble and the per-step work (optimizer, gradient reduce) read it.
    tokens_per_step: float | None = Field(None, gt=0)
    recompute: Recompute = "full"
    # Saved activations moved to host memory during forward and back for backward (torchtitan /
    # torchtune activation offloading, Megatron --cpu-offloading-activations).
    activation_offload: bool = False
    # torch.compile (or an equally fusing stack): elementwise kernels fused, fewer launches.
    compile: bool = False
    quant: Quant = "none"
    double_quant: bool = True
    # Chunked (torchtune CEWithChunkedOutputLoss) or fused (Liger, unsloth) cross-entropy: the
    # fp32 up-cast of the logits and its gradient are never materialised for the whole sequence.
    chunked_loss: bool = False
    # Fused linear cross-entropy (Liger, unsloth, cut cross-entropy): the logits never exist for
    # the whole batch, only one chunk at a time.
    fused_loss: bool = False
    # Seeds (002): leave 15-20 % headroom over the estimate.
    margin: float = Field(0.15, ge=0, le=1)

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_alias(cls, v: Any) -> Any:
        return PRECISION_ALIASES.get(v, v) if isinstance(v, str) else v

    @field_validator("lora_targets", mode="before")
    @classmethod
    def _targets(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [t.strip() for t in v.split(",") if t.strip()]
        out: list[str] = []
        for t in v:
            if t in ("all-linear", "all_linear", "all"):
                out.extend(ALL_LINEAR)
            elif t in LORA_TARGETS:
                out.append(t)
            else:
                raise ValueError(f"unknown LoRA target {t!r}; use {', '.join(LORA_TARGETS)} or all-linear")
        if not out:  # an empty --lora-targets would train 0 parameters
            raise ValueError(f"--lora-targets is empty; name at least one of {', '.join(LORA_TARGETS)}, or all-linear")
        return tuple(dict.fromkeys(out))

    @model_validator(mode="after")
    def _consistent(self) -> "TrainingSetup":
        if self.mode == "qlora" and self.precision == "fp32":
            raise ValueError("qlora keeps a 4-bit base with 16-bit compute; fp32 precision does not apply")
        if self.zero and self.fsdp:
            raise ValueError("choose either --zero N or --fsdp, not both")
        parallel = self.tensor_parallel * self.pipeline_parallel * self.context_parallel
        if self.gpus % parallel:
            raise ValueError(f"--gpus {self.gpus} is not a multiple of tensor x pipeline x context parallel "
                             f"= {parallel}")
        if self.seq_len % self.context_parallel:
            raise ValueError(f"--seq-len {self.seq_len} does not split evenly over --context-parallel "
                             f"{self.context_parallel}")
        if self.virtual_stages > 1 and self.pipeline_parallel == 1:
            raise ValueError("--virtual-stages (interleaved pipeline) needs --pipeline-parallel > 1")
        if self.mode != "inference" and self.quant != "none" and self.mode != "qlora":
            raise ValueError("--quant applies to inference; use --mode qlora for a 4-bit base in training")
        return self

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel * self.context_parallel)

    @property
    def trains(self) -> bool:
        return self.mode != "inference"


class MemoryBreakdown(BaseModel):
    """Per-GPU GB by component (allocated view)."""

    model_config = ConfigDict(frozen=True)

    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float


class MemoryEstimate(BaseModel):
    """The `rentopt estimate --format json` contract; extend, never rename.

    Immutable: memory.estimate memoises estimates and hands the same object to every caller.
    """

    model_config = ConfigDict(frozen=True)

    model: str
    params_b: float
    trainable_params_b: float
    peak_gb_per_gpu: float  # torch.cuda.max_memory_allocated, GB = 1e9 B
    reserved_gb_per_gpu: float  # what the caching allocator holds
    device_gb_per_gpu: float  # what nvidia-smi shows (+ CUDA context)
    required_gb_per_gpu: float  # device view + safety margin on its uncertain part: the feasibility threshold
    states_gb_per_gpu: float = 0.0  # resident weights + gradients + optimizer state: exact, never margined
    margin: float
    breakdown_gb: MemoryBreakdown
    checkpoint_gb: float  # one resumable checkpoint on disk
    model_files_gb: float  # the base model's weights on disk (for sizing the instance disk)
    cpu_offload_gb: float = 0.0  # host RAM the offloaded state needs
    assumptions: tuple[str, ...] = ()


# --------------------------------------------------------------------------------------------
# Offers


class PriceUnit(StrEnum):
    HOUR = "hour"
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    TERM = "term"  # a reserved/committed term: `amount` is the total for `term_hours`


UNIT_HOURS: dict[PriceUnit, int] = {PriceUnit.HOUR: 1, PriceUnit.DAY: 24, PriceUnit.WEEK: 168}


class PriceOption(BaseModel):
    """One way to pay for an offer. `amount` is per unit for the whole node (all its GPUs)."""

    model_config = ConfigDict(frozen=True)

    unit: PriceUnit
    amount: Decimal = Field(gt=0)
    term_hours: int | None = Field(None, gt=0)
    interruptible: bool = False
    label: str = ""

    @model_validator(mode="after")
    def _term(self) -> "PriceOption":
        if self.unit == PriceUnit.TERM and not self.term_hours:
            raise ValueError("a reserved term needs term_hours")
        return self


Interconnect = Literal["nvlink", "pcie", "unknown"]
# How a price's date is known (the date its publisher read it, never the day rentopt read it):
# "published": the source says it (a catalog folder named YYYY-MM-DD, the git commit of the
# file's last change, an HTTP Last-Modified, a live API read now, a sheet's `read_on`);
# "file-time": only the file's modification time, which a copy resets (every output says
# "dated by file time"); "unknown": nothing says it (every output says "date unknown"), and
# `fetched_at` holds UNKNOWN_DATE, older than any real date, so an unknown date never passes
# for a fresh one.
DateBasis = Literal["published", "file-time", "unknown"]
UNKNOWN_DATE = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The serialization context under which an Offer's JSON writes an unknown date as null: offers
# files (`rentopt offers --format json`), where a script reads the date. The store and snapshot
# files keep UNKNOWN_DATE beside `dated_by` (their readers predate null).
OFFERS_FILE = "offers_file"
_DATE_TEXT = TypeAdapter(datetime)
# Which dating wins when two sets of prices of one provider meet: a stronger basis, then the
# newer date. An import never replaces prices of a stronger basis, or of a newer date.
DATE_STRENGTH: dict[str, int] = {"unknown": 0, "file-time": 1, "published": 2}


def date_rank(dated_by: str | None, when: datetime | None) -> tuple[int, datetime]:
    """Sort key of a dated set of prices (see DATE_STRENGTH)."""
    return (DATE_STRENGTH.get(dated_by or "published", 2), when or UNKNOWN_DATE)


def age_words(then: datetime, now: datetime) -> str:
    """How old, in words, for sentences and reports.

    >>> t = datetime(2026, 11, 1, tzinfo=timezone.utc)
    >>> age_words(t, datetime(2026, 11, 1, 0, 30, tzinfo=timezone.utc)), age_words(t, datetime(2026, 11, 3, 6, tzinfo=timezone.utc))
    ('under 1 h', '2 days')
    """
    hours = (now - then).total_seconds() / 3600
    if hours < 1:
        return "under 1 h"
    if hours < 48:
        return f"{hours:.0f} h"
    return f"{hours / 24:.0f} days"


def date_words(when: datetime | None, dated_by: str | None, now: datetime | None = None, *, age: bool = True) -> str:
    """ "2026-05-20, 196 days old", "2026-12-03 (dated by file time), under 1 h old", "date unknown".

    >>> t = datetime(2026, 5, 20, tzinfo=timezone.utc)
    >>> date_words(t, "published", datetime(2026, 5, 22, tzinfo=timezone.utc))
    '2026-05-20, 2 days old'
    >>> date_words(t, "file-time", age=False), date_words(UNKNOWN_DATE, "unknown")
    ('2026-05-20 (dated by file time)', 'date unknown')
    """
    if when is None or dated_by == "unknown":
        return "date unknown"
    text = f"{when:%Y-%m-%d}" + (" (dated by file time)" if dated_by == "file-time" else "")
    return f"{text}, {age_words(when, now or datetime.now(timezone.utc))} old" if age else text
Fabric = Literal["infiniband", "roce", "ethernet"]
Origin = Literal["store", "bundled", "sheet", "offers-file"]  # an offer set's: "sheet" when only the user's own sheets
PriceOrigin = Literal["store", "bundled", "sheet", "offers-file"]  # one provider's: a user's sheet too
# What a STOPPED instance keeps paying for (the platform's stop rule, owned by billing.py):
# "storage" - compute stops, the disk keeps billing (Vast, RunPod, AutoDL: the seeds' "Stop
# keeps charging for disk, only Destroy stops all billing"); "everything" - a rented node keeps
# billing in full while stopped (JYGPU's monthly nodes); "nothing" - stopping is free.
StoppedBills = Literal["storage", "everything", "nothing"]


class Offer(BaseModel):
    """A normalised offer: one rentable node type at one provider."""

    provider: str
    offer_id: str
    gpu: str | None  # canonical id from hardware.normalise; None when unknown or ambiguous
    gpu_raw: str
    gpu_status: GpuMatchStatus = "exact"
    gpus: int = Field(gt=0)  # GPUs per node
    gpu_memory_gb: float = Field(gt=0)
    interconnect: Interconnect = "unknown"
    interconnect_gbps: float | None = None
    fabric: Fabric | None = None  # between nodes, for multi-node offers
    fabric_gbps: float | None = None
    nodes_available: int = Field(1, ge=1)
    region: str | None = None
    spot: bool = False  # every price option is interruptible
    price_options: list[PriceOption] = Field(min_length=1)
    storage_gb_month: Decimal | None = Field(None, ge=0)  # while running
    storage_stopped_gb_month: Decimal | None = Field(None, ge=0)  # None: same as running
    egress_gb: Decimal | None = Field(None, ge=0)
    ingress_gb: Decimal | None = Field(None, ge=0)
    net_up_mbps: float | None = None
    net_down_mbps: float | None = None
    host_ram_gb: float | None = None  # CPU RAM of the node (what CPU offload can use)
    billing_granularity_s: int = Field(1, gt=0)
    billing_minimum_s: int = Field(0, ge=0)
    month_hours: int = Field(730, gt=0)  # hours in the provider's "month" (storage GB-month, monthly unit)
    stopped_bills: StoppedBills = "storage"  # what a stopped instance keeps paying for
    stopped_max_days: float | None = Field(None, gt=0)  # a stopped instance is released (wiped) after
    free_disk_gb: float = Field(0.0, ge=0)  # disk included in the compute price (billed only above it)
    price_locked: bool = False  # price fixed at order time until destroy (NexGPU)
    max_duration_hours: float | None = Field(None, gt=0)
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    fetched_at: datetime  # an offers file's null (unknown) reads as UNKNOWN_DATE: _no_date
    source: str
    dated_by: DateBasis = "published"  # how fetched_at is known (DateBasis)
    extra: dict[str, Any] = {}

    @field_validator("fetched_at", mode="wrap")
    @classmethod
    def _no_date(cls, v: Any, read: Any) -> datetime:
        """`"fetched_at": null` is how an offers file writes an unknown date: UNKNOWN_DATE, and
        `dated_by` "unknown" (below). A JSON text is read as pydantic reads a datetime from JSON
        (the text reaches this validator as a Python str, which strict validation would refuse)."""
        if v is None:
            return UNKNOWN_DATE
        if isinstance(v, str):
            try:
                v = _DATE_TEXT.validate_strings(v, strict=True)
            except ValidationError as exc:
                raise ValueError(exc.errors()[0].get("msg", "not a date and time")) from None
        return read(v)

    @field_validator("fetched_at")
    @classmethod
    def _aware(cls, v: datetime) -> datetime:
        if v.tzinfo is None:
            raise ValueError("fetched_at must carry a timezone")
        return v

    @model_validator(mode="after")
    def _spot(self) -> "Offer":
        if self.spot and any(not p.interruptible for p in self.price_options):
            raise ValueError("a spot offer has only interruptible price options")
        if self.dated_by == "unknown" and self.fetched_at != UNKNOWN_DATE:
            self.fetched_at = UNKNOWN_DATE  # no date at all, never the day it was read
        elif self.fetched_at == UNKNOWN_DATE and self.dated_by != "unknown":
            # UNKNOWN_DATE is rentopt's own mark of an unknown date (files written before offers
            # files said "unknown"): no price was read at the epoch's first second
            self.dated_by = "unknown"
        return self

    @field_serializer("fetched_at", mode="wrap", when_used="json")
    def _date_out(self, when: datetime, write: Any, info: Any) -> Any:
        """In an offers file (context OFFERS_FILE), an unknown date is written as null."""
        if self.dated_by == "unknown" and info.context and info.context.get(OFFERS_FILE):
            return None
        return write(when)

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.offer_id)

    @property
    def stopped_storage_price(self) -> Decimal | None:
        return self.storage_stopped_gb_month if self.storage_stopped_gb_month is not None else self.storage_gb_month

    def options(self, interruptible: bool) -> list[PriceOption]:
        return [p for p in self.price_options if p.interruptible == interruptible]


# The reference hourly price: here, beside Offer, so that the store (which filters and keeps
# price history by it) and the offers files both import it from below them.


def hour_price(offer: Offer) -> Decimal | None:
    """The offer's reference price per node-hour, for listing, filtering and price history.

    It is the price of one hour at the finest unit the offer sells: its hourly price if it has
    one, else its daily price / 24, else weekly / 168, monthly / the provider's month, and a
    reserved term only when there is nothing else. Only options of the offer's own kind count
    (interruptible ones for a spot offer, on-demand ones otherwise). A monthly rate is not what
    an hour costs, so it never undercuts an hourly price here; what a whole job is billed is
    billing.py's business, not this.

    >>> o = Offer(provider="p", offer_id="1", gpu=None, gpu_raw="x", gpus=2, gpu_memory_gb=24,
    ...           currency="USD", source="s", fetched_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
    ...           price_options=[PriceOption(unit="hour", amount=Decimal("1.10")),
    ...                          PriceOption(unit="month", amount=Decimal("500")),
    ...                          PriceOption(unit="hour", amount=Decimal("0.40"), interruptible=True)])
    >>> hour_price(o)
    Decimal('1.10')
    >>> hour_price(o.model_copy(update={"price_options": o.price_options[1:2]}))
    Decimal('0.6849315068493150684931506849')
    """
    own = offer.options(interruptible=offer.spot) or offer.price_options
    for unit in UNIT_ORDER:
        rates = [p.amount / _unit_hours(offer, p) for p in own if p.unit == unit]
        if rates:
            return min(rates)
    return None


@dataclass(frozen=True)
class OfferQuery:
    """Which offers to load. Applied in SQL by the store (store.query_where) and in Python (`matches`) elsewhere.

    `max_hour_price` is per node-hour in the offer's own currency (see `hour_price`).
    """

    providers: tuple[str, ...] | None = None
    gpus: tuple[str, ...] | None = None  # canonical GPU ids; an offer with an unknown GPU never matches
    min_gpus: int | None = None
    min_gpu_memory_gb: float | None = None
    spot: bool | None = None
    region: str | None = None  # case-insensitive substring of the offer's region
    currency: str | None = None
    max_hour_price: Decimal | None = None

    def matches(self, offer: Offer) -> bool:
        if self.providers is not None and offer.provider not in self.providers:
            return False
        if self.gpus is not None and offer.gpu not in self.gpus:
            return False
        if self.min_gpus is not None and offer.gpus < self.min_gpus:
            return False
        if self.min_gpu_memory_gb is not None and offer.gpu_memory_gb < self.min_gpu_memory_gb:
            return False
        if self.spot is not None and offer.spot != self.spot:
            return False
        if self.region is not None and self.region.lower() not in (offer.region or "").lower():
            return False
        if self.currency is not None and offer.currency != self.currency:
            return False
        if self.max_hour_price is not None:
            price = hour_price(offer)
            if price is None or price > self.max_hour_price:
                return False
        return True


# Finest first: the order in which `hour_price` looks for a price.
UNIT_ORDER = (PriceUnit.HOUR, PriceUnit.DAY, PriceUnit.WEEK, PriceUnit.MONTH, PriceUnit.TERM)


def _unit_hours(offer: Offer, option: PriceOption) -> int:
    if option.unit == PriceUnit.TERM:
        return option.term_hours or 1  # PriceOption guarantees term_hours for a term
    if option.unit == PriceUnit.MONTH:
        return offer.month_hours
    return UNIT_HOURS[option.unit]


class PlanRow(NamedTuple):
    """What the planner's first, rough pass needs of an offer, in plain numbers.

    The store keeps one per offer, so a 100,000-offer quote can rank offers without decoding
    them; only the few that survive the planner's dominance pass are loaded as full Offers.
    Prices here are floats in the offer's currency and only ever rank offers: every amount a
    plan bills comes from the full Offer's Decimals. None means unknown.
    """

    provider: str
    offer_id: str
    gpu: str | None
    gpu_raw: str
    gpu_status: str
    gpus: int
    gpu_memory_gb: float
    interconnect: str
    fabric: str | None
    fabric_gbps: float | None
    nodes_available: int
    host_ram_gb: float | None
    spot: bool
    currency: str
    hourly: float | None  # cheapest on-demand hourly price
    hourly_spot: float | None  # cheapest interruptible hourly price
    blocks: bool  # on-demand prepaid units (day/week/month/term) exist
    blocks_spot: bool
    storage_gb_month: float | None
    storage_stopped_gb_month: float | None
    egress_gb: float | None
    ingress_gb: float | None
    net_up_mbps: float | None
    net_down_mbps: float | None
    billing_granularity_s: int
    billing_minimum_s: int
    month_hours: int
    max_duration_hours: float | None
    fetched_at: str  # ISO 8601
    # Added after the first stores were written: defaults keep their stored rows readable.
    stopped_bills: str = "storage"
    stopped_max_days: float | None = None
    free_disk_gb: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.offer_id)


def plan_row(o: Offer) -> PlanRow:
    """The planning row of an offer (see PlanRow). Written for speed: the store builds one per
    offer written (50,000 in a large refresh)."""
    hourly = hourly_spot = None
    blocks = blocks_spot = False
    for p in o.price_options:
        if p.unit is PriceUnit.HOUR:
            amount = float(p.amount)
            if p.interruptible:
                if hourly_spot is None or amount < hourly_spot:
                    hourly_spot = amount
            elif hourly is None or amount < hourly:
                hourly = amount
        elif p.interruptible:
            blocks_spot = True
        else:
            blocks = True
    storage, stopped = o.storage_gb_month, o.stopped_storage_price
    egress, ingress = o.egress_gb, o.ingress_gb
    return PlanRow(
        o.provider, o.offer_id, o.gpu, o.gpu_raw, o.gpu_status, o.gpus, o.gpu_memory_gb, o.interconnect,
        o.fabric, o.fabric_gbps, o.nodes_available, o.host_ram_gb, o.spot, o.currency, hourly, hourly_spot,
        blocks, blocks_spot, None if storage is None else float(storage), None if stopped is None else float(stopped),
        None if egress is None else float(egress), None if ingress is None else float(ingress), o.net_up_mbps,
        o.net_down_mbps, o.billing_granularity_s, o.billing_minimum_s, o.month_hours, o.max_duration_hours,
        _utc_text(o.fetched_at), o.stopped_bills, o.stopped_max_days, o.free_disk_gb,
    )


@lru_cache(maxsize=64)
def _utc_text(when: datetime) -> str:
    """ISO 8601 in UTC; a snapshot's offers share one fetched_at, so this is cached."""
    return when.astimezone(timezone.utc).isoformat()


# --------------------------------------------------------------------------------------------
# Feasibility


class Layout(BaseModel):
    """How a job is laid out on an offer's GPUs, and what that costs in speed."""

    gpu: str
    gpus_per_node: int
    nodes: int = 1
    strategy: str  # human name: "single", "ddp", "zero2", "fsdp", "tp4", "tp8+pp2", "zero3+offload"
    zero: int = 0
    fsdp: bool = False
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_parallel: int = 1
    sequence_parallel: bool = False  # with tensor_parallel > 1 (TrainingSetup.sequence_parallel)
    virtual_stages: int = 1  # interleaved 1F1B when > 1
    offload: Offload = "none"
    micro_batch: int = 1
    grad_checkpointing: bool = True  # activation recomputation on (costs one more forward)
    recompute: Recompute = "full"  # what checkpointing reruns, when it is on
    activation_offload: bool = False
    compile: bool = False
    precision: str = "bf16-mixed"  # what actually runs on this GPU (TrainingSetup.precision values)
    attention: str = "flash-attention-2"  # the attention kernel that runs: flash-attention-2|3, sdpa, eager
    # How the GPUs talk, for the communication cost of the parallel layout (timing.py):
    # inside a node NVLink, PCIe with peer-to-peer, or PCIe without P2P (GeForce cards: traffic
    # bounces through host memory); between nodes the fabric's Gb/s (None: one node).
    # "infinity-fabric": AMD's OAM boards (MI250X/MI300X/MI325X), the same all-to-all role as NVLink
    link: Literal["nvlink", "infinity-fabric", "pcie", "pcie-no-p2p"] = "pcie"
    link_gbps: float | None = None  # per-GPU intra-node bandwidth, GB/s (NVLink bidirectional; PCIe per direction)
    fabric_gbps: float | None = None
    required_gb_per_gpu: float
    gpu_memory_gb: float
    notes: list[str] = []  # everything the layout assumes (memory model included)
    plan_notes: list[str] = []  # what a plan on it must tell the user: variants, unstated node facts

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def data_parallel(self) -> int:
        return self.total_gpus // (self.tensor_parallel * self.pipeline_parallel * self.context_parallel)


RejectReason = Literal[
    "memory", "capability", "interconnect", "fabric", "gpu", "price", "availability", "max_duration",
    "deadline", "budget", "currency", "dominated", "suspect",
]
REJECT_REASONS = frozenset(get_args(RejectReason))


@dataclass(frozen=True, slots=True)
class Rejection:
    """An offer a quote set aside, and why. A plain dataclass, not a model: a large quote lists
    hundreds of thousands, smaller and built without validation (pydantic serializes it like a
    model). The planner names `constraint` only from RejectReason (candidates.Rejections.add
    checks)."""

    provider: str
    offer_id: str
    gpu: str
    constraint: RejectReason
    reason: str  # states the number that failed: "needs 41.2 GB per GPU, A10G has 24"


# --------------------------------------------------------------------------------------------
# Plans (the `rentopt quote --format json` contract)

StageKind = Literal["validate", "idle", "train", "export"]


class BillingLine(BaseModel):
    unit: str  # hour, day, week, month, a term label, GB-month, GB
    count: Decimal
    unit_price: Decimal | None  # None: the provider does not publish this price
    cost: Decimal | None  # None: unknown, so not in the total (never 0)
    what: str = "compute"  # compute, storage_running, storage_stopped, egress, ingress
    note: str = ""


class PlanStage(BaseModel):
    kind: StageKind
    provider: str
    offer_id: str
    gpu: str
    gpus: int
    nodes: int = 1
    layout: str
    hours: Decimal
    billing: list[BillingLine]
    cost: Decimal  # the known part; `unknown_charges` lists the rest
    unknown_charges: list[str] = []
    precision: str | None = None  # what actually runs on this stage's GPUs (running stages)
    attention: str | None = None
    link: str | None = None  # how the GPUs talk inside a node (nvlink, pcie, pcie-no-p2p); running stages
    notes: list[str] = []
    # the provider's other offers equal to this one in every planning column (zones, listings):
    # the same plan at the same price on any of them (the offers' order)
    same_price_offers: list[str] = []


class LineItems(BaseModel):
    """A plan's cost per kind; None (JSON null) when any part of that kind has no known price:
    the plan lists it under unknown_charges, and it is never counted as 0."""

    compute: Decimal | None = Decimal(0)
    storage_running: Decimal | None = Decimal(0)
    storage_stopped: Decimal | None = Decimal(0)
    egress: Decimal | None = Decimal(0)
    ingress: Decimal | None = Decimal(0)


class PriceSource(BaseModel):
    """Where one provider's prices in a quote come from."""

    provider: str
    source: str
    fetched_at: datetime | None
    origin: PriceOrigin
    stale: bool = False
    dated_by: DateBasis = "published"  # "unknown": fetched_at is null
    line: str = ""  # the same in one sentence: "gcp: SkyPilot catalog of 2026-05-20; from the bundled snapshot, 195 days old"


class FxRate(BaseModel):
    currency: str
    per_usd: Decimal  # units of `currency` per 1 USD
    as_of: str
    source: str


class TokenRate(BaseModel):
    """Tokens per second of the whole training stage (all GPUs, all nodes): the speed model's range."""

    low: float
    typical: float
    high: float


class Work(BaseModel):
    """What every plan of a quote does. `tokens` None: a fixed rental period (each plan's own)."""

    tokens: float | None
    basis: str  # "--tokens", or the reference sentence ("10 days on 1 x A100-SXM-80GB = 1.93 B tokens")
    deadline_hours: Decimal | None = None


class Plan(BaseModel):
    rank: int
    total: Decimal  # known charges; `unknown_charges` lists what is not in it
    currency: str
    stages: list[PlanStage]
    line_items: LineItems
    unknown_charges: list[str] = []
    idle: Literal["stop", "destroy", "continue"] | None = None
    idle_alternative: str | None = None  # the idle choice not taken, when unknown prices decided it
    hours: Decimal | None = None  # wall clock, typical: validation + gap + training
    hours_low: Decimal | None = None  # wall clock at the fast / slow end of the speed range
    hours_high: Decimal | None = None
    total_low: Decimal | None = None  # the same plan priced at those ends
    total_high: Decimal | None = None
    tokens: Decimal | None = None
    tokens_per_second: TokenRate | None = None
    cost_per_billion_tokens: Decimal | None = None
    scaling_efficiency: float | None = None
    prices: list[PriceSource] = []
    notes: list[str] = []
    # The notes that can change the choice (advice on how to pay, unstated offer facts, warnings),
    # a subset of `notes`, in order; the rest explains how the plan was worked out.
    key_notes: list[str] = []


class Quote(BaseModel):
    currency: str
    prices_as_of: datetime | None
    price_origin: Origin
    work: Work | None = None
    fx: list[FxRate] = []
    plans: list[Plan]
    rejected: list[Rejection] = []
    rejected_count: int = 0  # len(rejected) when listed; the count alone otherwise
    memory: MemoryEstimate | None = None
    assumptions: list[str] = []
    sources: list[PriceSource] = []  # every provider the quote read, with where its prices come from
    missing_providers: list[str] = []  # requested providers with no prices, each with the fix
    source_notes: list[str] = []  # stale providers, sheets that could not be read, ...
