"""The GPU catalog (`data/gpus.toml`) and the mapping of provider GPU spellings onto its ids.

Providers name one GPU many ways ("NVIDIA GeForce RTX 4090", "RTX 4090", "geforcertx4090-pcie-24gb")
and one name can cover several GPUs ("A100 SXM4" is 40 GB or 80 GB). `normalise` maps a spelling to a
catalog id in three steps, and never by similarity (provider-apis.md 9.1 and 11.10: the RTX 6000 /
RTX 6000 Ada / RTX PRO 6000 mix-up is the classic error):

1. canonicalise the text: case, separators, a leading "8x" count and words that never tell two GPUs
   apart (NVIDIA, GeForce, Tesla, ...);
2. look the whole name up in the explicit alias table built from the catalog;
3. parse its structure: strip the memory ("80GB") and then the variant ("SXM5", "PCIe", "NVL") and look
   the family up again, keeping the stripped facts as filters.

A name listed as ambiguous resolves only when the memory in the name, a memory hint or a form-factor
hint leaves exactly one candidate. A name that says PCIe only ever maps to a PCIe record, and NVL
cards are neither PCIe nor SXM for that purpose.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from pydantic import ValidationError

from rentopt.optimizer import packaged_data
from rentopt.optimizer.errors import UnknownGpuError
from rentopt.optimizer.models import GpuMatch, GpuSpec

CATALOG_RESOURCE = ("data", "gpus.toml")

# Reported memory sits a few percent below the label (MiB vs GB, reserved memory: H100 81,559 MiB
# for "80GB", A10 23,028 MiB for "24GB"); gpuhunt accepts a reported size within 7 % of a known one
# (github:dstackai/gpuhunt src/gpuhunt/_internal/constraints.py, correct_gpu_memory_gib).
MEMORY_TOLERANCE = 0.07

FORM_FACTORS = ("SXM", "PCIe", "OAM")
GPU_CLASSES = ("datacenter", "workstation", "consumer")

# Words that never tell two GPUs apart. "Quadro" is NOT one of them: "Quadro RTX 6000" (Turing,
# 24 GB) and "RTX 6000" (which may be the Ada card) differ exactly by it.
_NOISE_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct", "intel", "huawei", "generation"})
# Memory technology words: dropped in the structural step, they never decide between records.
_MEMORY_TYPE_WORDS = frozenset({"hbm2", "hbm2e", "hbm3", "hbm3e", "gddr6", "gddr6x", "gddr7"})
_VARIANT_WORDS = {
    "sxm": "SXM", "sxm2": "SXM", "sxm3": "SXM", "sxm4": "SXM", "sxm5": "SXM", "sxm6": "SXM",
    "pcie": "PCIe", "nvl": "NVL", "oam": "OAM",
}
_SEPARATORS = re.compile(r"[\s_\-/(),:;+]+")
_MEMORY_WORD = re.compile(r"^(\d+(?:\.\d+)?)(?:gb|gib|g)$")
_COUNT_PREFIX = re.compile(r"^\d+x$")

# Keys a [[gpu]] table may hold: GpuSpec's fields, with `class` accepted for `gpu_class`.
_SPEC_FIELDS = frozenset(GpuSpec.model_fields)
_ALLOWED_KEYS = (_SPEC_FIELDS - {"gpu_class"}) | {"class"}
# GpuSpec fields that are required but may be null: TOML has no null, so a missing key means None.
_NULLABLE_REQUIRED = ("bf16_tflops", "fp16_tflops", "nvlink_gbps")
# What a job can run on the card: every record states these (GpuSpec's defaults are not a
# statement about a card), and CUDA records also their compute capability.
CAPABILITY_KEYS = ("bf16", "fp8", "flash_attention", "stack", "host_arch", "bitsandbytes")


# --------------------------------------------------------------------------------------------
# Canonical spelling


def name_tokens(raw: str) -> list[str]:
    """The words of a GPU spelling, lower-cased, with counts, vendor words and separators gone.

    >>> name_tokens("NVIDIA GeForce RTX 4090")
    ['rtx', '4090']
    >>> name_tokens("1x H100 SXM5 80GB")
    ['h100', 'sxm5', '80gb']
    >>> name_tokens("H100 (80 GB SXM5)")
    ['h100', '80gb', 'sxm5']
    >>> name_tokens("geforcertx4090-pcie-24gb")
    ['rtx4090', 'pcie', '24gb']
    >>> name_tokens("Tesla V100-PCI-E-16GB")
    ['v100', 'pcie', '16gb']
    """
    text = raw.lower()
    text = re.sub(r"pci[\s_\-]?e(?:xpress)?\b", "pcie", text)
    text = re.sub(r"(\d)\s+(gib|gb|g)\b", r"\1\2", text)  # "80 GB" -> "80gb"
    words = [w for w in _SEPARATORS.split(text) if w]
    if len(words) > 1 and _COUNT_PREFIX.match(words[0]):  # DataCrunch "8x H100 SXM5 80GB"
        words = words[1:]
    out = []
    for word in words:
        if word.startswith("geforce") and len(word) > len("geforce"):  # TensorDock "geforcertx4090"
            word = word[len("geforce"):]
        if word not in _NOISE_WORDS:
            out.append(word)
    return out


def canonical_key(raw: str) -> str:
    """The lookup key of a spelling: its words joined, so spacing and separators do not matter.

    >>> canonical_key("NVIDIA  RTX A4500") == canonical_key("RTXA4500") == "rtxa4500"
    True
    >>> canonical_key("H100_NVL")
    'h100nvl'
    """
    return "".join(name_tokens(raw))


def form_factor_of(text: str) -> str:
    """The form factor ("SXM", "PCIe", "NVL", "OAM") a hint or a name word stands for.

    >>> form_factor_of("SXM5"), form_factor_of("pci-e"), form_factor_of("NVL")
    ('SXM', 'PCIe', 'NVL')
    """
    words = name_tokens(text)
    if len(words) == 1 and words[0] in _VARIANT_WORDS:
        return _VARIANT_WORDS[words[0]]
    raise ValueError(f"unknown form factor {text!r}; use SXM, PCIe, NVL or OAM")


def memory_matches(label_gb: float, reported_gb: float) -> bool:
    """Whether a reported memory size is the labelled one (within MEMORY_TOLERANCE).

    >>> memory_matches(80, 81559 / 1024), memory_matches(24, 23028 / 1024)
    (True, True)
    >>> memory_matches(40, 80), memory_matches(80, 94)
    (False, False)
    """
    return abs(reported_gb - label_gb) <= MEMORY_TOLERANCE * label_gb


def variant_of(spec: GpuSpec) -> str:
    """The variant a name word must name to select `spec`: its form factor, or "NVL" for NVL cards."""
    return "NVL" if "NVL" in spec.id.split("-") else spec.form_factor


def _fits_memory(spec: GpuSpec, gb: float) -> bool:
    # A multi-device card (MI250X: 2 x 64 GB) may be reported per device.
    return memory_matches(spec.memory_gb, gb) or (
        spec.devices_per_card > 1 and memory_matches(spec.memory_gb / spec.devices_per_card, gb)
    )


# --------------------------------------------------------------------------------------------
# Loading


def parse_catalog(text: str) -> dict[str, GpuSpec]:
    """Parse and check a catalog in the gpus.toml format; ValueError names the bad record and field."""
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"GPU catalog is not valid TOML: {exc}") from exc
    return catalog_from_data(data)


def catalog_from_data(data: Mapping[str, Any]) -> dict[str, GpuSpec]:
    """Check a catalog as tomllib reads the gpus.toml format; ValueError names the bad record and field."""
    records = data.get("gpu")
    if not isinstance(records, list) or not records:
        raise ValueError("GPU catalog has no [[gpu]] records")
    catalog: dict[str, GpuSpec] = {}
    for position, record in enumerate(records, start=1):
        spec = _spec_from_record(record, position)
        if spec.id in catalog:
            raise ValueError(f"GPU catalog lists {spec.id} twice")
        catalog[spec.id] = spec
    build_alias_index(catalog.values())  # alias clashes are catalog errors, found at load time
    _check_relatives(catalog)
    return catalog


def _check_relatives(catalog: Mapping[str, GpuSpec]) -> None:
    """Every card without its own matmul measurement names a measured card to derive it from."""
    for spec in catalog.values():
        if spec.mamf_relative is None:
            continue
        relative = catalog.get(spec.mamf_relative)
        if relative is None:
            raise ValueError(f"{spec.id}: mamf_relative {spec.mamf_relative!r} is not in the catalog")
        if relative.mamf_bf16_tflops is None and relative.mamf_fp16_tflops is None:
            raise ValueError(f"{spec.id}: mamf_relative {relative.id} has no measured matmul ceiling of its own")
        if spec.mamf_rule == "power" and (spec.power_w is None or relative.power_w is None):
            raise ValueError(f"{spec.id}: mamf_rule power needs power_w on it and on {relative.id}")


def _spec_from_record(record: Mapping[str, Any], position: int) -> GpuSpec:
    where = f"GPU catalog record {position} ({record.get('id', 'no id')})"
    unknown = sorted(set(record) - _ALLOWED_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}")
    missing = [key for key in CAPABILITY_KEYS if key not in record]
    if record.get("stack", "cuda") == "cuda" and "compute_capability" not in record:
        missing.append("compute_capability")
    if missing:
        raise ValueError(f"{where}: capability field(s) missing: {', '.join(missing)}")
    fields = {("gpu_class" if key == "class" else key): value for key, value in record.items()}
    for key in _NULLABLE_REQUIRED:
        fields.setdefault(key, None)
    try:
        spec = GpuSpec(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"{where}: {problems}") from exc
    if spec.form_factor not in FORM_FACTORS:
        raise ValueError(f"{where}: form_factor must be one of {', '.join(FORM_FACTORS)}")
    if not (spec.memory_gb > 0 and spec.memory_bandwidth_gbps > 0):
        raise ValueError(f"{where}: memory_gb and memory_bandwidth_gbps must be positive")
    if not spec.sources:
        raise ValueError(f"{where}: every record needs at least one source")
    if spec.flash_attention not in (0, 2, 3):
        raise ValueError(f"{where}: flash_attention must be 0, 2 or 3 (the FlashAttention generation)")
    if spec.bf16 != (spec.bf16_tflops is not None) or spec.fp8 != (spec.fp8_tflops is not None):
        raise ValueError(f"{where}: bf16/fp8 must agree with bf16_tflops/fp8_tflops")
    _check_measurements(spec, where)
    keys = {canonical_key(a) for a in spec.ambiguous_aliases}
    stray = [a for a in spec.sheet_default_for if canonical_key(a) not in keys]
    if stray:
        raise ValueError(f"{where}: sheet_default_for {', '.join(stray)} must be among its ambiguous_aliases")
    return spec


# A measured ceiling above the spec by more than this is a sparse/dense or per-card/per-device mix-up.
# GeForce cards boost past their spec clock: the RTX 5090 measures 1.14 x its spec (zzc0721 table).
MEASURED_OVER_SPEC = 1.2


def _check_measurements(spec: GpuSpec, where: str) -> None:
    if not spec.mamf_source:
        raise ValueError(f"{where}: mamf_source must say which benchmark measured the card, or that none did")
    if not spec.training_source:
        raise ValueError(f"{where}: training_source must name the published training run, or say none was found")
    measured = spec.mamf_bf16_tflops is not None or spec.mamf_fp16_tflops is not None
    if measured and spec.mamf_relative is not None:
        raise ValueError(f"{where}: give measured mamf_* figures or a mamf_relative, not both")
    if spec.mamf_relative is None and not measured and spec.mamf_rule != "efficiency":
        raise ValueError(f"{where}: mamf_rule applies only with a mamf_relative")
    for dtype, value, peak in (("bf16", spec.mamf_bf16_tflops, spec.bf16_tflops),
                               ("fp16", spec.mamf_fp16_tflops, spec.fp16_tflops),
                               ("fp8", spec.mamf_fp8_tflops, spec.fp8_tflops)):
        if value is None:
            continue
        if peak is None:
            raise ValueError(f"{where}: mamf_{dtype}_tflops given but the card has no {dtype} tensor rate")
        if not 0 < value <= peak * MEASURED_OVER_SPEC:
            raise ValueError(f"{where}: mamf_{dtype}_tflops {value:g} is not within (0, {MEASURED_OVER_SPEC} x spec {peak:g}]")
    if spec.power_w is not None and spec.power_w <= 0:
        raise ValueError(f"{where}: power_w must be positive")
    if spec.memory_bandwidth_measured_gbps is not None and not (
            0 < spec.memory_bandwidth_measured_gbps <= spec.memory_bandwidth_gbps):
        raise ValueError(f"{where}: memory_bandwidth_measured_gbps must be positive and at most the spec bandwidth")
    if spec.nvlink_domain_gpus is not None and (spec.nvlink_domain_gpus < spec.max_gpus_per_node or not spec.nvlink_gbps):
        raise ValueError(f"{where}: nvlink_domain_gpus needs NVLink and spans at least one node")


@lru_cache(maxsize=1)
def _packaged_catalog() -> dict[str, GpuSpec]:
    return catalog_from_data(packaged_data.load("/".join(CATALOG_RESOURCE)))


def load_catalog() -> dict[str, GpuSpec]:
    """The packaged catalog, id -> GpuSpec, in file order (parsed once; a fresh dict per call)."""
    return dict(_packaged_catalog())


def all_gpus() -> list[GpuSpec]:
    return list(_packaged_catalog().values())


def get_gpu(gpu_id: str) -> GpuSpec:
    """The record with exactly this canonical id; KeyError otherwise (see resolve_user_gpu for names)."""
    try:
        return _packaged_catalog()[gpu_id]
    except KeyError:
        raise KeyError(f"no GPU with id {gpu_id!r} in the catalog") from None


def select_gpus(gpu_class: str | None = None, min_memory_gb: float | None = None) -> list[GpuSpec]:
    """Catalog records of one class and/or with at least `min_memory_gb` of memory, in file order."""
    if gpu_class is not None and gpu_class not in GPU_CLASSES:
        raise ValueError(f"unknown GPU class {gpu_class!r}; use {', '.join(GPU_CLASSES)}")
    return [
        g for g in all_gpus()
        if (gpu_class is None or g.gpu_class == gpu_class)
        and (min_memory_gb is None or g.memory_gb >= min_memory_gb)
    ]


# --------------------------------------------------------------------------------------------
# Alias index


@dataclass(frozen=True)
class AliasIndex:
    """GPU spellings by canonical key: the ones that name one record, and the ambiguous ones."""

    exact: Mapping[str, str]  # canonical key -> id
    ambiguous: Mapping[str, tuple[str, ...]]  # canonical key -> candidate ids, catalog order
    sheet_defaults: Mapping[str, str] = field(default_factory=dict)  # ambiguous key -> the bare name's default id


def build_alias_index(specs: Iterable[GpuSpec]) -> AliasIndex:
    """Canonical key -> id(s). Raises ValueError when a key names two records or is both kinds."""
    exact: dict[str, str] = {}
    ambiguous: dict[str, list[str]] = {}
    defaults: dict[str, str] = {}
    for spec in specs:
        for alias in (spec.id, *spec.aliases):
            key = canonical_key(alias)
            if not key:
                raise ValueError(f"{spec.id}: alias {alias!r} is empty once canonicalised")
            owner = exact.setdefault(key, spec.id)
            if owner != spec.id:
                raise ValueError(f"alias {alias!r} of {spec.id} is also an alias of {owner}")
        for alias in spec.ambiguous_aliases:
            ids = ambiguous.setdefault(canonical_key(alias), [])
            if spec.id not in ids:
                ids.append(spec.id)
        for alias in spec.sheet_default_for:
            owner = defaults.setdefault(canonical_key(alias), spec.id)
            if owner != spec.id:
                raise ValueError(f"{spec.id} and {owner} are both the sheet default for {alias!r}")
    both = sorted(set(exact) & set(ambiguous))
    if both:
        raise ValueError(f"GPU catalog lists {', '.join(both)} both as an alias and as ambiguous")
    single = sorted(k for k, ids in ambiguous.items() if len(ids) < 2)
    if single:
        raise ValueError(f"ambiguous alias(es) {', '.join(single)} name only one record; make them aliases")
    return AliasIndex(exact, {k: tuple(ids) for k, ids in ambiguous.items()}, defaults)


@lru_cache(maxsize=1)
def _index() -> AliasIndex:
    return build_alias_index(_packaged_catalog().values())


# --------------------------------------------------------------------------------------------
# Normalisation


@dataclass(frozen=True)
class _NameFacts:
    """What a spelling says besides its family: memory ("80GB") and variant ("SXM5")."""

    memory_gb: float | None
    variant: str | None
    contradictory: bool  # two memories or two variants: the name cannot be trusted


def _name_facts(words: list[str]) -> _NameFacts:
    memories = {float(m.group(1)) for w in words if (m := _MEMORY_WORD.match(w))}
    variants = {_VARIANT_WORDS[w] for w in words if w in _VARIANT_WORDS}
    return _NameFacts(
        memory_gb=next(iter(memories)) if len(memories) == 1 else None,
        variant=next(iter(variants)) if len(variants) == 1 else None,
        contradictory=len(memories) > 1 or len(variants) > 1,
    )


def _lookup_keys(words: list[str]) -> list[tuple[str, bool]]:
    """Keys to try, most specific first, each with whether the name's facts were stripped from it."""
    keys = [("".join(words), False)]
    no_memory = [w for w in words if not _MEMORY_WORD.match(w)]
    if len(no_memory) < len(words):
        keys.append(("".join(no_memory), True))
    family = [w for w in no_memory if w not in _VARIANT_WORDS and w not in _MEMORY_TYPE_WORDS]
    if family and len(family) < len(no_memory):
        keys.append(("".join(family), True))
    return keys


