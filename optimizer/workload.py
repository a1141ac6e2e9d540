"""Model names to architectures: presets ("llama-2-13b"), bare sizes ("13b"), or a config.json.

`resolve_model` is the one entry point the rest of rentopt uses. Whatever it had to assume
(a size mapped to a shape, a field defaulted in a config.json) goes into the returned spec's
`notes`, so every estimate can say what it was computed for.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from pathlib import Path
from typing import Any

from rentopt.optimizer import packaged_data
from rentopt.optimizer.errors import InputError, UnknownModelError
from rentopt.optimizer.models import ModelSpec

# Sizes above this are a typo, not a model: the largest published dense decoders are ~0.5T
# (Llama-3.1-405B; Megatron-Turing NLG 530B, arXiv:2201.11990) and the largest MoE ~1T.
MAX_PARAMS = 2 * 10**12

# A bare size whose nearest preset is further off than this gets a warning in the note: memory and
# time scale with the parameter count, so a 20 % gap is a 20 % error in the estimate.
FAR_FROM_SIZE = 0.2

# A config.json is a few KB; anything this large is not one (a weights file renamed by mistake).
MAX_CONFIG_BYTES = 4 * 2**20

_SIZE_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([mbt])$", re.IGNORECASE)
_BARE_NUMBER_RE = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_UNIT = {"m": 10**6, "b": 10**9, "t": 10**12}

# Instruct/chat builds share the base model's architecture, so these suffixes are dropped before
# a second lookup ("Qwen/Qwen2.5-7B-Instruct" -> "qwen2.5-7b").
_VARIANT_SUFFIXES = ("-hf", "-instruct", "-chat", "-it", "-base")


# ------------------------------------------------------------------------------------------
# Bare sizes


def parse_size(text: str) -> int | None:
    """Parameter count written as a size ("13b", "350M", "0.5B", "1.3b"); None if not a size.

    >>> parse_size("13b")
    13000000000
    >>> parse_size("350M")
    350000000
    >>> parse_size("0.5B")
    500000000
    >>> parse_size(" 6.7 b ")
    6700000000
    >>> parse_size("2t")
    2000000000000
    >>> parse_size("llama-2-13b") is None
    True
    >>> parse_size("13") is None
    True
    >>> parse_size("0b")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: model size '0b' must be more than zero parameters, e.g. 7b or 350m.
    >>> parse_size("3t")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: model size '3t' is over 2T parameters; check the unit (b = billions, m = millions).
    """
    match = _SIZE_RE.match(text.strip())
    if not match:
        return None
    try:
        count = Decimal(match.group(1)) * _UNIT[match.group(2).lower()]
    except InvalidOperation:  # pragma: no cover - the regex admits only decimal numbers
        return None
    shown = text.strip()
    if count < 1:
        raise InputError(f"model size {shown!r} must be more than zero parameters, e.g. 7b or 350m.")
    if count > MAX_PARAMS:
        raise InputError(f"model size {shown!r} is over 2T parameters; check the unit (b = billions, m = millions).")
    return int(count)


def format_params(count: int) -> str:
    """Parameter count for people: "13.0B", "6.74B", "494M".

    >>> format_params(13_015_864_320)
    '13.0B'
    >>> format_params(6_738_415_616)
    '6.74B'
    >>> format_params(494_032_768)
    '494M'
    """
    if count >= 10**10:
        return f"{count / 1e9:.1f}B"
    if count >= 10**9:
        return f"{count / 1e9:.2f}B"
    return f"{count / 1e6:.0f}M"


# ------------------------------------------------------------------------------------------
# The preset catalog (optimizer/data/models.toml)


@dataclass(frozen=True)
class _Catalog:
    """The model presets file, read: specs, lookup keys, aliases and bare sizes."""

    presets: dict[str, ModelSpec]  # id -> spec, in file order
    keys: dict[str, str]  # normalised id or alias -> id
    aliases: dict[str, tuple[str, ...]]  # id -> aliases as written in the file
    sizes: dict[int, str]  # parameter count of a bare size ("13b") -> id


def _normalise(name: str) -> str:
    """Lookup key: case-insensitive; spaces and underscores read as hyphens.

    >>> _normalise("  Meta_Llama 3 8B ")
    'meta-llama-3-8b'
    """
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@cache
def _catalog() -> _Catalog:
    return _build_catalog(packaged_data.load("data/models.toml"))


def _build_catalog(data: dict[str, Any]) -> _Catalog:
    """Validate the catalog: unique ids and aliases, sizes that name presets. Errors are bugs in
    the package data, so they say which entry is wrong."""
    presets: dict[str, ModelSpec] = {}
    keys: dict[str, str] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    for entry in data.get("model", []):
        fields = dict(entry)
        names = tuple(fields.pop("aliases", ()))
        spec = ModelSpec(**fields)
        if spec.name != _normalise(spec.name):
            raise ValueError(f"models.toml: preset id {spec.name!r} must be lower-case with hyphens")
        presets[spec.name] = spec
        aliases[spec.name] = names
        for key in (spec.name, *names):
            norm = _normalise(key)
            if keys.get(norm, spec.name) != spec.name:
                raise ValueError(f"models.toml: {key!r} names both {keys[norm]} and {spec.name}")
            keys[norm] = spec.name
    sizes: dict[int, str] = {}
    for size, name in data.get("sizes", {}).items():
        count = parse_size(size)
        if count is None or name not in presets:
            raise ValueError(f"models.toml: [sizes] {size!r} = {name!r} is not a size and a preset id")
        sizes[count] = name
    return _Catalog(presets, keys, aliases, sizes)


def load_presets() -> dict[str, ModelSpec]:
    """All presets by id (cached; the dict is a copy, the specs are frozen)."""
    return dict(_catalog().presets)


def list_presets() -> list[ModelSpec]:
    """All presets in catalog order (grouped by family, small to large)."""
    return list(_catalog().presets.values())


def preset_aliases(name: str) -> tuple[str, ...]:
    """The other names a preset answers to, as written in the catalog."""
    return _catalog().aliases.get(name, ())


def size_presets() -> dict[int, str]:
    """What each documented bare size means: parameter count ("13b" -> 13e9) -> preset id."""
    return dict(_catalog().sizes)


# ------------------------------------------------------------------------------------------
# Resolution


def resolve_model(text: str) -> ModelSpec:
    """A preset id or alias, a bare size ("13b"), or a path to a Hugging Face config.json.

    Raises InputError for a bad size or a malformed config.json, and UnknownModelError (an
    InputError) for anything else, naming the closest presets.

    >>> resolve_model("Llama-2-13B").name
    'llama-2-13b'
    >>> spec = resolve_model("13b")
    >>> spec.name, spec.notes[-1]
    ('llama-2-13b', '13b -> llama-2-13b (13.0B parameters), the nearest standard decoder shape')
    """
    if not text or not text.strip():
        raise InputError("no model given; name a preset (`rentopt models`), a size like 13b, or a config.json path.")
    try:
        path = Path(text.strip()).expanduser()
    except RuntimeError:  # "~name" of a user with no home directory: not a path, maybe a name
        path = Path(text.strip())
    config = _config_path(path)
    if config is not None:
        return load_hf_config(config)
    found = _find_preset(text)
    if found is not None:
        return found
    count = parse_size(text)
    if count is not None:
        return _nearest_shape(text.strip(), count)
    if path.suffix.lower() == ".json":
        raise InputError(f"model config {text.strip()!r} does not exist; check the path to the config.json.")
    if _BARE_NUMBER_RE.match(text.strip()):
        n = text.strip()
        raise InputError(f"model size {n!r} needs a unit: {n}b for billions or {n}m for millions of parameters.")
    raise UnknownModelError(_unknown_message(text.strip()))


def _config_path(path: Path) -> Path | None:
    """The config.json that `path` points to, if it is one (a .json file, or a folder holding one)."""
    try:
        if path.is_file() and path.suffix.lower() == ".json":
            return path
        if path.is_dir() and (path / "config.json").is_file():
            return path / "config.json"
    except OSError:  # unreadable or over-long names are not paths we can use
        return None
    return None


def _find_preset(text: str) -> ModelSpec | None:
    catalog = _catalog()
    key = _normalise(text)
    if key not in catalog.keys and "/" in key:
        key = key.rsplit("/", 1)[1]  # an HF repo id whose org we do not list
    stripped = False
    while key not in catalog.keys:
        suffix = next((s for s in _VARIANT_SUFFIXES if key.endswith(s)), None)
        if suffix is None:
            return None
        key = key.removesuffix(suffix)
        stripped = True
    spec = catalog.presets[catalog.keys[key]]
    if stripped:
        note = f"{text.strip()} -> {spec.name}: instruct/chat variants share the base model's architecture"
        spec = spec.model_copy(update={"notes": (*spec.notes, note)})
    return spec


def _nearest_shape(shown: str, count: int) -> ModelSpec:
    """A documented size maps to the model people mean by it; any other size to the dense
    preset nearest in parameter count (by ratio, so 20b is as far from 13b as 13b from 8.5b)."""
    catalog = _catalog()
    name = catalog.sizes.get(count)
    if name is not None:
        spec = catalog.presets[name]
        how = "the nearest standard decoder shape"
    else:
        dense = [s for s in catalog.presets.values() if s.num_experts == 1]
        spec = min(dense, key=lambda s: abs(math.log(s.total_params / count)))
        how = "the nearest standard decoder shape by parameter count"
    note = f"{shown} -> {spec.name} ({format_params(spec.total_params)} parameters), {how}"
    off = spec.total_params / count - 1
    if abs(off) > FAR_FROM_SIZE:
        side = "larger" if off > 0 else "smaller"
        note += f"; it is {abs(off):.0%} {side} than {shown}, so give the model's config.json for a faithful estimate"
    return spec.model_copy(update={"notes": (*spec.notes, note)})


def _unknown_message(text: str) -> str:
    import difflib  # only for an unknown model's message: a quote of a known one never loads it

    catalog = _catalog()
    close = difflib.get_close_matches(_normalise(text), list(catalog.keys), n=8, cutoff=0.5)
    ids = list(dict.fromkeys(catalog.keys[k] for k in close))[:3]
    hint = f"closest presets: {', '.join(ids)}" if ids else "`rentopt models` lists the presets"
    return f"unknown model {text!r}; {hint}; or give a size like 13b, or a path to a config.json."


# ------------------------------------------------------------------------------------------
# Hugging Face config.json

# transformers' PretrainedConfig ties input and output embeddings by default; Llama, Mistral,
# Mixtral, Qwen2/Qwen3 and Phi-3 configs override that to False, these keep True
# (huggingface/transformers src/transformers/models/<type>/configuration_<type>.py).
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3_text", "gpt2", "gpt_neo", "falcon", "opt", "bloom"})

# Families with a plain two-matrix MLP (up, activation, down) instead of a gated one
# (transformers modeling_<type>.py: GPT2MLP, FalconMLP, OPTDecoderLayer fc1/fc2, BloomMLP, ...).
_PLAIN_MLP = frozenset(
    {"gpt2", "gpt_neo", "gpt_neox", "gptj", "opt", "falcon", "bloom", "gpt_bigcode", "phi", "starcoder2"}
)

# Families known to use a gated MLP (SwiGLU / GeGLU: gate, up, down; transformers LlamaMLP,
# MistralMLP, Qwen2MLP, Gemma2MLP, Phi3MLP's fused gate_up_proj). Other unknown types are assumed
# gated too, and the spec says so.
_GATED_MLP = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
     "phi3", "cohere", "olmo", "olmo2", "internlm2", "deepseek_v2", "deepseek_v3", "granite"}
)

# Qwen2 always puts biases on q/k/v (transformers modeling_qwen2.py: `bias=True`); Llama-style
# configs say so with `attention_bias`.
_QKV_BIAS_TYPES = frozenset({"qwen2", "qwen2_moe"})

_REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size")
_NEEDS = "a decoder config.json needs " + ", ".join(_REQUIRED[:-1]) + " and " + _REQUIRED[-1]


def load_hf_config(path: Path) -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (llama/mistral/qwen2/gemma2/mixtral fields).

    The spec is named after the model's folder (or the file, when it is not called
    config.json); `family` is the config's model_type. Every default it had to assume is a note.
    """
    where = str(path)
    cfg = _read_config(path)
    notes: list[str] = [f"architecture read from {where}"]
    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), dict):
        # Multimodal configs (LLaVA, Gemma 3, Llama 4) nest the language model's fields.
        cfg = {"model_type": cfg.get("model_type"), **cfg["text_config"]}
        notes.append("used the config's text_config (the language model); the vision tower is not counted")
    model_type = str(cfg.get("model_type") or "").strip().lower()
    gated = model_type not in _PLAIN_MLP
    if gated and model_type not in _GATED_MLP:
        notes.append(f"model_type {model_type or '(none)'!r} is not one rentopt knows; assumed a gated (SwiGLU) MLP")

    for field in _REQUIRED[:-1]:
        if cfg.get(field) is None:
            raise InputError(f"{where} is missing {field!r}; {_NEEDS}.")
    hidden = _positive(cfg, "hidden_size", where)
    heads, kv_heads, head_dim = _attention(cfg, where, hidden, notes)
    num_experts, experts_per_token = _experts(cfg, where)
    intermediate = _intermediate(cfg, where, hidden, gated, num_experts, notes)
    max_positions, rope_scaling = _context(cfg, where, notes)
    return ModelSpec(
        name=_config_name(path, model_type),
        family=model_type or "custom",
        max_positions=max_positions,
        rope_scaling=rope_scaling,
        layers=_positive(cfg, "num_hidden_layers", where),
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        vocab=_positive(cfg, "vocab_size", where),
        tied_embeddings=_tied(cfg, where, model_type, notes),
        mlp_gated=gated,
        qkv_bias=model_type in _QKV_BIAS_TYPES or cfg.get("attention_bias") is True or cfg.get("qkv_bias") is True,
        num_experts=num_experts,
        experts_per_token=experts_per_token,
        source=where,
        notes=tuple(notes),
    )


