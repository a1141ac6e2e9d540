"""The seeds' feasibility rules, each guarded by a test that fails when the rule is broken.

Expected values are worked out here from the seeds and the GPUs' data sheets, not read back from
the program; tools/mutate.py breaks each rule and checks that one of these tests notices.
"""

from __future__ import annotations

import pytest

from rentopt.optimizer.feasibility import (
    Capabilities,
    Fit,
    NodeShape,
    NoFit,
    Pins,
    default_interconnect,
    find_layout,
    runtime_for,
    usable_gb,
)
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import ModelSpec, TrainingSetup
from rentopt.optimizer.workload import resolve_model

LLAMA7 = resolve_model("llama-2-7b")
LLAMA70 = resolve_model("llama-2-70b")


def two_nodes(fabric: str | None, gbps: float | None, gpu: str = "H100-SXM-80GB") -> NodeShape:
    return NodeShape(gpu=get_gpu(gpu), gpus_per_node=8, nodes=2, interconnect="nvlink", fabric=fabric,
                     fabric_gbps=gbps)


# --------------------------------------------------------------------------------------------
# Across nodes (seed 004: "跨机训练时，IB带宽至少200G起步": InfiniBand of at least 200G)


def test_plain_ethernet_is_refused_for_multi_node_training_however_fast():
    # 400 Gb/s Ethernet passes the speed rule, so only the fabric kind can refuse it: the seed
    # asks for InfiniBand (RoCE is RDMA over Ethernet, the same transport as IB verbs)
    found = find_layout(LLAMA70, TrainingSetup(mode="full"), two_nodes("ethernet", 400))
    assert isinstance(found, NoFit) and found.constraint == "fabric"
    assert "ethernet" in found.reason
    # the same nodes on RoCE at that speed train
    assert isinstance(find_layout(LLAMA70, TrainingSetup(mode="full"), two_nodes("roce", 400)), Fit)


def test_an_infiniband_fabric_of_unstated_speed_is_not_taken_as_200_gbps():
    found = find_layout(LLAMA70, TrainingSetup(mode="full"), two_nodes("infiniband", None))
    assert isinstance(found, NoFit) and found.constraint == "fabric"
    assert "unstated speed" in found.reason
    # 199 Gb/s is under the seed's 200, 200 is enough
    assert isinstance(find_layout(LLAMA70, TrainingSetup(mode="full"), two_nodes("infiniband", 199)), NoFit)
    assert isinstance(find_layout(LLAMA70, TrainingSetup(mode="full"), two_nodes("infiniband", 200)), Fit)


# --------------------------------------------------------------------------------------------
# Inside a node: tensor parallel only over NVLink (seed 002)


def test_an_unstated_interconnect_is_treated_as_pcie_not_nvlink():
    # Llama-2-70B inference: 2 x 68.98e9 params = 138 GB of bf16 weights, more than one 80 GB card,
    # so the two cards split it. Over NVLink that is tensor parallel; without a stated NVLink the
    # split must be a pipeline (layers), and the link is priced as PCIe.
    shape = NodeShape(gpu=get_gpu("H100-SXM-80GB"), gpus_per_node=2, interconnect="unknown")
    found = find_layout(LLAMA70, TrainingSetup(mode="inference"), shape)
    assert isinstance(found, Fit)
    assert found.layout.tensor_parallel == 1 and found.layout.pipeline_parallel == 2
    assert found.layout.link == "pcie"
    assert "interconnect not stated by the provider: treated as PCIe" in found.layout.plan_notes
    nvlink = find_layout(LLAMA70, TrainingSetup(mode="inference"),
                         NodeShape(gpu=get_gpu("H100-SXM-80GB"), gpus_per_node=2, interconnect="nvlink"))
    assert isinstance(nvlink, Fit) and nvlink.layout.tensor_parallel == 2


@pytest.mark.parametrize("gpu, expected", [
    ("H100-SXM-80GB", "nvlink"),  # HGX H100: SXM5 modules on NVSwitch (NVIDIA H100 datasheet)
    ("A100-SXM4-80GB", "nvlink"),
    ("MI300X-192GB", "nvlink"),  # OAM on AMD's xGMI (Infinity Fabric) mesh: the board's all-to-all fabric
    ("Gaudi2-96GB", "pcie"),  # OAM, but its scale-out is RoCE ports on the chip: no all-to-all GPU fabric
    ("Ascend-910B2-64GB", "pcie"),  # OAM; HCCS is not a fabric rentopt models as one
    ("A100-PCIe-80GB", "pcie"),
])
def test_only_sxm_and_oam_boards_with_a_gpu_fabric_are_assumed_to_have_one(gpu, expected):
    # the interconnect's name says NVLink for any all-to-all board fabric (models.GpuSpec.has_nvlink)
    assert default_interconnect(get_gpu(gpu)) == expected