def normalise(
    raw_name: str, memory_hint_gb: float | None = None, *, form_factor_hint: str | None = None,
    interconnect_hint: str | None = None, sheet_defaults: bool = False,
) -> GpuMatch:
    """Map a provider's GPU spelling to a catalog id.

    `memory_hint_gb` is the per-GPU memory the provider reports (GB or GiB; e.g. Vast gpu_ram / 1024);
    None, 0 or a negative/NaN value means no hint. `form_factor_hint` is "SXM", "PCIe", "NVL" or "OAM"
    (spellings like "SXM5" are accepted). `interconnect_hint` "pcie" says the GPUs talk over PCIe,
    which no SXM/OAM part does. Status: "exact" when the name alone decides (memory or variant
    written in the name count as the name), "by_memory" when a hint was needed, "ambiguous" (gpu
    None, candidates listed) when several records remain, "unknown" (gpu None) when nothing matches.

    `sheet_defaults=True` is for hand-written price sheets and catalogs that write bare names
    (SkyPilot's "H100"): a bare name that several records share and that one record claims in
    `sheet_default_for` resolves to that record (status "default", the other candidates listed and
    named in the note). Provider plugins leave it off, so their normalisation stays exact. A name
    that says PCIe never gets an SXM default: the default is only taken among the candidates the
    name and the hints leave.

    >>> normalise("NVIDIA GeForce RTX 4090").gpu
    'RTX-4090-24GB'
    >>> m = normalise("A100 SXM4", 81920 / 1024)
    >>> m.gpu, m.status
    ('A100-SXM4-80GB', 'by_memory')
    >>> normalise("H100", 80).status
    'ambiguous'
    >>> m = normalise("H100", sheet_defaults=True)
    >>> m.gpu, m.status
    ('H100-SXM-80GB', 'default')
    """
    return _normalise(raw_name, memory_hint_gb, form_factor_hint, interconnect_hint, sheet_defaults)


