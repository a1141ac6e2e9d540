"""The layouts large runs use, worked by hand: FSDP + tensor parallel with sequence parallel (2D),
pipeline parallel with its bubble (1F1B and interleaved), and context parallel (ring attention).

Every expected number is computed here from the architecture (Llama-2-7B, Llama-3.1-8B
config.json) and published link speeds, not read back from the program: H100 SXM NVLink 4 is
900 GB/s bidirectional = 450 GB/s each way (NVIDIA H100 datasheet), of which NCCL's ring reaches
~0.75 (nccl-tests all_reduce busbw on DGX systems, ~230 of 300 GB/s on A100's NVLink 3).
"""

from __future__ import annotations

import pytest

from rentopt.optimizer.feasibility import Fit, NodeShape, Pins, find_layout
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.timing import pipeline_bubble, step_time
from rentopt.optimizer.workload import resolve_model

LLAMA7 = resolve_model("llama-2-7b")  # 32 layers, hidden 4096, 32 heads (MHA), MLP 11008, vocab 32000
LLAMA8 = resolve_model("llama-3.1-8b")  # 32 layers, hidden 4096, 32 heads, 8 KV heads (kv_dim 1024), MLP 14336
H100 = get_gpu("H100-SXM-80GB")
NCCL_BW = 450e9 * 0.75  # bytes/s one way inside an H100 NVLink node


def fitted(model, setup: TrainingSetup, gpus: int, pins: Pins, nodes: int = 1):
    shape = NodeShape(gpu=H100, gpus_per_node=gpus // nodes, nodes=nodes, interconnect="nvlink",
                      fabric="infiniband" if nodes > 1 else None, fabric_gbps=3200.0 if nodes > 1 else None)
    fit = find_layout(model, setup, shape, pins=pins)
    assert isinstance(fit, Fit), fit
    return fit


# --- 2D: FSDP + TP + SP ---------------------------------------------------------------------------


def test_fsdp_tp_sp_memory_by_hand():
    """Llama-2-7B full fine-tune on 8 x H100 as FSDP (dp 4) x TP 2 with sequence parallel, full
    checkpointing, seq 2048, micro-batch 1."""
    setup = TrainingSetup(mode="full", gpus=8, fsdp=True, tensor_parallel=2, grad_checkpointing=True)
    est = estimate(LLAMA7, setup)
    P = 6_738_415_616
    # optimizer: fp32 master + two fp32 moments = 12 B per parameter, split by TP (2) and FSDP (4)
    assert est.breakdown_gb.optimizer == pytest.approx(P * 12 / 8 / 1e9, abs=0.005)
    # gradients: 16-bit, split by TP and sharded by FSDP
    assert est.breakdown_gb.gradients == pytest.approx(P * 2 / 8 / 1e9, abs=0.005)
    # activations: 32 layer inputs of 2048 x 4096 bf16 split over TP by SP = 268,435,456 B;
    # one layer rebuilt: per token 4h/2 (norms, SP) + (2 q + 2 kv + 4 f)/2 = 8192 + 30208 = 38400
    # elements x 2 B x 2048 = 157,286,400 B plus FlashAttention's fp32 LSE for 16 heads x 2048
    # = 131,072 B; the loss path holds 2048 x 32000 logits x (2 + 12) B over TP 2 = 458,752,000 B.
    # The rebuilt layer exists only in backward, after the loss is freed: the larger of the two.
    inputs = 32 * 2048 * 4096 * 2 / 2
    one_layer = (4 * 4096 / 2 + (2 * 4096 + 2 * 4096 + 4 * 11008) / 2) * 2 * 2048 + 4 * 16 * 2048
    logits = 2048 * 32000 * 14 / 2
    assert est.breakdown_gb.activations == pytest.approx((inputs + max(one_layer, logits)) / 1e9, abs=0.005)