# RoPE scaling types that stretch a model's trained context by `factor` (transformers
# modeling_rope_utils.py: linear, dynamic NTK, YaRN, LongRoPE). "llama3" is different: Llama 3.1's
# config ships it and its max_position_embeddings (131072) is already the trained, scaled context.
_CONTEXT_STRETCHING_ROPE = frozenset({"linear", "dynamic", "yarn", "longrope", "su"})


def _context(cfg: dict[str, Any], where: str, notes: list[str]) -> tuple[int | None, float | None]:
    """(trained positions, configured RoPE scaling factor or None) from a config.json."""
    raw = cfg.get("max_position_embeddings", cfg.get("n_positions"))
    positions = None
    if raw is not None:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw <= 0:
            raise InputError(f"{where}: max_position_embeddings must be a positive whole number, got {raw!r}.")
        positions = raw
    else:
        notes.append("no max_position_embeddings in the config: --seq-len is not checked against the context")
    scaling = cfg.get("rope_scaling")
    if not isinstance(scaling, dict):
        return positions, None
    kind = str(scaling.get("rope_type") or scaling.get("type") or "").lower()
    factor = scaling.get("factor")
    if kind not in _CONTEXT_STRETCHING_ROPE or not isinstance(factor, (int, float)) or isinstance(factor, bool) \
            or not math.isfinite(factor) or factor <= 1:
        return positions, None
    original = scaling.get("original_max_position_embeddings")
    if isinstance(original, int) and not isinstance(original, bool) and original > 0:
        positions = original  # YaRN configs state the pre-scaling context here
    stretched = f": context {positions} -> {int(positions * factor)}" if positions else " (trained context not stated)"
    notes.append(f"RoPE scaling {kind} x{factor:g} configured{stretched}")
    return positions, float(factor)


