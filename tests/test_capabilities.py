"""Hardware capabilities as hard constraints: a plan never runs a precision, kernel or library the
card lacks (issue 9). Each rule is checked on the cards the published sources name: Turing has no
BF16 and no FlashAttention-2 (Dao-AILab/flash-attention README: "Ampere, Ada, or Hopper";
developer.nvidia.com/cuda-gpus: Quadro RTX 8000 and T4 are compute capability 7.5), Ampere has no
FP8 (Transformer Engine: Ada, Hopper, Blackwell), bitsandbytes has no Ascend backend and only
experimental ROCm support before 0.50 (bitsandbytes installation guide), GH200's host is Grace
(aarch64)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.feasibility import Capabilities, Fit, NodeShape, NoFit, find_layout, runtime_for
from rentopt.optimizer.hardware import all_gpus, get_gpu
from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.workload import resolve_model

LLAMA7 = resolve_model("llama-2-7b")
LLAMA13 = resolve_model("llama-2-13b")
PINNED = Capabilities(precision_pinned=True)


def one(gpu: str, n: int = 1) -> NodeShape:
    return NodeShape(gpu=get_gpu(gpu), gpus_per_node=n, interconnect="pcie")


# --------------------------------------------------------------------------------------------
# The catalog states the capabilities, and they agree with NVIDIA's architecture rules


def test_every_record_states_its_capabilities_and_cuda_records_their_compute_capability():
    for g in all_gpus():
        assert g.stack in ("cuda", "rocm", "gaudi", "ascend"), g.id
        assert g.host_arch in ("x86_64", "aarch64"), g.id
        assert g.bitsandbytes in ("supported", "limited", "unsupported"), g.id
        if g.stack == "cuda":
            assert g.compute_capability and g.vendor == "NVIDIA", g.id
        else:
            assert g.compute_capability is None and g.vendor != "NVIDIA", g.id


@pytest.mark.parametrize("gpu", [g for g in all_gpus() if g.stack == "cuda"], ids=lambda g: g.id)
def test_nvidia_capabilities_follow_the_compute_capability(gpu):
    cc = float(gpu.compute_capability)
    # BF16 and FlashAttention-2 from Ampere (8.0); FP8 tensor cores from Ada (8.9); FA3 is Hopper (9.0).
    assert gpu.bf16 == (cc >= 8.0)
    assert gpu.fp8 == (cc >= 8.9)
    assert (gpu.flash_attention >= 2) == (cc >= 8.0)
    assert (gpu.flash_attention == 3) == (gpu.compute_capability == "9.0")


def test_the_architectures_the_issue_names():
    assert (get_gpu("Quadro-RTX-8000-48GB").compute_capability, get_gpu("Quadro-RTX-8000-48GB").bf16) == ("7.5", False)
    assert (get_gpu("RTX-3090-24GB").compute_capability, get_gpu("RTX-3090-24GB").fp8) == ("8.6", False)
    assert get_gpu("H100-SXM-80GB").flash_attention == 3
    assert get_gpu("GH200-96GB").host_arch == "aarch64"
    assert {g.stack for g in all_gpus() if g.vendor != "NVIDIA"} == {"rocm", "gaudi", "ascend"}
    assert get_gpu("Ascend-910B3-64GB").bitsandbytes == "unsupported"
    assert get_gpu("MI300X-192GB").bitsandbytes == "limited"


# --------------------------------------------------------------------------------------------
# Precision


def test_a_turing_card_never_runs_bf16():
    # The README's headline job: 13B LoRA in bf16. On a Quadro RTX 8000 (Turing, 7.5) a pinned
    # --precision bf16 rules the card out, naming what it lacks.
    pinned = find_layout(LLAMA13, TrainingSetup(mode="lora"), one("Quadro-RTX-8000-48GB"), capabilities=PINNED)
    assert isinstance(pinned, NoFit) and pinned.constraint == "capability"
    assert "lacks BF16 (Turing, compute capability 7.5)" in pinned.reason
    # Not pinned, the honest variant runs: fp16 mixed precision with loss scaling and SDPA's
    # memory-efficient attention, and the layout says so.
    fit = find_layout(LLAMA13, TrainingSetup(mode="lora"), one("Quadro-RTX-8000-48GB"))
    assert isinstance(fit, Fit)
    assert (fit.layout.precision, fit.layout.attention) == ("fp16-mixed", "sdpa-mem-efficient")
    assert any("loss scaling" in n and "lacks BF16" in n for n in fit.layout.notes)
    assert any("FlashAttention-2" in n and "Ampere" in n for n in fit.layout.notes)
    # The same job on an Ampere card runs what was asked.
    a6000 = find_layout(LLAMA13, TrainingSetup(mode="lora"), one("RTX-A6000-48GB"))
    assert isinstance(a6000, Fit) and (a6000.layout.precision, a6000.layout.attention) == ("bf16-mixed",
                                                                                          "flash-attention-2")


def test_the_fp16_variant_of_pure_bf16_is_recomputed_with_its_fp32_master_weights():
    # bf16-true keeps 8 B/param (weights, grads, two moments in bf16); fp16 needs loss scaling and
    # an fp32 master copy with fp32 moments: 2 + 2 + 4 + 8 = 16 B/param (ZeRO paper). On a V100
    # (no BF16) the full fine-tune of a 1.3B model therefore needs 8 B/param more than asked.
    gpt = resolve_model("1.3b")
    setup = TrainingSetup(mode="full", precision="bf16-true", seq_len=512, grad_checkpointing=True)
    fit = find_layout(gpt, setup, one("V100-SXM2-32GB"))
    assert isinstance(fit, Fit) and fit.layout.precision == "fp16-mixed"
    asked = estimate(gpt, setup)
    assert fit.memory.states_gb_per_gpu - asked.states_gb_per_gpu == pytest.approx(8 * gpt.total_params / 1e9, abs=0.02)


def test_an_ampere_card_never_runs_fp8():
    setup = TrainingSetup(mode="lora", precision="fp8")
    pinned = find_layout(LLAMA7, setup, one("RTX-3090-24GB"), capabilities=PINNED)
    assert isinstance(pinned, NoFit) and pinned.constraint == "capability"
    assert "lacks FP8 (Ampere (GA102), compute capability 8.6)" in pinned.reason
    variant = find_layout(LLAMA7, setup, one("RTX-3090-24GB"))
    assert isinstance(variant, Fit) and variant.layout.precision == "bf16-mixed"
    assert any("instead of fp8" in n for n in variant.layout.notes)
    ada = find_layout(LLAMA7, setup, one("RTX-4090-24GB"), capabilities=PINNED)
    assert isinstance(ada, Fit) and ada.layout.precision == "fp8"


# --------------------------------------------------------------------------------------------
# Software stacks and libraries


def test_non_cuda_stacks_are_excluded_unless_allowed():
    refused = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("MI300X-192GB"))
    assert isinstance(refused, NoFit) and refused.constraint == "capability"
    assert "ROCm" in refused.reason and "--allow-stack rocm" in refused.reason
    allowed = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("MI300X-192GB"),
                          capabilities=Capabilities(allowed_stacks=Capabilities.parse_stacks("rocm")))
    assert isinstance(allowed, Fit) and allowed.layout.attention == "flash-attention-2"


def test_qlora_on_rocm_is_limited_and_on_ascend_impossible():
    rocm = Capabilities(allowed_stacks=Capabilities.parse_stacks("rocm,ascend,gaudi"))
    mi300 = find_layout(LLAMA7, TrainingSetup(mode="qlora"), one("MI300X-192GB"), capabilities=rocm)
    assert isinstance(mi300, Fit)
    assert any("bitsandbytes on ROCm is limited" in n for n in mi300.layout.notes)
    ascend = find_layout(LLAMA7, TrainingSetup(mode="qlora"), one("Ascend-910B3-64GB"), capabilities=rocm)
    assert isinstance(ascend, NoFit) and ascend.constraint == "capability" and "lacks bitsandbytes" in ascend.reason
    # LoRA needs no bitsandbytes: it runs there, with Ascend's fused attention.
    lora = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("Ascend-910B3-64GB"), capabilities=rocm)
    assert isinstance(lora, Fit) and lora.layout.attention == "npu-fusion-attention"
    gaudi = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("Gaudi2-96GB"), capabilities=rocm)
    assert isinstance(gaudi, Fit) and gaudi.layout.attention == "fused-sdpa"


def test_llm_int8_needs_turing_or_newer():
    setup = TrainingSetup(mode="inference", quant="int8", optimizer="none")
    v100 = find_layout(LLAMA7, setup, one("V100-SXM2-16GB"))
    assert isinstance(v100, NoFit) and "LLM.int8()" in v100.reason and "7.5" in v100.reason
    assert isinstance(find_layout(LLAMA7, setup, one("T4-16GB")), Fit)


def test_gh200_plans_carry_the_aarch64_note():
    fit = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("GH200-96GB"))
    assert isinstance(fit, Fit)
    assert any("aarch64" in n and "flash-attn" in n for n in fit.layout.notes)
    x86 = find_layout(LLAMA7, TrainingSetup(mode="lora"), one("H100-SXM-80GB"))
    assert isinstance(x86, Fit) and not any("aarch64" in n for n in x86.layout.notes)


def test_unknown_stacks_are_a_clear_input_error():
    from rentopt.optimizer.errors import InputError

    with pytest.raises(InputError, match="--allow-stack takes rocm, gaudi, ascend"):
        Capabilities.parse_stacks("rocm,metal")


def test_runtime_without_flash_attention_is_eager():
    r = runtime_for(TrainingSetup(mode="lora", flash_attention=False), get_gpu("H100-SXM-80GB"))
    assert r.attention == "eager" and r.setup.precision == "bf16-mixed"


# --------------------------------------------------------------------------------------------
# The CLI: --precision pins, --allow-stack, --explain-ready reasons


def _fits(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["estimate", "--model", "13b", "--mode", "lora", "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["fits"]


def test_estimate_pins_a_given_precision_and_allows_stacks_on_request():
    free = {f["gpu"]: f for f in _fits()["1"]}
    assert free["Quadro-RTX-8000-48GB"]["precision"] == "fp16-mixed"
    assert "MI300X-192GB" not in free
    pinned = {f["gpu"] for f in _fits("--precision", "bf16")["1"]}
    assert "Quadro-RTX-8000-48GB" not in pinned and "RTX-A6000-48GB" in pinned
    rocm = {f["gpu"] for f in _fits("--allow-stack", "rocm")["1"]}
    assert "MI300X-192GB" in rocm


def test_a_bad_stack_name_is_one_clear_line():
    result = CliRunner().invoke(cli, ["estimate", "--model", "7b", "--mode", "lora", "--allow-stack", "tpu"])
    assert result.exit_code == 2 and "rentopt: error:" in result.output and "Traceback" not in result.output


def offers_sheet(tmp_path, *lines: str) -> str:
    sheet = tmp_path / "offers.csv"
    sheet.write_text("provider,offer_id,gpu,gpus,price_hour,currency\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return str(sheet)


def quote_json(*args: str) -> dict:
    return json.loads(CliRunner().invoke(cli, ["quote", *args, "--format", "json"]).output)


def test_the_quote_rules_out_a_turing_card_for_a_pinned_bf16_run(tmp_path):
    # The issue's headline case: the README's 13B LoRA quote picked a Quadro RTX 8000. With
    # --precision bf16 given, the cheaper Turing card is rejected and --explain says why.
    sheet = offers_sheet(tmp_path, "me,quadro,Quadro RTX 8000,1,0.28,USD", "me,a6000,RTX A6000,1,0.49,USD")
    args = ["--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", sheet]
    free = quote_json(*args)
    # fp16 with loss scaling may run there, priced at the speed of what runs
    assert not any(r["offer_id"] == "quadro" and r["constraint"] == "capability" for r in free["rejected"])
    pinned = quote_json(*args, "--precision", "bf16")
    assert {s["offer_id"] for p in pinned["plans"] for s in p["stages"]} == {"a6000"}
    [rejected] = [r for r in pinned["rejected"] if r["offer_id"] == "quadro"]
    assert rejected["constraint"] == "capability" and "lacks BF16 (Turing, compute capability 7.5)" in rejected["reason"]


def test_the_quote_plans_rocm_only_when_allowed(tmp_path):
    sheet = offers_sheet(tmp_path, "me,mi300,MI300X,1,0.90,USD", "me,h100,H100 SXM,1,2.50,USD")
    args = ["--model", "7b", "--mode", "lora", "--rent-days", "1", "--offers-file", sheet]
    cuda = quote_json(*args)
    assert cuda["plans"][0]["stages"][2]["offer_id"] == "h100"
    assert any(r["offer_id"] == "mi300" and "--allow-stack rocm" in r["reason"] for r in cuda["rejected"])
    rocm = quote_json(*args, "--allow-stack", "rocm")
    assert rocm["plans"][0]["stages"][2]["offer_id"] == "mi300"