def test_sequence_parallel_splits_the_norm_activations():
    """Without SP the layer inputs (2 x 2048 x 4096 B each) and the 4h norm tensors stay whole
    on every TP rank (Korthikanti et al. 2022 Table 2: 10 + 24/t versus 34/t). The norm tensors
    live in the one rebuilt layer, which here stays under the loss transient (its 458,752,000 B
    against 190,971,904 B without SP), so the 32 layer inputs are the whole difference."""
    base = dict(mode="full", gpus=8, fsdp=True, tensor_parallel=2, grad_checkpointing=True)
    with_sp = estimate(LLAMA7, TrainingSetup(**base)).breakdown_gb.activations
    without = estimate(LLAMA7, TrainingSetup(**base, sequence_parallel=False)).breakdown_gb.activations
    extra = 32 * 2048 * 4096 * 2 / 2
    assert without - with_sp == pytest.approx(extra / 1e9, abs=0.01)
    # without checkpointing every layer keeps its 4h norm tensors: half of them per TP rank with
    # SP, all of them without: 32 x (4 x 4096 / 2) x 2 B x 2048 more
    base["grad_checkpointing"] = False
    with_sp = estimate(LLAMA7, TrainingSetup(**base)).breakdown_gb.activations
    without = estimate(LLAMA7, TrainingSetup(**base, sequence_parallel=False)).breakdown_gb.activations
    assert without - with_sp == pytest.approx(32 * (4 * 4096 / 2) * 2 * 2048 / 1e9, abs=0.01)


def test_fsdp_tp_is_found_and_priced_by_hand():
    """Pinned --fsdp --tensor-parallel 2 on one 8 x H100 node gives the 2D layout. Its exposed
    tensor-parallel traffic: per layer 2 all-reduces forward, 2 backward, 2 in the recomputed
    forward, each of a 2048 x 4096 bf16 activation (16,777,216 B); a ring all-reduce over 2 GPUs
    sends 2 x (2-1)/2 of it. Its FSDP traffic per micro-batch: all-gather the bf16 weights twice
    (forward, backward) and reduce-scatter bf16 gradients, each 2 B x P/2 (TP half) over a group
    of 4: (4-1)/4 of it on the wire."""
    setup = TrainingSetup(mode="full", gpus=8, grad_checkpointing=True)
    fit = fitted(LLAMA7, setup, 8, Pins(fsdp=True, tensor_parallel=2))
    lay = fit.layout
    assert (lay.strategy, lay.tensor_parallel, lay.data_parallel, lay.fsdp, lay.sequence_parallel) == \
        ("tp2+fsdp", 2, 4, True, True)
    st = step_time(LLAMA7, setup, lay, H100)
    act = 2048 * 4096 * 2
    tp_seconds = 32 * 6 * (2 * act * 1 / 2) / NCCL_BW
    assert st.comm_exposed == pytest.approx(tp_seconds, rel=1e-9)
    P = 6_738_415_616
    per_collective = 2 * P / 2 * 3 / 4 / NCCL_BW
    assert st.comm_hidden_or_not == pytest.approx(3 * per_collective, rel=1e-9)


# --- pipeline parallel -------------------------------------------------------------------------


def test_pipeline_bubble_by_hand():
    # 1F1B with p stages and m micro-batches per step idles (p-1) of m+p-1 slots: factor 1 + (p-1)/m
    assert pipeline_bubble(4, 1, 32) == 1 + 3 / 32
    # interleaved over v chunks: the fill shrinks v times
    assert pipeline_bubble(4, 2, 32) == 1 + 3 / 64
    assert pipeline_bubble(1, 1, 1) == 1.0


def test_pipeline_layout_step_carries_its_bubble():
    """Llama-2-7B on 8 x H100 as pp 4 x dp 2 with a global batch of 64 x 2048 tokens: each of the
    2 replicas runs 64 / 2 = 32 micro-batches of one sequence per step."""
    setup = TrainingSetup(mode="full", gpus=8, pipeline_parallel=4, tokens_per_step=64 * 2048, grad_checkpointing=True)
    lay = fitted(LLAMA7, setup, 8, Pins(pipeline_parallel=4, zero=1)).layout
    assert (lay.pipeline_parallel, lay.data_parallel, lay.virtual_stages) == (4, 2, 1)
    assert step_time(LLAMA7, setup, lay, H100).bubble_factor == 1 + 3 / 32
    inter = TrainingSetup(mode="full", gpus=8, pipeline_parallel=4, tokens_per_step=64 * 2048, grad_checkpointing=True,
                          virtual_stages=2)
    lay2 = fitted(LLAMA7, inter, 8, Pins(pipeline_parallel=4, zero=1)).layout
    assert lay2.virtual_stages == 2
    assert step_time(LLAMA7, inter, lay2, H100).bubble_factor == 1 + 3 / 64