def check_context(model: ModelSpec, seq_len: int) -> list[str]:
    """Warnings about `seq_len` against the positions `model` was trained for.

    Beyond the trained context with RoPE scaling configured (a config.json's rope_scaling, or
    --rope-scaling): a warning, since quality there depends on the scaling method and a
    long-context fine-tune. Beyond it without RoPE scaling: an InputError, since positions past
    the trained range are extrapolated and quality collapses (Chen et al. 2023, arXiv:2306.15595;
    Peng et al. 2023, YaRN, arXiv:2309.00071).

    >>> spec = resolve_model("llama-2-7b")
    >>> check_context(spec, 4096)
    []
    >>> check_context(spec.model_copy(update={"rope_scaling": 2.0}), 8192)[0][:46]
    'seq_len 8192 is beyond the 4096 positions llam'
    """
    trained = model.max_positions
    if trained is None or seq_len <= trained:
        return []
    factor = model.rope_scaling
    if factor is None or factor <= 1:
        need = math.ceil(seq_len / trained)
        raise InputError(
            f"--seq-len {seq_len} is beyond the {trained} positions {model.name} was trained for, and no RoPE "
            f"scaling is configured: use --seq-len {trained} or less, or configure RoPE scaling (--rope-scaling "
            f"{need} for YaRN/linear scaling, or a config.json with rope_scaling) and fine-tune at that length.")
    scaled = int(trained * factor)
    if seq_len <= scaled:
        return [f"seq_len {seq_len} is beyond the {trained} positions {model.name} was trained for; RoPE scaling "
                f"x{factor:g} stretches that to {scaled}: quality at this length depends on the scaling method and "
                f"a long-context fine-tune"]
    return [f"seq_len {seq_len} is beyond even the {scaled} positions that RoPE scaling x{factor:g} gives "
            f"{model.name} (trained for {trained}): positions past that are extrapolated"]