# Catalogs and offers files repeat a few dozen spellings over thousands of rows: each distinct
# (spelling, hints) is worked out once per process (GpuMatch is frozen, so sharing it is safe).
@lru_cache(maxsize=4096)
def _normalise(raw_name: str, memory_hint_gb: float | None, form_factor_hint: str | None,
               interconnect_hint: str | None, sheet_defaults: bool) -> GpuMatch:
    memory_hint = memory_hint_gb if memory_hint_gb and math.isfinite(memory_hint_gb) and memory_hint_gb > 0 else None
    hint_variant = form_factor_of(form_factor_hint) if form_factor_hint else None
    if interconnect_hint not in (None, "nvlink", "pcie", "unknown"):
        raise ValueError(f"unknown interconnect {interconnect_hint!r}; use nvlink, pcie or unknown")
    words = name_tokens(raw_name)
    if not words:
        return GpuMatch(raw=raw_name, gpu=None, status="unknown", note="empty GPU name")
    facts = _name_facts(words)
    # A name stating two memories or two variants is only trusted as a literal alias.
    keys = [("".join(words), False)] if facts.contradictory else _lookup_keys(words)
    index, catalog = _index(), _packaged_catalog()
    hints = _Hints(memory_hint, hint_variant, interconnect_hint == "pcie")
    for key, facts_stripped in keys:
        if key in index.exact:
            spec = catalog[index.exact[key]]
            if facts_stripped and not _consistent(spec, facts.variant, None):
                return GpuMatch(raw=raw_name, gpu=None, status="unknown",
                                note=f"the name says {facts.variant} but {spec.id} is {variant_of(spec)}")
            return _exact(raw_name, spec, facts.memory_gb if facts_stripped else None, memory_hint, hint_variant)
        if key in index.ambiguous:
            defaults = _defaults_for(key, index) if sheet_defaults else {}
            return _choose(raw_name, [catalog[i] for i in index.ambiguous[key]], facts, hints, defaults)
    note = "the name states two memory sizes or variants" if facts.contradictory else "no catalog alias matches this name"
    return GpuMatch(raw=raw_name, gpu=None, status="unknown", note=note)