def test_pipeline_first_stage_memory_by_hand():
    """The first of 4 stages holds 8 layers, and 1F1B keeps 4 micro-batches in flight there
    (Narayanan et al. 2021 §2.2); interleaved over 2 chunks, 4 x (1 + 3/8) (Korthikanti §4.2.3)."""
    layer_input = 2048 * 4096 * 2
    one_layer = (4 * 4096 + 2 * 4096 + 2 * 4096 + 4 * 11008) * 2 * 2048 + 4 * 32 * 2048
    logits = 2048 * 32000 * 14
    per_micro_batch = 8 * layer_input  # the rebuilt layer is one at a time, after the loss
    for v, in_flight in ((1, 4), (2, 4 * (1 + 3 / 8))):
        setup = TrainingSetup(mode="full", gpus=8, pipeline_parallel=4, zero=1, virtual_stages=v,
                              grad_checkpointing=True)
        got = estimate(LLAMA7, setup).breakdown_gb.activations
        assert got == pytest.approx((per_micro_batch * in_flight + max(one_layer, logits)) / 1e9, abs=0.005), v


# --- context parallel --------------------------------------------------------------------------


def test_context_parallel_attention_and_ring_by_hand():
    """Llama-3.1-8B at 32,768 tokens on 8 x H100 with context parallel 4 (dp 2), full checkpointing.

    Causal attention forward per token is 2 x 32 layers x s x 4096 (QK^T and AV over s/2 keys on
    average): 8,589,934,592 FLOPs at s = 32,768; the 32,768 tokens of a sequence are shared by 4
    GPUs. The ring brings each GPU the K and V of the 3 other chunks: 32,768 x 2 x 1024 x 2 B x 3/4
    per layer forward; backward passes K, V, dK, dV (x2 more), recompute once more: x4 in all."""
    setup = TrainingSetup(mode="full", gpus=8, seq_len=32768, grad_checkpointing=True)
    lay = fitted(LLAMA8, setup, 8, Pins(context_parallel=4, zero=1)).layout
    assert (lay.context_parallel, lay.data_parallel) == (4, 2)
    st = step_time(LLAMA8, setup, lay, H100)
    ring = 32 * (32768 * 2 * 1024 * 2 * 3 / 4) * 4 / NCCL_BW
    assert ring == pytest.approx(0.03818, rel=1e-3)
    # the ring overlaps with the attention it feeds; only what attention does not cover shows
    assert st.comm_exposed == pytest.approx(max(0.0, ring - st.attention), rel=1e-9, abs=1e-12)
    # attention time scales with each GPU's share of the FLOPs: a quarter of one GPU's whole sequence
    alone = step_time(LLAMA8, setup, lay, H100, single_gpu=True)
    assert st.attention == pytest.approx(alone.attention / 4, rel=1e-9)
    # over PCIe Gen4 x16 without peer-to-peer (31.5 GB/s each way, of which NCCL's host-staged
    # copies reach ~0.35: "well under 25 GB/s", reference/gpu-specs.md §5) the ring is slower than
    # the attention it feeds, and the difference shows
    slow = lay.model_copy(update={"link": "pcie-no-p2p", "link_gbps": 31.5})
    st_pcie = step_time(LLAMA8, setup, slow, H100)
    ring_pcie = 32 * (32768 * 2 * 1024 * 2 * 3 / 4) * 4 / (31.5e9 * 0.35)
    assert ring_pcie > st_pcie.attention
    assert st_pcie.comm_exposed == pytest.approx(ring_pcie - st_pcie.attention, rel=1e-9)


def test_context_parallel_memory_by_hand():
    """Each of 4 context-parallel GPUs keeps activations for 8,192 of the 32,768 tokens; states
    are sharded over dp x cp = 8 by ZeRO-1 (Megatron's distributed optimizer)."""
    setup = TrainingSetup(mode="full", gpus=8, seq_len=32768, context_parallel=4, zero=1, grad_checkpointing=True)
    est = estimate(LLAMA8, setup)
    s = 8192
    layer_input = s * 4096 * 2
    one_layer = (4 * 4096 + 2 * 4096 + 2 * 1024 + 4 * 14336) * 2 * s + 4 * 32 * s
    logits = s * 128256 * 14
    assert est.breakdown_gb.activations == pytest.approx((32 * layer_input + max(one_layer, logits)) / 1e9, abs=0.005)
    P = LLAMA8.total_params
    assert est.breakdown_gb.optimizer == pytest.approx(P * 12 / 8 / 1e9, abs=0.005)


def test_long_sequences_search_context_parallel():
    """Unpinned, a 131,072-token full fine-tune of Llama-3.1-8B does not fit 8 x H100 without
    splitting the sequence; the ladder finds a context-parallel layout."""
    setup = TrainingSetup(mode="full", gpus=8, seq_len=131072)
    fit = fitted(LLAMA8, setup, 8, Pins())
    assert fit.layout.context_parallel > 1