def _read_config(path: Path) -> dict[str, Any]:
    where = str(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"{where} is over 4 MiB, so it is not a model config.json; give the config.json itself.")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except InputError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {where} ({type(exc).__name__}); check the path and its permissions.") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{where} is not valid JSON (line {exc.lineno}, column {exc.colno}); give a Hugging Face config.json."
        ) from None
    except RecursionError:  # json.loads gives up on nesting thousands deep; no config is
        raise InputError(f"{where} is nested too deeply to be a model config.json; give a Hugging Face config.json.") from None
    if not isinstance(raw, dict):
        raise InputError(f"{where} holds a JSON {type(raw).__name__}, not an object; give a Hugging Face config.json.")
    return raw


def _attention(cfg: dict[str, Any], where: str, hidden: int, notes: list[str]) -> tuple[int, int, int | None]:
    """(heads, kv_heads, head_dim or None when it is hidden / heads)."""
    heads = _positive(cfg, "num_attention_heads", where)
    kv_field = next((f for f in ("num_key_value_heads", "num_kv_heads") if cfg.get(f) is not None), None)
    if kv_field is not None:
        kv_heads = _positive(cfg, kv_field, where)
    elif cfg.get("multi_query") is True:  # Falcon-7B style multi-query attention
        kv_heads = 1
    else:
        kv_heads = heads  # transformers' own default: plain multi-head attention
        notes.append("num_key_value_heads not set; assumed equal to num_attention_heads (no grouped-query attention)")
    head_dim = _positive(cfg, "head_dim", where) if cfg.get("head_dim") is not None else None
    if head_dim is None and hidden % heads:
        raise InputError(f"{where}: hidden_size {hidden} is not divisible by num_attention_heads {heads}; add head_dim.")
    if heads % kv_heads:
        raise InputError(f"{where}: num_attention_heads {heads} is not a multiple of the {kv_heads} key/value heads.")
    if head_dim is not None and head_dim * heads == hidden:
        head_dim = None  # the default; keep the spec canonical
    return heads, kv_heads, head_dim