@dataclass(frozen=True)
class _Hints:
    """What an offer says besides the name: per-GPU memory, form factor, and a PCIe-only link."""

    memory_gb: float | None
    variant: str | None
    pcie_link: bool  # the GPUs talk over PCIe: not an SXM/OAM part (those always sit on NVLink/fabric)

    def admit(self, spec: GpuSpec) -> bool:
        if self.pcie_link and spec.form_factor in ("SXM", "OAM"):
            return False
        return _consistent(spec, self.variant, self.memory_gb)

    def used(self) -> str:
        parts = [f"memory hint {self.memory_gb:g} GB" if self.memory_gb is not None else "",
                 f"form-factor hint {self.variant}" if self.variant is not None else "",
                 "interconnect pcie" if self.pcie_link else ""]
        return " and ".join(p for p in parts if p)


def _consistent(spec: GpuSpec, variant: str | None, memory_gb: float | None) -> bool:
    return (variant is None or variant_of(spec) == variant) and (memory_gb is None or _fits_memory(spec, memory_gb))


def _exact(raw: str, spec: GpuSpec, name_memory: float | None, memory_hint: float | None,
           hint_variant: str | None) -> GpuMatch:
    notes = []
    for what, gb in (("the name's memory", name_memory), ("memory hint", memory_hint)):
        if gb is not None and not _fits_memory(spec, gb):
            notes.append(f"{what} {gb:g} GB differs from {spec.id} ({spec.memory_gb:g} GB): "
                         "a modified card or a provider reporting error")
    if hint_variant is not None and hint_variant != variant_of(spec):
        notes.append(f"form-factor hint {hint_variant} ignored: the name identifies {spec.id} ({variant_of(spec)})")
    return GpuMatch(raw=raw, gpu=spec.id, status="exact", note="; ".join(notes))


