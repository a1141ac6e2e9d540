"""The GPU catalog (data/gpus.toml), GPU-name normalisation and `rentopt gpus`."""

from __future__ import annotations

import json
import math
import tomllib
from collections import defaultdict
from importlib import resources

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import InputError, UnknownGpuError
from rentopt.optimizer.hardware import (
    FORM_FACTORS,
    GPU_CLASSES,
    all_gpus,
    canonical_key,
    get_gpu,
    load_catalog,
    normalise,
    parse_catalog,
    resolve_user_gpu,
    select_gpus,
    variant_of,
)
from rentopt.optimizer.models import GpuSpec


def raw_records() -> list[dict]:
    text = resources.files("rentopt.optimizer").joinpath("data", "gpus.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)["gpu"]


# --------------------------------------------------------------------------------------------
# The catalog


def test_catalog_has_at_least_40_sourced_records_with_unique_ids():
    records = raw_records()
    ids = [r["id"] for r in records]
    assert len(records) >= 40
    assert len(set(ids)) == len(ids)
    assert list(load_catalog()) == ids
    for spec in all_gpus():
        assert spec.sources, spec.id
        assert spec.memory_gb > 0 and spec.memory_bandwidth_gbps > 0, spec.id
        assert spec.gpu_class in GPU_CLASSES and spec.form_factor in FORM_FACTORS, spec.id
        assert spec.bf16_tflops or spec.fp16_tflops, f"{spec.id} has no tensor throughput"


REQUIRED_IDS = {
    "datacenter": ["B200-SXM-180GB", "H200-SXM-141GB", "H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB",
                   "H800-SXM-80GB", "H20-96GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe-40GB",
                   "A100-PCIe-80GB", "A800-SXM4-80GB", "L40S-48GB", "L40-48GB", "L4-24GB", "A40-48GB",
                   "A10-24GB", "A10G-24GB", "V100-SXM2-16GB", "T4-16GB", "MI300X-192GB", "MI325X-256GB",
                   "MI250X-128GB", "A30-24GB", "L20-48GB", "P100-PCIe-16GB", "B300-SXM-288GB"],
    "workstation": ["RTX-6000-Ada-48GB", "RTX-A6000-48GB", "RTX-A5000-24GB", "RTX-A4000-16GB",
                    "RTX-PRO-6000-Server-96GB", "RTX-PRO-6000-WS-96GB", "Quadro-RTX-6000-24GB",
                    "Quadro-RTX-8000-48GB", "RTX-A4500-20GB", "RTX-4000-Ada-20GB", "RTX-4000-SFF-Ada-20GB",
                    "RTX-5000-Ada-32GB"],
    "consumer": ["RTX-5090-32GB", "RTX-4090-24GB", "RTX-4080-16GB", "RTX-3090-24GB", "RTX-3090Ti-24GB",
                 "RTX-4080-SUPER-16GB", "RTX-4090D-24GB", "RTX-3080-10GB", "RTX-3080Ti-12GB", "RTX-3060-12GB"],
}


@pytest.mark.parametrize("gpu_class", sorted(REQUIRED_IDS))
def test_required_gpus_are_in_the_catalog_with_their_class(gpu_class):
    for gpu_id in REQUIRED_IDS[gpu_class]:
        assert get_gpu(gpu_id).gpu_class == gpu_class


def test_aliases_are_unique_across_records_and_never_also_ambiguous():
    owners: dict[str, set[str]] = defaultdict(set)
    ambiguous: dict[str, set[str]] = defaultdict(set)
    for spec in all_gpus():
        for alias in (spec.id, *spec.aliases):
            owners[canonical_key(alias)].add(spec.id)
        for alias in spec.ambiguous_aliases:
            ambiguous[canonical_key(alias)].add(spec.id)
    clashes = {key: ids for key, ids in owners.items() if len(ids) > 1}
    assert not clashes
    assert not set(owners) & set(ambiguous)
    # an "ambiguous" name that only one record lists would be an alias in disguise
    assert all(len(ids) >= 2 for ids in ambiguous.values())


def test_reported_memory_is_close_to_the_label():
    checked = 0
    for spec in all_gpus():
        if spec.reported_memory_mib is not None:
            label_mib = spec.memory_gb * 1e9 / 2**20
            assert abs(spec.reported_memory_mib - label_mib) <= 0.10 * label_mib, spec.id
            checked += 1
    assert checked >= 10


def test_every_alias_maps_to_its_own_record_and_every_ambiguous_alias_stays_ambiguous():
    for spec in all_gpus():
        for alias in (spec.id, spec.id.lower(), *spec.aliases):
            match = normalise(alias)
            assert (match.gpu, match.status) == (spec.id, "exact"), alias
        for alias in spec.ambiguous_aliases:
            match = normalise(alias)
            assert match.gpu is None and match.status == "ambiguous", alias
            assert spec.id in match.candidates, alias


def test_load_catalog_returns_a_copy_callers_cannot_corrupt():
    catalog = load_catalog()
    catalog.pop("H100-SXM-80GB")
    assert "H100-SXM-80GB" in load_catalog()
    assert isinstance(get_gpu("H100-SXM-80GB"), GpuSpec)


def test_get_gpu_wants_an_exact_id():
    with pytest.raises(KeyError, match="no GPU with id"):
        get_gpu("h100")


def test_select_gpus_filters_by_class_and_memory():
    big = select_gpus("datacenter", 141)
    assert {g.id for g in big} >= {"B200-SXM-180GB", "H200-SXM-141GB", "MI300X-192GB"}
    assert all(g.gpu_class == "datacenter" and g.memory_gb >= 141 for g in big)
    assert "RTX-4090-24GB" not in {g.id for g in select_gpus("datacenter")}
    with pytest.raises(ValueError, match="unknown GPU class"):
        select_gpus("gaming")


# --------------------------------------------------------------------------------------------
# Catalog parsing errors

GOOD_RECORD = """
[[gpu]]
id = "X-1GB"
name = "X"
vendor = "NVIDIA"
class = "consumer"
form_factor = "PCIe"
memory_gb = 1
memory_bandwidth_gbps = 100
bf16_tflops = 10
fp16_tflops = 10
compute_capability = "8.6"
bf16 = true
fp8 = false
flash_attention = 2
stack = "cuda"
host_arch = "x86_64"
bitsandbytes = "supported"
aliases = ["X one"]
mamf_source = "no published GEMM measurement found for this card"
training_source = "none found"
sources = ["somewhere"]
"""


def test_parse_catalog_accepts_a_minimal_record_and_defaults_missing_optionals_to_none():
    spec = parse_catalog(GOOD_RECORD)["X-1GB"]
    assert spec.gpu_class == "consumer" and spec.nvlink_gbps is None and spec.fp8_tflops is None


@pytest.mark.parametrize("text, message", [
    ("not toml [", "not valid TOML"),
    ("title = 'no records'", "no \\[\\[gpu\\]\\] records"),
    (GOOD_RECORD + "tdp_w = 300\n", "unknown field.*tdp_w"),
    (GOOD_RECORD.replace('sources = ["somewhere"]', "sources = []"), "at least one source"),
    (GOOD_RECORD.replace('"PCIe"', '"card"'), "form_factor must be one of"),
    (GOOD_RECORD.replace("memory_gb = 1", "memory_gb = 0"), "must be positive"),
    (GOOD_RECORD.replace('class = "consumer"', 'class = "gaming"'), "gpu_class"),
    (GOOD_RECORD + GOOD_RECORD, "lists X-1GB twice"),
    (GOOD_RECORD + GOOD_RECORD.replace("X-1GB", "Y-1GB"), "also an alias of X-1GB"),
    (GOOD_RECORD.replace('aliases = ["X one"]', 'aliases = ["X one"]\nambiguous_aliases = ["X_ONE"]'),
     "both as an alias and as ambiguous"),
    (GOOD_RECORD.replace('aliases = ["X one"]', 'aliases = []\nambiguous_aliases = ["X"]'), "name only one record"),
    (GOOD_RECORD.replace('bf16 = true\n', ''), "capability field.*missing: bf16"),
    (GOOD_RECORD.replace('compute_capability = "8.6"\n', ''), "missing: compute_capability"),
    (GOOD_RECORD.replace('bf16 = true', 'bf16 = false'), "bf16/fp8 must agree"),
    (GOOD_RECORD.replace('flash_attention = 2', 'flash_attention = 1'), "flash_attention must be 0, 2 or 3"),
    (GOOD_RECORD.replace('stack = "cuda"', 'stack = "metal"'), "stack"),
    (GOOD_RECORD.replace('aliases = ["X one"]', 'aliases = ["X one"]\nsheet_default_for = ["X"]'),
     "sheet_default_for X must be among its ambiguous_aliases"),
    (GOOD_RECORD.replace('mamf_source = "no published GEMM measurement found for this card"\n', ''),
     "mamf_source must say"),
    (GOOD_RECORD.replace('training_source = "none found"\n', ''), "training_source must name"),
    (GOOD_RECORD + "mamf_bf16_tflops = 20\n", "not within .0, 1.2 x spec 10"),  # a sparse figure
    (GOOD_RECORD + "mamf_fp8_tflops = 5\n", "no fp8 tensor rate"),
    (GOOD_RECORD + "mamf_bf16_tflops = 9\nmamf_relative = \"X-1GB\"\n", "not both"),
    (GOOD_RECORD + 'mamf_relative = "Z-1GB"\n', "mamf_relative 'Z-1GB' is not in the catalog"),
    (GOOD_RECORD + 'mamf_relative = "X-1GB"\n', "has no measured matmul ceiling"),
    (GOOD_RECORD.replace('aliases = ["X one"]', 'aliases = ["X one"]\nmamf_relative = "Y-1GB"\nmamf_rule = "power"')
     + GOOD_RECORD.replace("X-1GB", "Y-1GB").replace("X one", "Y one") + "mamf_bf16_tflops = 9\n",
     "mamf_rule power needs power_w"),
    (GOOD_RECORD + "power_w = 0\n", "power_w must be positive"),
    (GOOD_RECORD + "nvlink_domain_gpus = 72\n", "nvlink_domain_gpus needs NVLink"),
])
def test_parse_catalog_rejects_broken_catalogs_with_a_clear_message(text, message):
    with pytest.raises(ValueError, match=message):
        parse_catalog(text)


# --------------------------------------------------------------------------------------------
# normalise: provider spellings

SPELLINGS = {
    # generic and nvidia-smi / torch.cuda.get_device_name()
    "NVIDIA GeForce RTX 4090": "RTX-4090-24GB",
    "RTX 4090": "RTX-4090-24GB",
    "H100 SXM5 80GB": "H100-SXM-80GB",
    "H100_NVL": "H100-NVL-94GB",
    "RTX 6000Ada": "RTX-6000-Ada-48GB",
    "A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA H100 80GB HBM3": "H100-SXM-80GB",
    "NVIDIA H100 PCIe": "H100-PCIe-80GB",
    "NVIDIA H100 NVL": "H100-NVL-94GB",
    "NVIDIA A100 80GB PCIe": "A100-PCIe-80GB",
    "NVIDIA A100-PCIE-40GB": "A100-PCIe-40GB",
    "NVIDIA RTX 6000 Ada Generation": "RTX-6000-Ada-48GB",
    # RunPod gpu type ids (provider-apis.md 2.4), double spaces included
    "NVIDIA  RTX A4500": "RTX-A4500-20GB",
    "NVIDIA RTX A4500": "RTX-A4500-20GB",
    "NVIDIA  A30": "A30-24GB",
    "NVIDIA RTX A30": "A30-24GB",
    "NVIDIA GeForce RTX 3080TI": "RTX-3080Ti-12GB",
    "NVIDIA GeForce RTX 3080 Ti": "RTX-3080Ti-12GB",
    "NVIDIA GeForce RTX 4080 SUPER": "RTX-4080-SUPER-16GB",
    "NVIDIA GeForce RTX 3090 Ti": "RTX-3090Ti-24GB",
    "NVIDIA RTX 4000 SFF Ada Generation": "RTX-4000-SFF-Ada-20GB",
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": "RTX-PRO-6000-Server-96GB",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": "RTX-PRO-6000-MaxQ-96GB",
    "NVIDIA A5000 Ada": "RTX-5000-Ada-32GB",
    "AMD Instinct MI300X OAM": "MI300X-192GB",
    "Tesla V100-SXM2-16GB": "V100-SXM2-16GB",
    "Tesla V100-SXM2-32GB": "V100-SXM2-32GB",
    "Tesla V100-PCIE-16GB": "V100-PCIe-16GB",
    "Tesla T4": "T4-16GB",
    "NVIDIA B200": "B200-SXM-180GB",
    "NVIDIA H200 NVL": "H200-NVL-141GB",
    # Vast gpu_name (provider-apis.md 1.5)
    "Q RTX 8000": "Quadro-RTX-8000-48GB",
    "Q RTX 6000": "Quadro-RTX-6000-24GB",
    "RTX 4080S": "RTX-4080-SUPER-16GB",
    "A100X": "A100-PCIe-80GB",
    "H200 NVL": "H200-NVL-141GB",
    "RTX PRO 6000 WS": "RTX-PRO-6000-WS-96GB",
    "RTX PRO 6000 S": "RTX-PRO-6000-Server-96GB",
    "RTX PRO 6000 Max-Q": "RTX-PRO-6000-MaxQ-96GB",
    "H100 SXM": "H100-SXM-80GB",
    "H100 PCIE": "H100-PCIe-80GB",
    "A800 PCIE": "A800-PCIe-80GB",
    "RTX 3060": "RTX-3060-12GB",
    "RTX A6000": "RTX-A6000-48GB",
    "Tesla P100": "P100-PCIe-16GB",
    "L40": "L40-48GB",
    "L40S": "L40S-48GB",
    "RTX 5090": "RTX-5090-32GB",
    # Lambda gpu_description (provider-apis.md 3)
    "H100 (80 GB SXM5)": "H100-SXM-80GB",
    "H100 (80 GB PCIe)": "H100-PCIe-80GB",
    "A100 (40 GB PCIe)": "A100-PCIe-40GB",
    "A100 (40 GB SXM4)": "A100-SXM4-40GB",
    "A100 (80 GB SXM4)": "A100-SXM4-80GB",
    "A10 (24 GB PCIe)": "A10-24GB",
    "B200 (180 GB SXM6)": "B200-SXM-180GB",
    "A6000 (48 GB)": "RTX-A6000-48GB",
    "RTX 6000 (24 GB)": "Quadro-RTX-6000-24GB",
    "GH200 (96 GB)": "GH200-96GB",
    # DataCrunch / Verda descriptions (provider-apis.md 8.1)
    "1x H100 SXM5 80GB": "H100-SXM-80GB",
    "8x A100 SXM4 40GB": "A100-SXM4-40GB",
    "RTX6000 Ada 48GB": "RTX-6000-Ada-48GB",
    "RTX 6000 Ada 48GB": "RTX-6000-Ada-48GB",
    "B300 SXM6 268GB": "B300-SXM-288GB",
    "2x B300 SXM6 262GB": "B300-SXM-288GB",
    # TensorDock keys and FluidStack gpu_type
    "geforcertx4090-pcie-24gb": "RTX-4090-24GB",
    "rtxa6000-pcie-48gb": "RTX-A6000-48GB",
    "a100-pcie-80gb": "A100-PCIe-80GB",
    "v100-pcie-16gb": "V100-PCIe-16GB",
    "H100_SXM5_80GB": "H100-SXM-80GB",
    "H100_PCIE_80GB": "H100-PCIe-80GB",
    "A100_SXM4_80GB": "A100-SXM4-80GB",
    # vendor words and memory around a known name, in combinations no alias spells out
    "NVIDIA Tesla A10G": "A10G-24GB",
    "NVIDIA RTX 3090": "RTX-3090-24GB",
    "AMD MI325X": "MI325X-256GB",
    "NVIDIA Tesla L4 24GB": "L4-24GB",
    "NVIDIA RTX 4000 Ada Generation 20GB": "RTX-4000-Ada-20GB",
}


@pytest.mark.parametrize("raw, expected", sorted(SPELLINGS.items()))
def test_provider_spellings_map_exactly_to_their_catalog_id(raw, expected):
    match = normalise(raw)
    assert (match.gpu, match.status) == (expected, "exact")
    assert match.raw == raw


@pytest.mark.parametrize("raw, memory_mib, expected", [
    ("A100 SXM4", 40960, "A100-SXM4-40GB"),  # Vast gpu_ram (MiB) / 1024
    ("A100 SXM4", 81920, "A100-SXM4-80GB"),
    ("A100 PCIE", 40960, "A100-PCIe-40GB"),
    ("A100 PCIE", 81920, "A100-PCIe-80GB"),
    ("H100", 95830, "H100-NVL-94GB"),
    ("RTX 6000", 24576, "Quadro-RTX-6000-24GB"),
    ("RTX 6000", 49140, "RTX-6000-Ada-48GB"),
    ("GH200", 144 * 1024, "GH200-144GB"),
    ("V100 PCIe", 32 * 1024, "V100-PCIe-32GB"),
])
def test_ambiguous_names_are_resolved_by_the_memory_hint(raw, memory_mib, expected):
    match = normalise(raw, memory_mib / 1024)
    assert (match.gpu, match.status) == (expected, "by_memory")
    assert expected in match.candidates and len(match.candidates) >= 2


@pytest.mark.parametrize("raw, memory_gb, candidates", [
    ("H100", None, {"H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"}),
    ("H100", 79.6, {"H100-SXM-80GB", "H100-PCIe-80GB"}),  # 80 GB stays SXM-or-PCIe without a form factor
    ("NVIDIA H100", 80, {"H100-SXM-80GB", "H100-PCIe-80GB"}),
    ("A100", None, {"A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB", "A100-PCIe-40GB"}),
    ("A100", 80, {"A100-SXM4-80GB", "A100-PCIe-80GB"}),
    ("A100 SXM4", None, {"A100-SXM4-80GB", "A100-SXM4-40GB"}),
    ("Tesla V100", None, {"V100-SXM2-16GB", "V100-SXM2-32GB", "V100-PCIe-16GB", "V100-PCIe-32GB"}),
    ("Tesla V100", 16, {"V100-SXM2-16GB", "V100-PCIe-16GB"}),
    ("V100", 32, {"V100-SXM2-32GB", "V100-PCIe-32GB"}),
    ("Tesla V100 (16 GB)", None, {"V100-SXM2-16GB", "V100-PCIe-16GB"}),
    ("H200", 140.4, {"H200-SXM-141GB", "H200-NVL-141GB"}),
    ("RTX 6000", None, {"Quadro-RTX-6000-24GB", "RTX-6000-Ada-48GB", "RTX-PRO-6000-Server-96GB",
                        "RTX-PRO-6000-WS-96GB", "RTX-PRO-6000-MaxQ-96GB"}),
    ("RTX 6000 96GB", None, {"RTX-PRO-6000-Server-96GB", "RTX-PRO-6000-WS-96GB", "RTX-PRO-6000-MaxQ-96GB"}),
    ("RTX PRO 6000 96GB", None, {"RTX-PRO-6000-Server-96GB", "RTX-PRO-6000-WS-96GB", "RTX-PRO-6000-MaxQ-96GB"}),
])
def test_names_that_stay_ambiguous_list_their_candidates_and_no_gpu(raw, memory_gb, candidates):
    match = normalise(raw, memory_gb)
    assert match.status == "ambiguous" and match.gpu is None
    assert set(match.candidates) == candidates
    assert match.raw == raw


@pytest.mark.parametrize("raw, memory_gb, form_factor, expected", [
    ("H100", 80, "SXM", "H100-SXM-80GB"),
    ("H100", 80, "SXM5", "H100-SXM-80GB"),
    ("H100", 80, "PCIe", "H100-PCIe-80GB"),
    ("H100", None, "pcie", "H100-PCIe-80GB"),  # NVL is not PCIe
    ("H100", None, "NVL", "H100-NVL-94GB"),
    ("H200", 141, "SXM", "H200-SXM-141GB"),
    ("H200", None, "NVL", "H200-NVL-141GB"),
    ("Tesla V100 (16 GB)", None, "SXM", "V100-SXM2-16GB"),
    ("Tesla V100", 32, "SXM", "V100-SXM2-32GB"),
])
def test_the_form_factor_hint_decides_between_variants(raw, memory_gb, form_factor, expected):
    match = normalise(raw, memory_gb, form_factor_hint=form_factor)
    assert (match.gpu, match.status) == (expected, "by_memory")
    assert "hint" in match.note


def test_hints_that_fit_no_candidate_leave_the_name_ambiguous():
    match = normalise("H100", 40)
    assert match.status == "ambiguous" and match.gpu is None
    assert set(match.candidates) == {"H100-SXM-80GB", "H100-PCIe-80GB", "H100-NVL-94GB"}
    assert "match none" in match.note
    assert normalise("H200", form_factor_hint="PCIe").status == "ambiguous"  # the NVL is not "PCIe"


@pytest.mark.parametrize("hint", [None, 0, -5, math.nan, math.inf])
def test_absent_or_nonsense_memory_hints_are_ignored(hint):
    assert normalise("A100 SXM4", hint).status == "ambiguous"
    assert normalise("RTX 4090", hint).gpu == "RTX-4090-24GB"


def test_an_exact_name_wins_over_a_contradicting_hint_and_says_so():
    modded = normalise("RTX 4090", 48)  # Vast lists modified 48 GB 4090s
    assert (modded.gpu, modded.status) == ("RTX-4090-24GB", "exact")
    assert "48 GB differs" in modded.note
    wrong_hint = normalise("NVIDIA H100 PCIe", 80, form_factor_hint="SXM")
    assert wrong_hint.gpu == "H100-PCIe-80GB" and "ignored" in wrong_hint.note
    sic = normalise("Quadro_RTX_6000_16GB")  # FluidStack's misstated memory
    assert sic.gpu == "Quadro-RTX-6000-24GB" and "16 GB differs" in sic.note


def test_a_multi_device_card_accepts_its_per_device_memory():
    match = normalise("MI250X", 64)  # ROCm shows each MI250X GCD as a 64 GB device
    assert (match.gpu, match.note) == ("MI250X-128GB", "")


@pytest.mark.parametrize("raw", [
    "Tesla V100-FHHL-16GB",  # a real RunPod id for a SKU not in the catalog
    "AMD 7900XTX",
    "RTX 4090 SXM",  # a variant the card does not have
    "A100 PCIe 24GB",  # a memory no A100 has
    "H100 SXM PCIe",  # contradictory
    "A100 40GB 80GB",
    "RTX 3060 Ti",  # a sibling of a catalog card is not that card
    "geforcertx3060tilhr-pcie-8gb",
    "H10O",
    "",
    "   ",
])
def test_unknown_names_stay_unknown_and_keep_the_raw_spelling(raw):
    match = normalise(raw)
    assert (match.gpu, match.status, match.raw) == (None, "unknown", raw)
    assert match.note


def test_a_nonsense_form_factor_hint_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown form factor"):
        normalise("H100", 80, form_factor_hint="socket")


# --------------------------------------------------------------------------------------------
# A PCIe name is never an SXM (or NVL) GPU

PCIE_SPELLINGS = [
    "H100 PCIe", "NVIDIA H100 PCIe", "H100 PCIE", "H100 (80 GB PCIe)", "H100_PCIE_80GB", "H100 PCIe 80GB",
    "A100 PCIE", "A100 PCIe 40GB", "NVIDIA A100 80GB PCIe", "A100-PCIE-40GB", "A100 (40 GB PCIe)",
    "A800 PCIe", "H800 PCIe", "V100-PCIE-16GB", "Tesla V100-PCIE-32GB", "V100 PCIe", "A10 (24 GB PCIe)",
    "geforcertx4090-pcie-24gb",
]


def test_every_catalog_alias_that_says_pcie_names_a_pcie_record():
    for spec in all_gpus():
        for alias in spec.aliases:
            if "pcie" in canonical_key(alias):
                assert variant_of(spec) == "PCIe", (alias, spec.id)


def _respell(draw, text: str) -> str:
    out = []
    for char in text:
        if char in " _-":
            out.append(draw(st.sampled_from([" ", "_", "-", "  ", " _ ", ""])))
        else:
            out.append(char.upper() if draw(st.booleans()) else char.lower())
    return "".join(out)


@st.composite
def pcie_spellings(draw):
    return _respell(draw, draw(st.sampled_from(PCIE_SPELLINGS)))


@settings(max_examples=300, deadline=None)
@given(
    raw=pcie_spellings(),
    memory_gb=st.sampled_from([None, 16, 24, 40, 80, 94, 141]),
    form_factor=st.sampled_from([None, "SXM", "SXM5", "NVL", "PCIe"]),
)
def test_pcie_spellings_never_map_to_an_sxm_or_nvl_record(raw, memory_gb, form_factor):
    match = normalise(raw, memory_gb, form_factor_hint=form_factor)
    if match.gpu is not None:
        assert variant_of(get_gpu(match.gpu)) == "PCIe", (raw, match)
    for candidate in match.candidates:
        assert variant_of(get_gpu(candidate)) == "PCIe", (raw, match)
    if "h100" in raw.lower() and match.gpu is not None:
        assert match.gpu == "H100-PCIe-80GB"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_case_spacing_and_separators_do_not_change_a_match(data):
    raw = data.draw(st.sampled_from(sorted(SPELLINGS)))
    respelled = _respell(data.draw, raw)
    match = normalise(respelled)
    # Removing every separator can glue a vendor word onto the model ("nvidiah100"); that must fail
    # closed (unknown), never map to a different GPU.
    assert match.gpu in (SPELLINGS[raw], None)
    if match.gpu is None:
        assert match.status == "unknown"


# --------------------------------------------------------------------------------------------
# resolve_user_gpu


@pytest.mark.parametrize("text, expected", [
    ("H100-SXM-80GB", "H100-SXM-80GB"),
    ("h100-sxm-80gb", "H100-SXM-80GB"),
    ("rtx 4090", "RTX-4090-24GB"),
    ("A100 SXM4 40GB", "A100-SXM4-40GB"),
    ("quadro rtx 6000", "Quadro-RTX-6000-24GB"),
    ("NVIDIA GH200 480GB", "GH200-96GB"),  # a literal alias, though 480 GB is not its GPU memory
])
def test_users_may_name_a_gpu_by_id_or_unambiguous_alias(text, expected):
    assert resolve_user_gpu(text).id == expected


def test_an_ambiguous_user_gpu_lists_the_candidates_on_one_line():
    # a bare A100 is 40 or 80 GB, SXM4 or PCIe: the user chooses
    with pytest.raises(UnknownGpuError) as err:
        resolve_user_gpu("A100")
    message = str(err.value)
    assert "\n" not in message and "ambiguous" in message and "choose" in message
    for gpu_id in ("A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB", "A100-PCIe-40GB"):
        assert gpu_id in message
    assert isinstance(err.value, InputError) and err.value.exit_code == 2


def test_a_mistyped_user_gpu_suggests_close_ids_on_one_line():
    with pytest.raises(UnknownGpuError) as err:
        resolve_user_gpu("H100-SXM-8GB")
    message = str(err.value)
    assert "\n" not in message and "did you mean" in message and "H100-SXM-80GB" in message
    assert "rentopt gpus" in message


@pytest.mark.parametrize("text", ["", "  ", "zzzzzz"])
def test_hopeless_user_gpu_names_point_at_rentopt_gpus(text):
    with pytest.raises(UnknownGpuError, match="rentopt gpus") as err:
        resolve_user_gpu(text)
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------
# rentopt gpus


def test_gpus_json_round_trips_into_gpuspec():
    result = CliRunner().invoke(cli, ["gpus", "--format", "json"])
    assert result.exit_code == 0, result.output
    specs = [GpuSpec.model_validate(item) for item in json.loads(result.output)]
    assert [s.id for s in specs] == list(load_catalog())
    assert specs[0] == get_gpu(specs[0].id)


def test_gpus_table_has_the_documented_columns_and_filters():
    result = CliRunner().invoke(cli, ["gpus", "--class", "consumer", "--min-memory", "24"])
    assert result.exit_code == 0, result.output
    header, _rule, *rows = result.output.splitlines()
    for column in ("id", "class", "memory GB", "BF16 TFLOPS", "bandwidth GB/s", "NVLink GB/s", "PCIe gen",
                   "form factor"):
        assert column in header
    ids = {row.split()[0] for row in rows}
    assert ids == {g.id for g in all_gpus() if g.gpu_class == "consumer" and g.memory_gb >= 24}
    assert "RTX-4080-16GB" not in ids
    by_id = {row.split()[0]: row for row in rows}
    assert " none " in by_id["RTX-4090-24GB"]  # no NVLink
    assert " 112.5 " in by_id["RTX-3090-24GB"]


def test_gpus_table_shows_fp16_for_cards_without_bf16():
    result = CliRunner().invoke(cli, ["gpus", "--class", "datacenter"])
    t4 = next(row for row in result.output.splitlines() if row.startswith("T4-16GB"))
    assert "none (FP16 65)" in t4


def test_gpus_with_no_match_says_so_and_bad_options_fail_cleanly():
    runner = CliRunner()
    empty = runner.invoke(cli, ["gpus", "--min-memory", "10000"])
    assert empty.exit_code == 0 and "No GPU in the catalog matches" in empty.output
    assert json.loads(runner.invoke(cli, ["gpus", "--min-memory", "10000", "--format", "json"]).output) == []
    bad = runner.invoke(cli, ["gpus", "--class", "gaming"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
    assert "rentopt gpus --class datacenter" in runner.invoke(cli, ["gpus", "--help"]).output


# --------------------------------------------------------------------------------------------
# Bare names on hand-written sheets and catalogs (sheet_defaults=True)


@pytest.mark.parametrize("raw, expected", [
    ("H100", "H100-SXM-80GB"), ("NVIDIA H100", "H100-SXM-80GB"), ("H100 80GB", "H100-SXM-80GB"),
    ("H200", "H200-SXM-141GB"), ("A100 80GB", "A100-SXM4-80GB"), ("A800", "A800-SXM4-80GB"),
    ("H800", "H800-SXM-80GB"),
])
def test_a_bare_name_on_a_sheet_reads_as_the_usual_variant_and_says_so(raw, expected):
    match = normalise(raw, sheet_defaults=True)
    assert (match.gpu, match.status) == (expected, "default")
    assert expected in match.candidates and len(match.candidates) >= 2
    others = [c for c in match.candidates if c != expected]
    assert all(o in match.note for o in others) and "form_factor" in match.note
    # Provider feeds stay exact: the same name without the opt-in is still ambiguous.
    assert normalise(raw).status == "ambiguous"


@pytest.mark.parametrize("raw, memory_gb, form_factor, link, expected, status", [
    ("H100", 94, None, None, "H100-NVL-94GB", "by_memory"),  # memory decides first
    ("H100", None, "PCIe", None, "H100-PCIe-80GB", "by_memory"),
    ("H200", None, "NVL", None, "H200-NVL-141GB", "by_memory"),
    ("H100", 80, None, None, "H100-SXM-80GB", "default"),  # 80 GB leaves SXM or PCIe: the default
    ("A100", 80, None, None, "A100-SXM4-80GB", "default"),
    ("H100", None, None, "pcie", None, "ambiguous"),  # PCIe link: not SXM; PCIe 80 or NVL 94 changes what fits
    ("H100", 80, None, "pcie", "H100-PCIe-80GB", "by_memory"),
    ("A100", None, None, None, None, "ambiguous"),  # 40 or 80 GB: no default, the sheet must say
])
def test_sheet_columns_narrow_the_candidates_before_the_default(raw, memory_gb, form_factor, link, expected, status):
    match = normalise(raw, memory_gb, form_factor_hint=form_factor, interconnect_hint=link, sheet_defaults=True)
    assert (match.gpu, match.status) == (expected, status)


@settings(max_examples=300, deadline=None)
@given(
    raw=pcie_spellings(),
    memory_gb=st.sampled_from([None, 16, 24, 40, 80, 94, 141]),
    form_factor=st.sampled_from([None, "SXM", "SXM5", "NVL", "PCIe"]),
    link=st.sampled_from([None, "pcie", "nvlink"]),
)
def test_sheet_defaults_never_map_a_pcie_spelling_to_sxm(raw, memory_gb, form_factor, link):
    match = normalise(raw, memory_gb, form_factor_hint=form_factor, interconnect_hint=link, sheet_defaults=True)
    if match.gpu is not None:
        assert variant_of(get_gpu(match.gpu)) == "PCIe", (raw, match)


def test_every_sheet_default_is_one_of_its_names_candidates_of_the_same_family():
    seen = 0
    for spec in all_gpus():
        for alias in spec.sheet_default_for:
            match = normalise(alias, sheet_defaults=True)
            assert match.gpu == spec.id and spec.form_factor == "SXM", alias
            seen += 1
    assert seen >= 10


def test_gpus_shows_where_a_spelling_maps():
    runner = CliRunner()
    one = runner.invoke(cli, ["gpus", "H100"])
    assert one.exit_code == 0, one.output
    reads, where = one.output.splitlines()
    assert reads.startswith("'H100' reads as H100-SXM-80GB (default)")
    assert "H100-PCIe-80GB or H100-NVL-94GB" in reads
    assert "--gpu, --exclude-gpu, --on, offers files and price sheets" in where and "ambiguous there" in where
    data = json.loads(runner.invoke(cli, ["gpus", "h100", "--format", "json"]).output)
    assert data["reads_as"]["gpu"] == data["price_sheet"]["gpu"] == "H100-SXM-80GB"
    assert data["provider_feed"]["status"] == "ambiguous"
    a100 = runner.invoke(cli, ["gpus", "A100"])
    assert a100.output.startswith("'A100' is ambiguous: choose A100-SXM4-80GB")
    names = runner.invoke(cli, ["gpus", "--names", "--format", "json"])
    rows = {r["spelling"]: r for r in json.loads(names.output)}
    assert rows["H100"]["sheet_default"] == "H100-SXM-80GB" and len(rows["H100"]["ids"]) == 3
    assert rows["A100"]["sheet_default"] is None
    assert rows["RTX 4090D"]["ids"] == ["RTX-4090D-24GB"]


def test_gpus_table_shows_the_capabilities():
    result = CliRunner().invoke(cli, ["gpus"])
    header, _rule, *rows = result.output.splitlines()
    for column in ("CC", "FP8", "FlashAttn", "stack"):
        assert column in header
    by_id = {row.split()[0]: row.split() for row in rows}
    assert by_id["Quadro-RTX-8000-48GB"][-4:] == ["7.5", "no", "-", "cuda"]
    assert by_id["H100-SXM-80GB"][-4:] == ["9.0", "yes", "3", "cuda"]
    assert by_id["GH200-96GB"][-1] == "cuda/aarch64"
    assert by_id["MI300X-192GB"][-4:] == ["-", "yes", "2", "rocm"]