def _experts(cfg: dict[str, Any], where: str) -> tuple[int, int]:
    """(num_experts, experts_per_token); (1, 1) for a dense model."""
    field = next((f for f in ("num_local_experts", "num_experts") if cfg.get(f) is not None), None)
    num_experts = _positive(cfg, field, where) if field else 1
    if num_experts == 1:
        return 1, 1
    if cfg.get("num_experts_per_tok") is None:
        raise InputError(f"{where} has {num_experts} experts but is missing 'num_experts_per_tok'.")
    per_token = _positive(cfg, "num_experts_per_tok", where)
    if per_token > num_experts:
        raise InputError(f"{where}: num_experts_per_tok {per_token} is more than the {num_experts} experts.")
    return num_experts, per_token


def _intermediate(
    cfg: dict[str, Any], where: str, hidden: int, gated: bool, num_experts: int, notes: list[str]
) -> int:
    """The MLP width (per expert for MoE)."""
    if any(cfg.get(f) for f in ("shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace")):
        notes.append("shared experts and dense layers of this MoE are not modelled; the parameter count is approximate")
    if num_experts > 1 and cfg.get("moe_intermediate_size") is not None:
        return _positive(cfg, "moe_intermediate_size", where)  # Qwen-MoE style: the per-expert width
    field = next((f for f in ("intermediate_size", "ffn_hidden_size", "n_inner") if cfg.get(f) is not None), None)
    if field is not None:
        return _positive(cfg, field, where)
    if gated:
        raise InputError(f"{where} is missing 'intermediate_size'; {_NEEDS}.")
    notes.append("no intermediate_size in the config; assumed 4 x hidden_size, the plain-MLP convention")
    return 4 * hidden  # GPT-2/Falcon convention (transformers GPT2MLP: n_inner=None -> 4 * n_embd)