def _defaults_for(key: str, index: AliasIndex) -> dict[tuple[str, ...], str]:
    """Sheet defaults that may settle `key`: its own (whatever the hints leave, if it is among
    them), and those of other bare names, each for exactly the cards that name means ("A100" with
    gpu_memory_gb 80 leaves what "A100 80GB" means, so it reads the same)."""
    out = {index.ambiguous[k]: gpu for k, gpu in index.sheet_defaults.items() if k != key}
    if key in index.sheet_defaults:
        out[()] = index.sheet_defaults[key]
    return out


def _choose(raw: str, candidates: list[GpuSpec], facts: _NameFacts, hints: _Hints,
            defaults: Mapping[tuple[str, ...], str]) -> GpuMatch:
    named = [c for c in candidates if _consistent(c, facts.variant, facts.memory_gb)]
    if not named:
        return GpuMatch(raw=raw, gpu=None, status="unknown",
                        note=f"none of {', '.join(c.id for c in candidates)} matches the memory or variant in the name")
    if len(named) == 1:
        return GpuMatch(raw=raw, gpu=named[0].id, status="exact")
    hinted = [c for c in named if hints.admit(c)]
    ids = tuple(c.id for c in named)
    if len(hinted) == 1:
        return GpuMatch(raw=raw, gpu=hinted[0].id, status="by_memory", candidates=ids,
                        note=f"chosen among {', '.join(ids)} by {hints.used()}")
    if not hinted:
        return GpuMatch(raw=raw, gpu=None, status="ambiguous", candidates=ids,
                        note="the memory/form-factor hints match none of the candidates")
    left = tuple(c.id for c in hinted)
    default = defaults.get(()) if defaults.get(()) in left else defaults.get(left)
    if default in left:
        others = [i for i in left if i != default]
        return GpuMatch(raw=raw, gpu=default, status="default", candidates=left,
                        note=f"{raw!r} read as {default}, the variant a bare name means on price sheets "
                             f"(`rentopt gpus --names`); if it is {_or_list(others)}, give form_factor or gpu_memory_gb")
    return GpuMatch(raw=raw, gpu=None, status="ambiguous", candidates=left,
                    note="several catalog GPUs share this name; pass a memory or form-factor hint")