def _model_with_heads(heads: int) -> ModelSpec:
    # 20 heads of 128: hidden 2560 (a 2.7B-class shape), small enough for any layout to fit
    return ModelSpec(name=f"h{heads}", layers=32, hidden=heads * 128, heads=heads, kv_heads=heads,
                     intermediate=4 * heads * 128, vocab=32000)


def test_tensor_parallel_sizes_divide_the_attention_heads():
    # Megatron splits attention by heads: 20 heads split over 2 or 4 GPUs (10, 5 each), never 8
    model = _model_with_heads(20)
    shape = NodeShape(gpu=get_gpu("H100-SXM-80GB"), gpus_per_node=8, interconnect="nvlink")
    for tp, fits in ((2, True), (4, True), (8, False)):
        found = find_layout(model, TrainingSetup(mode="full"), shape, pins=Pins(tensor_parallel=tp))
        assert isinstance(found, Fit) == fits, (tp, found)
        if fits:
            assert found.layout.tensor_parallel == tp and 20 % tp == 0


# --------------------------------------------------------------------------------------------
# The card's capabilities


@pytest.mark.parametrize("gpu", ["V100-SXM2-32GB", "T4-16GB", "Quadro-RTX-8000-48GB"])
def test_flash_attention_2_is_not_assumed_before_ampere(gpu):
    # FlashAttention-2 supports Ampere, Ada and Hopper (Dao-AILab/flash-attention README): a Volta
    # or Turing card runs PyTorch SDPA's memory-efficient kernel instead, and the plan says so
    spec = get_gpu(gpu)
    assert spec.architecture in ("Volta", "Turing")
    found = runtime_for(TrainingSetup(mode="lora"), spec)
    assert found.attention == "sdpa-mem-efficient"
    assert any("instead of FlashAttention-2" in n for n in found.notes)
    assert runtime_for(TrainingSetup(mode="lora"), get_gpu("A100-SXM4-80GB")).attention == "flash-attention-2"


def test_fp8_falls_back_to_fp16_not_bf16_on_a_card_without_bf16():
    # V100 (Volta) has neither FP8 nor BF16 tensor cores (NVIDIA V100 datasheet): fp8 asked for,
    # unpinned, runs fp16 mixed precision; an A100 (BF16, no FP8) runs bf16
    v100 = runtime_for(TrainingSetup(mode="full", precision="fp8"), get_gpu("V100-SXM2-32GB"))
    assert v100.setup.precision == "fp16-mixed"
    a100 = runtime_for(TrainingSetup(mode="full", precision="fp8"), get_gpu("A100-SXM4-80GB"))
    assert a100.setup.precision == "bf16-mixed"
    pinned = runtime_for(TrainingSetup(mode="full", precision="fp8"), get_gpu("V100-SXM2-32GB"),
                         Capabilities(precision_pinned=True))
    assert isinstance(pinned, NoFit) and pinned.constraint == "capability"


def test_a_two_die_card_gives_each_process_one_die_of_memory():
    # MI250X: 128 GB of HBM2e as two GCDs of 64 GB, each a device of its own (AMD MI250X data
    # sheet), so one process sees at most 64 GiB = 68.7 GB, less what the runtime keeps
    spec = get_gpu("MI250X-128GB")
    half = spec.memory_gb / 2 * 2**30 / 1e9  # 64 GiB in GB
    assert 0.9 * half < usable_gb(spec) <= half
    # Llama-2-7B full fine-tuning at 16 B/param needs ~114 GB per process: a whole card's 128 GB
    # would hold it, one GCD does not
    found = find_layout(LLAMA7, TrainingSetup(mode="full", grad_checkpointing=True),
                        NodeShape(gpu=spec, gpus_per_node=1), capabilities=Capabilities(allowed_stacks=frozenset(
                            {"cuda", "rocm"})), pins=Pins(offload="none"))
    assert isinstance(found, NoFit) and found.constraint == "memory"