def _tied(cfg: dict[str, Any], where: str, model_type: str, notes: list[str]) -> bool:
    if "tie_word_embeddings" not in cfg:
        tied = model_type in _TIED_BY_DEFAULT
        notes.append(f"tie_word_embeddings not set; assumed {str(tied).lower()}, "
                     f"transformers' default for {model_type or 'an unnamed model_type'}")
        return tied
    tied = cfg["tie_word_embeddings"]
    if not isinstance(tied, bool):
        raise InputError(f"{where}: tie_word_embeddings must be true or false, got {tied!r}.")
    return tied


def _positive(cfg: dict[str, Any], field: str, where: str) -> int:
    value = cfg[field]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"{where}: {field} must be a positive whole number, got {value!r}.")
    return value


def _config_name(path: Path, model_type: str) -> str:
    """A HF snapshot keeps config.json in a folder named after the model; otherwise use the file."""
    resolved = path.resolve()
    if resolved.name.lower() == "config.json" and resolved.parent.name:
        return resolved.parent.name
    if resolved.stem and resolved.stem.lower() != "config":
        return resolved.stem
    return model_type or "custom-model"


# ------------------------------------------------------------------------------------------
# Presentation data (the CLI renders it)


def describe(spec: ModelSpec) -> dict[str, Any]:
    """A flat, JSON-ready summary of a spec for `rentopt models`."""
    moe = spec.num_experts > 1
    return {
        "id": spec.name,
        "family": spec.family,
        "params": spec.total_params,
        "params_b": round(spec.total_params / 1e9, 3),
        "active_params": spec.active_params if moe else None,
        "active_params_b": round(spec.active_params / 1e9, 3) if moe else None,
        "layers": spec.layers,
        "hidden": spec.hidden,
        "heads": spec.heads,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.dim_head,
        "intermediate": spec.intermediate,
        "vocab": spec.vocab,
        "tied_embeddings": spec.tied_embeddings,
        "mlp_gated": spec.mlp_gated,
        "qkv_bias": spec.qkv_bias,
        "num_experts": spec.num_experts,
        "experts_per_token": spec.experts_per_token,
        "aliases": list(preset_aliases(spec.name)),
        "source": spec.source,
        "notes": list(spec.notes),
    }