def spellings() -> list[dict[str, Any]]:
    """Every spelling the catalog knows, once per canonical key, with the id(s) it maps to and how
    (for `rentopt gpus --names`)."""
    index, rows, seen = _index(), [], set()
    for spec in all_gpus():
        for alias in (spec.id, *spec.aliases, *spec.ambiguous_aliases):
            key = canonical_key(alias)
            if key in seen:
                continue
            seen.add(key)
            if key in index.exact:
                rows.append({"spelling": alias, "ids": [index.exact[key]], "how": "exact"})
                continue
            ids = list(index.ambiguous[key])
            default = index.sheet_defaults.get(key)
            how = "ambiguous: needs memory or form factor" + (
                f"; price sheets read it as {default}" if default else "; price sheets too")
            rows.append({"spelling": alias, "ids": ids, "how": how, "sheet_default": default})
    return rows


# --------------------------------------------------------------------------------------------
# User input


def read_gpu_name(raw: str, memory_gb: float | None = None, *, form_factor: str | None = None,
                  interconnect: str | None = None) -> GpuMatch:
    """The one reader of GPU names written by people: --gpu, --exclude-gpu, --on, offers files,
    price sheets and `rentopt gpus NAME` all read a name through it, so they agree.

    Case and separators do not matter. A bare name several cards share reads as the variant the
    catalog names for it (`sheet_default_for`: H100 and H200 are the SXM cards, as SkyPilot and
    gpuhunt read them), narrowed first by the memory, form factor and interconnect given with it,
    and the match's note says so; a bare name whose variants differ in memory ("A100": 40 or
    80 GB) stays ambiguous, for the person to choose. Provider plugins read their feeds with
    `normalise` and no defaults: a feed never guesses.

    >>> m = read_gpu_name("h100")
    >>> m.gpu, m.status
    ('H100-SXM-80GB', 'default')
    >>> read_gpu_name("A100").status, read_gpu_name("A100", 40).gpu
    ('ambiguous', None)
    >>> read_gpu_name("H100", form_factor="PCIe").gpu
    'H100-PCIe-80GB'
    """
    return normalise(raw, memory_gb, form_factor_hint=form_factor,
                     interconnect_hint=interconnect if interconnect in ("nvlink", "pcie") else None,
                     sheet_defaults=True)


def resolve_user_gpu(text: str) -> GpuSpec:
    """A GPU named by a user (`--gpu`): a catalog id or any alias, case-insensitive; see
    `read_user_gpu` for the sentence that says how a bare name was read."""
    return read_user_gpu(text)[0]


def read_user_gpu(text: str) -> tuple[GpuSpec, str]:
    """A GPU named on the command line, read as `read_gpu_name` reads it, and an assumption line
    when a bare name was read as its usual variant ("" when the name said which card).

    Raises UnknownGpuError with one line that lists the candidates of an ambiguous name (the
    user chooses) or the closest catalog ids to a typo (difflib is fine here: this is a
    person's typing, not a feed).
    """
    if not text.strip():
        raise UnknownGpuError("empty GPU name: pass a catalog id such as H100-SXM-80GB (see `rentopt gpus`).")
    match = read_gpu_name(text)
    if match.gpu is not None:
        spec = get_gpu(match.gpu)
        typed_memory = _name_facts(name_tokens(text)).memory_gb
        literal_alias = canonical_key(text) in _index().exact  # "NVIDIA GH200 480GB" counts host memory
        if literal_alias or typed_memory is None or _fits_memory(spec, typed_memory):
            note = ""
            if match.status == "default":
                others = [c for c in match.candidates if c != spec.id]
                note = (f"GPU {text.strip()!r} read as {spec.id}, the card a bare {text.strip()!r} means in price "
                        f"sheets and catalogs; name {_or_list(others)} to mean another")
            return spec, note
        # A provider's misstated memory is only noted; a person's is more likely a typo.
        raise UnknownGpuError(
            f"GPU {text!r} says {typed_memory:g} GB but {spec.id} has {spec.memory_gb:g} GB: "
            f"did you mean {spec.id}? Run `rentopt gpus` to list every id."
        )
    if match.status == "ambiguous":
        raise UnknownGpuError(
            f"GPU name {text!r} is ambiguous: choose {_or_list(match.candidates)} "
            f"(their memory or form factor differs; `rentopt gpus {text.strip()}` shows how names are read)."
        )
    suggestions = _close_ids(text)
    if suggestions:
        raise UnknownGpuError(
            f"unknown GPU {text!r}: did you mean {_or_list(suggestions)}? Run `rentopt gpus` to list every id."
        )
    raise UnknownGpuError(f"unknown GPU {text!r}: run `rentopt gpus` to list the catalog ids.")


def _close_ids(text: str, limit: int = 3) -> list[str]:
    import difflib  # only for an unknown name's message: a quote of known GPUs never loads it

    index = _index()
    names: dict[str, list[str]] = {key: [gpu_id] for key, gpu_id in index.exact.items()}
    names.update({key: list(ids) for key, ids in index.ambiguous.items()})
    found: list[str] = []
    for key in difflib.get_close_matches(canonical_key(text), list(names), n=10, cutoff=0.6):
        for gpu_id in names[key]:
            if gpu_id not in found:
                found.append(gpu_id)
    return found[:limit]


def _or_list(items: Iterable[str]) -> str:
    """
    >>> _or_list(["a"]), _or_list(["a", "b", "c"])
    ('a', 'a, b or c')
    """
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"



# --------------------------------------------------------------------------------------------
# What a card really does: matmul ceiling, memory bandwidth, published training runs

# The power rule (mamf_rule = "power"): a card with less board power per peak TFLOPS than its
# measured relative runs its tensor cores at lower clocks. The one measured pair of one die at two
# power limits, A100 SXM (400 W) 271.2 and A100 PCIe (300 W) 252.9 TFLOPS at the same 312 TFLOPS
# spec (stas00/ml-engineering MAMF table), gives 252.9 / 271.2 = (300 / 400) ** 0.24; a card with
# more power per TFLOPS than its relative keeps the relative's efficiency (it is not power-bound).
POWER_EXPONENT = 0.24
# FP8 where a card's bf16 is measured but its fp8 is not: H100 SXM reaches 70.9 % of its fp8 spec
# against 80.3 % in bf16 (stas00 MAMF table), a ratio of 0.88; the lowest of the measured pairs
# (H200 0.92, GH200 0.93, B300 0.95, B200 0.98, GB200 0.99), so no card is made faster than measured.
FP8_EFFICIENCY_RATIO = 0.88
# A card with no measured relative (Volta, Pascal, Ascend): the median efficiency of the measured
# NVIDIA datacenter parts in the stas00 MAMF table (A100 SXM 86.9 %, GH200 83.8 %, A100 PCIe 81.1 %,
# H100 SXM 80.3 %, B300 78.6 %, B200 77.6 %, GB200 72.9 %: median 80.3 %).
DEFAULT_MAMF_EFFICIENCY = 0.80
# Achievable fraction of spec memory bandwidth where no measurement is published: streaming
# kernels (NVIDIA's copy benchmarks, BabelStream) reach ~80-90 % of the data sheet on A100/H100;
# the low end.
ACHIEVABLE_BANDWIDTH_FRACTION = 0.80
# The speed range of a plan on a card no published training run was measured on (issue 22).
UNMEASURED_TRAINING_RANGE = (0.5, 1.3)

MatmulBasis = Literal["measured", "derived", "default"]


@dataclass(frozen=True)
class MatmulCeiling:
    """A card's maximum achievable dense matmul rate in one dtype, and where it comes from."""

    tflops: float
    spec_tflops: float
    dtype: str  # "bf16", "fp16", "fp8" or "fp32"
    basis: MatmulBasis  # measured on this card; derived from a measured relative; the default rule
    how: str  # the benchmark, or the rule with the relative it was applied to

    @property
    def efficiency(self) -> float:
        return self.tflops / self.spec_tflops if self.spec_tflops else 0.0


def matmul_dtype(gpu: GpuSpec, precision: str = "bf16") -> str:
    """The tensor dtype a training precision runs its matmuls in on `gpu`, with the same fallbacks
    as GpuSpec.dense_tflops: fp8 only on fp8 cards, fp16 on cards without bf16 (T4, V100).

    >>> matmul_dtype(get_gpu("H100-SXM-80GB"), "fp8"), matmul_dtype(get_gpu("A100-SXM4-80GB"), "fp8")
    ('fp8', 'bf16')
    >>> matmul_dtype(get_gpu("T4-16GB"), "bf16-mixed"), matmul_dtype(get_gpu("RTX-4090-24GB"), "fp16-mixed")
    ('fp16', 'fp16')
    """
    if precision.startswith("fp8") and gpu.fp8_tflops:
        return "fp8"
    if precision.startswith("fp32"):
        return "fp32"
    if precision.startswith("fp16") or not gpu.bf16_tflops:
        return "fp16" if gpu.fp16_tflops else "bf16"
    return "bf16"


def _spec_tflops(gpu: GpuSpec, dtype: str) -> float:
    value = {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp8": gpu.fp8_tflops,
             "fp32": gpu.fp32_tflops}[dtype]
    return value or 0.0


def _measured_tflops(gpu: GpuSpec, dtype: str) -> float | None:
    if dtype == "fp16" and gpu.mamf_fp16_tflops is None and gpu.fp16_tflops == gpu.bf16_tflops:
        return gpu.mamf_bf16_tflops  # one tensor rate for both 16-bit formats: a bf16 GEMM measures it
    if dtype == "bf16" and gpu.mamf_bf16_tflops is None and not gpu.bf16_tflops:
        return gpu.mamf_fp16_tflops
    return {"bf16": gpu.mamf_bf16_tflops, "fp16": gpu.mamf_fp16_tflops, "fp8": gpu.mamf_fp8_tflops}.get(dtype)


def matmul_ceiling(gpu: GpuSpec, precision: str = "bf16") -> MatmulCeiling:
    """The card's maximum achievable matmul TFLOPS for `precision` (a dtype or a training precision).

    In order: the card's own published measurement; its `mamf_relative`'s measured efficiency
    (measured / spec, same dtype) applied to its spec, lowered by the power rule where the record
    says `mamf_rule = "power"`; for fp8 the card's bf16 efficiency x FP8_EFFICIENCY_RATIO; else the
    spec x DEFAULT_MAMF_EFFICIENCY. A derived ceiling is capped at the spec.
    """
    dtype = matmul_dtype(gpu, precision)
    spec = _spec_tflops(gpu, dtype)
    own = _measured_tflops(gpu, dtype)
    if own is not None:
        return MatmulCeiling(own, spec, dtype, "measured", gpu.mamf_source)
    if gpu.mamf_relative is not None:
        relative = get_gpu(gpu.mamf_relative)
        rel_tflops, rel_spec = _measured_tflops(relative, dtype), _spec_tflops(relative, dtype)
        if rel_tflops is not None and rel_spec:
            efficiency = rel_tflops / rel_spec
            how = f"{relative.id}'s measured {dtype} efficiency {efficiency:.1%}"
            if gpu.mamf_rule == "power":
                scale = _power_scale(gpu, relative, dtype)
                efficiency *= scale
                how += (f" x {scale:.3f} for {gpu.power_w:g} W per {spec:g} TFLOPS against its "
                        f"{relative.power_w:g} W per {rel_spec:g} (power rule, exponent {POWER_EXPONENT})")
            # A derived ceiling never exceeds the spec: GeForce cards measure above it (boost clocks
            # past the rated one in short benchmarks), which is no promise for a sustained run.
            return MatmulCeiling(spec * min(1.0, efficiency), spec, dtype, "derived", how + " applied to the spec")
    if dtype == "fp8":
        base = matmul_ceiling(gpu, "bf16")
        efficiency = min(1.0, base.efficiency) * FP8_EFFICIENCY_RATIO
        return MatmulCeiling(spec * efficiency, spec, dtype, "derived" if base.basis != "default" else "default",
                             f"bf16 efficiency {base.efficiency:.1%} x {FP8_EFFICIENCY_RATIO} (fp8 vs bf16 on H100 SXM)")
    return MatmulCeiling(spec * DEFAULT_MAMF_EFFICIENCY, spec, dtype, "default",
                         f"no measured relative: spec x {DEFAULT_MAMF_EFFICIENCY} (median of measured NVIDIA datacenter parts)")


def _power_scale(gpu: GpuSpec, relative: GpuSpec, dtype: str) -> float:
    if gpu.power_w is None or relative.power_w is None:
        return 1.0
    ours = gpu.power_w / _spec_tflops(gpu, dtype)
    theirs = relative.power_w / _spec_tflops(relative, dtype)
    return min(1.0, ours / theirs) ** POWER_EXPONENT


def effective_matmul_tflops(gpu: GpuSpec, precision: str = "bf16") -> float:
    """Maximum achievable dense matmul TFLOPS of `gpu` in `precision` (see matmul_ceiling).

    >>> effective_matmul_tflops(get_gpu("H100-SXM-80GB"), "bf16")
    794.5
    """
    return matmul_ceiling(gpu, precision).tflops


def achievable_memory_bandwidth_gbps(gpu: GpuSpec) -> float:
    """Device-memory bandwidth a streaming kernel reaches: the published measurement, else the
    spec x ACHIEVABLE_BANDWIDTH_FRACTION."""
    if gpu.memory_bandwidth_measured_gbps is not None:
        return gpu.memory_bandwidth_measured_gbps
    return gpu.memory_bandwidth_gbps * ACHIEVABLE_BANDWIDTH_FRACTION


def hopper_or_newer(gpu: GpuSpec) -> bool:
    """Hopper and datacenter Blackwell parts (not the GB202 workstation/GeForce die): the cards whose
    tensor cores FlashAttention-2 does not use, and which run Hopper-native fused attention."""
    arch = gpu.architecture.lower()
    return any(a in arch for a in ("hopper", "blackwell")) and "gb202" not in arch


def unmeasured_training_note(gpu: GpuSpec) -> str | None:
    """The line every plan on a card without a published training run carries (issue 22), or None."""
    if gpu.training_measured:
        return None
    low, high = UNMEASURED_TRAINING_RANGE
    return f"no published training run on this card: range widened to x{low:g}-x{high:g}"
