"""The model catalog and `resolve_model`: presets, bare sizes, config.json files, errors, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import InputError, UnknownModelError
from rentopt.optimizer.workload import (
    _build_catalog,
    check_context,
    list_presets,
    load_presets,
    parse_size,
    preset_aliases,
    resolve_model,
    size_presets,
)

B = 10**9

# --------------------------------------------------------------------------------------------
# The catalog


def test_every_preset_is_complete_and_sourced():
    presets = list_presets()
    assert len(presets) >= 30
    for spec in presets:
        assert spec.source.startswith("https://"), spec.name
        assert spec.family, spec.name
        # A head_dim entry is only for shapes where it differs from hidden / heads.
        assert spec.head_dim is None or spec.head_dim * spec.heads != spec.hidden, spec.name
        assert spec.heads % spec.kv_heads == 0, spec.name
    assert len({s.name for s in presets}) == len(presets)


def test_stated_totals_match_the_architecture():
    """Where the catalog states a published total, the shape must reproduce it (within 2 %)."""
    stated = [s for s in list_presets() if s.params]
    assert len(stated) >= 25
    for spec in stated:
        assert abs(spec.computed_params / spec.params - 1) < 0.02, spec.name


# Published totals, independent of the catalog file: the Llama 2 paper / HF weights (6.74B,
# 13.02B, 68.98B), Llama 3 (8.03B), Qwen2.5 (7.62B), Gemma 2 (9.24B), Phi-3 (3.82B), Mixtral
# (46.7B total, 12.9B active per token; arXiv:2401.04088), the calibration set's 34.39B,
# 33.74B, 6.92B, 8.19B, 32.76B, 65.29B, 3.21B (shared/calibration/memory-measurements.json).
PUBLISHED = [
    ("llama-2-7b", 6.74), ("llama-2-13b", 13.02), ("llama-2-70b", 68.98), ("llama-3-8b", 8.03),
    ("llama-3.1-8b", 8.03), ("llama-3-70b", 70.55), ("llama-3.1-405b", 405.85), ("llama-3.2-1b", 1.24),
    ("llama-3.2-3b", 3.21), ("qwen2.5-0.5b", 0.494), ("qwen2.5-1.5b", 1.54), ("qwen2.5-7b", 7.62),
    ("qwen2.5-72b", 72.7), ("mistral-7b", 7.24), ("mixtral-8x7b", 46.7), ("gemma-2-2b", 2.61),
    ("gemma-2-9b", 9.24), ("gemma-2-27b", 27.2), ("phi-3-mini", 3.82), ("yi-34b", 34.39),
    ("codellama-34b", 33.74), ("falcon-7b", 6.92), ("qwen3-8b", 8.19), ("qwen3-32b", 32.76),
    ("llama-65b", 65.29),
]


@pytest.mark.parametrize(("name", "billions"), PUBLISHED)
def test_computed_params_match_published_totals(name, billions):
    spec = load_presets()[name]
    assert spec.computed_params / B == pytest.approx(billions, rel=0.02)
    assert spec.total_params / B == pytest.approx(billions, rel=0.005)


CALIBRATION = Path(__file__).parent / "data" / "memory-measurements.json"


@pytest.mark.skipif(not CALIBRATION.exists(), reason="calibration set not present")
def test_presets_agree_with_the_calibration_set():
    """The calibration records carry each model's shape from its own source: where the name
    resolves to a preset, the shapes and parameter counts must agree."""
    checked = set()
    for record in json.loads(CALIBRATION.read_text(encoding="utf-8")):
        try:
            spec = resolve_model(record["model"])
        except UnknownModelError:
            continue  # encoder-decoders and older families the catalog does not carry
        shape = (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.vocab, spec.intermediate)
        expected = tuple(record[k] for k in ("layers", "hidden", "heads", "kv_heads", "vocab", "intermediate"))
        assert shape == expected, record["model"]
        assert spec.total_params / B == pytest.approx(record["params_b"], abs=0.01), record["model"]
        checked.add(spec.name)
    assert len(checked) >= 15


def test_mixtral_total_and_active_parameters():
    mixtral = load_presets()["mixtral-8x7b"]
    assert (mixtral.num_experts, mixtral.experts_per_token) == (8, 2)
    assert mixtral.total_params / B == pytest.approx(46.7, rel=0.01)
    assert mixtral.active_params / B == pytest.approx(12.9, rel=0.01)
    assert load_presets()["mistral-7b"].active_params == load_presets()["mistral-7b"].total_params


@pytest.mark.parametrize(
    ("name", "billions"),
    [("gpt3-125m", 0.125), ("gpt3-350m", 0.35), ("gpt3-760m", 0.76), ("gpt3-1.3b", 1.3),
     ("gpt3-2.7b", 2.7), ("gpt3-6.7b", 6.7), ("gpt3-13b", 13.0), ("gpt3-175b", 175.0)],
)
def test_gpt3_shapes_match_table_2_1_sizes(name, billions):
    """Brown et al. 2020 Table 2.1 rounds its sizes; the shapes land within 3 % of them."""
    spec = load_presets()[name]
    assert not spec.mlp_gated and spec.tied_embeddings
    assert spec.computed_params / B == pytest.approx(billions, rel=0.03)


def test_architecture_details_that_change_the_count():
    p = load_presets()
    assert p["gemma-2-9b"].dim_head == 256 and p["gemma-2-27b"].dim_head == 128
    assert p["gemma-2-9b"].tied_embeddings and p["gemma-2-9b"].vocab == 256000
    assert p["qwen2.5-7b"].qkv_bias and not p["qwen2.5-7b"].tied_embeddings
    assert p["qwen2.5-0.5b"].tied_embeddings
    assert (p["falcon-7b"].kv_heads, p["falcon-7b"].mlp_gated) == (1, False)
    assert p["llama-2-70b"].kv_heads == 8


def test_presets_are_cached_and_frozen():
    first, second = load_presets(), load_presets()
    assert first["llama-2-7b"] is second["llama-2-7b"]
    first.pop("llama-2-7b")  # a copy: callers cannot damage the catalog
    assert "llama-2-7b" in load_presets()
    with pytest.raises(ValidationError, match="frozen"):
        second["llama-2-13b"].layers = 1


def test_catalog_rejects_ambiguous_or_dangling_entries():
    base = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 4, "intermediate": 128, "vocab": 100}
    with pytest.raises(ValueError, match="names both"):
        _build_catalog({"model": [{**base, "name": "a", "aliases": ["x"]},
                                  {**base, "name": "b", "aliases": ["X"]}]})
    with pytest.raises(ValueError, match="sizes"):
        _build_catalog({"model": [{**base, "name": "a"}], "sizes": {"7b": "missing"}})
    with pytest.raises(ValueError, match="lower-case"):
        _build_catalog({"model": [{**base, "name": "Big Model"}]})


def test_every_documented_size_points_at_a_dense_preset():
    presets = load_presets()
    for count, name in size_presets().items():
        spec = presets[name]
        assert spec.num_experts == 1
        # Within 30 %: "1b" and "2b" are the models named so (Llama-3.2-1B, Gemma-2-2B), whose large
        # vocabularies put them at 1.24B and 2.61B.
        assert abs(math.log(spec.total_params / count)) < 0.3, (count, name)


# --------------------------------------------------------------------------------------------
# Names and aliases


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("llama-2-13b", "llama-2-13b"),
        ("Llama-2-13B", "llama-2-13b"),
        ("  LLAMA2-7B ", "llama-2-7b"),
        ("llama 2 13b", "llama-2-13b"),
        ("meta-llama/Llama-2-7b-hf", "llama-2-7b"),
        ("meta-llama/Llama-2-70b-chat-hf", "llama-2-70b"),
        ("qwen2.5-7b-instruct", "qwen2.5-7b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("8x7b", "mixtral-8x7b"),
        ("google/gemma-2-27b-it", "gemma-2-27b"),
        ("Falcon-7B", "falcon-7b"),
        ("CodeLlama-34B", "codellama-34b"),
        ("LLaMA-65B", "llama-65b"),
        ("Meta-Llama-3-8B-Instruct", "llama-3-8b"),
    ],
)
def test_presets_resolve_by_id_alias_and_hf_repo(text, name):
    assert resolve_model(text).name == name


def test_a_plain_preset_carries_no_mapping_note():
    assert resolve_model("qwen2.5-7b").notes == ()
    assert "llama2-7b" in preset_aliases("llama-2-7b")


def test_variant_suffixes_are_stripped_and_said():
    spec = resolve_model("Llama-3.2-1B-Instruct")
    assert spec.name == "llama-3.2-1b"
    assert "instruct/chat variants share the base model's architecture" in spec.notes[-1]
    # The preset itself is untouched.
    assert load_presets()["llama-3.2-1b"].notes == ()
    assert resolve_model("someorg/Qwen2.5-14B-Instruct").name == "qwen2.5-14b"


# --------------------------------------------------------------------------------------------
# Bare sizes


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("7b", "llama-2-7b"), ("13b", "llama-2-13b"), ("70b", "llama-2-70b"), ("70B", "llama-2-70b"),
        ("8b", "llama-3.1-8b"), ("0.5b", "qwen2.5-0.5b"), ("0.5B", "qwen2.5-0.5b"),
        ("1.5b", "qwen2.5-1.5b"), ("14b", "qwen2.5-14b"), ("32b", "qwen2.5-32b"),
        ("72b", "qwen2.5-72b"), ("6.7b", "gpt3-6.7b"), ("350m", "gpt3-350m"), ("1.3b", "gpt3-1.3b"),
        ("125M", "gpt3-125m"), ("13000m", "llama-2-13b"), (".5b", "qwen2.5-0.5b"),
    ],
)
def test_common_sizes_land_on_the_models_people_mean(text, name):
    spec = resolve_model(text)
    assert spec.name == name
    assert spec.notes[-1].startswith(f"{text} -> {name} (")
    assert "the nearest standard decoder shape" in spec.notes[-1]


def test_size_note_states_the_mapping():
    assert resolve_model("13b").notes == (
        "13b -> llama-2-13b (13.0B parameters), the nearest standard decoder shape",
    )
    assert resolve_model("6.7b").notes[-1] == "6.7b -> gpt3-6.7b (6.65B parameters), the nearest standard decoder shape"


@pytest.mark.parametrize(
    ("text", "name"),
    [("100b", "qwen2.5-72b"), ("4b", "phi-3-mini"), ("60b", "llama-65b"), ("600m", "qwen2.5-0.5b"),
     ("46.7b", "yi-34b")],  # a bare size means a dense decoder, never the MoE preset
)
def test_other_sizes_go_to_the_nearest_dense_preset(text, name):
    spec = resolve_model(text)
    assert spec.name == name
    assert "by parameter count" in spec.notes[-1]


def test_far_sizes_say_the_estimate_is_rough():
    far = resolve_model("2t")
    assert far.name == "llama-3.1-405b"
    assert "80% smaller than 2t" in far.notes[-1] and "config.json" in far.notes[-1]
    assert "config.json" not in resolve_model("4b").notes[-1]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0b", "must be more than zero"),
        ("-7b", "must be more than zero"),
        ("0.0m", "must be more than zero"),
        ("3t", "over 2T parameters"),
        ("2500b", "over 2T parameters"),
        ("7", "needs a unit: 7b for billions or 7m"),
        ("   ", "no model given"),
    ],
)
def test_bad_sizes_are_input_errors(text, message):
    with pytest.raises(InputError, match=message) as info:
        resolve_model(text)
    assert not isinstance(info.value, UnknownModelError)
    assert "\n" not in str(info.value)


def test_parse_size_ignores_names():
    assert parse_size("llama-2-13b") is None
    assert parse_size("13bn") is None
    assert parse_size("1.3B") == 1_300_000_000


# --------------------------------------------------------------------------------------------
# Unknown names


def test_unknown_model_names_the_closest_presets():
    with pytest.raises(UnknownModelError) as info:
        resolve_model("lama-13b")
    message = str(info.value)
    assert message.startswith("unknown model 'lama-13b'; closest presets: llama-2-13b")
    assert message.endswith("or give a size like 13b, or a path to a config.json.")
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


def test_unknown_model_without_close_matches_points_to_the_list():
    with pytest.raises(UnknownModelError, match="`rentopt models` lists the presets"):
        resolve_model("zzzzqqqq")


def test_missing_json_path_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        resolve_model(str(tmp_path / "nope" / "config.json"))


# --------------------------------------------------------------------------------------------
# config.json

LLAMA2_7B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "vocab_size": 32000, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-05, "torch_dtype": "float16",
}

MIXTRAL_CONFIG = {
    "model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
    "tie_word_embeddings": False,
}


def write_config(folder: Path, data, name: str = "config.json") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_llama_config_reproduces_the_preset(tmp_path):
    path = write_config(tmp_path / "Llama-2-7b-hf", LLAMA2_7B_CONFIG)
    spec = resolve_model(str(path))
    preset = load_presets()["llama-2-7b"]
    assert spec.name == "Llama-2-7b-hf" and spec.family == "llama"
    assert spec.computed_params == preset.computed_params == 6_738_415_616
    assert (spec.layers, spec.hidden, spec.kv_heads, spec.head_dim) == (32, 4096, 32, None)
    assert spec.source == str(path)
    assert any("architecture read from" in n for n in spec.notes)


def test_model_folder_resolves_to_its_config(tmp_path):
    write_config(tmp_path / "my-llama", LLAMA2_7B_CONFIG)
    assert resolve_model(str(tmp_path / "my-llama")).name == "my-llama"
    assert resolve_model(str(write_config(tmp_path, LLAMA2_7B_CONFIG, "tiny.json"))).name == "tiny"


def test_mixtral_config_has_experts(tmp_path):
    spec = resolve_model(str(write_config(tmp_path / "mixtral", MIXTRAL_CONFIG)))
    assert (spec.num_experts, spec.experts_per_token) == (8, 2)
    assert spec.computed_params == load_presets()["mixtral-8x7b"].computed_params
    assert spec.active_params / B == pytest.approx(12.9, rel=0.01)


def test_defaults_follow_the_model_type(tmp_path):
    gemma = {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
             "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8,
             "head_dim": 256, "vocab_size": 256000}
    spec = resolve_model(str(write_config(tmp_path / "gemma", gemma)))
    assert spec.tied_embeddings and spec.head_dim == 256
    assert any("tie_word_embeddings not set; assumed true" in n for n in spec.notes)
    assert spec.computed_params == load_presets()["gemma-2-9b"].computed_params

    qwen = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944,
            "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
            "vocab_size": 152064, "tie_word_embeddings": False}
    spec = resolve_model(str(write_config(tmp_path / "qwen", qwen)))
    assert spec.qkv_bias
    assert spec.computed_params == 7_615_616_512

    no_kv = {k: v for k, v in LLAMA2_7B_CONFIG.items() if k not in ("num_key_value_heads", "tie_word_embeddings")}
    spec = resolve_model(str(write_config(tmp_path / "no-kv", no_kv)))
    assert spec.kv_heads == 32 and not spec.tied_embeddings
    assert any("num_key_value_heads not set" in n for n in spec.notes)


def test_falcon_style_config(tmp_path):
    falcon = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71,
              "num_hidden_layers": 32, "multi_query": True, "vocab_size": 65024}
    spec = resolve_model(str(write_config(tmp_path / "falcon-7b", falcon)))
    assert (spec.kv_heads, spec.mlp_gated, spec.intermediate, spec.tied_embeddings) == (1, False, 18176, True)
    assert spec.computed_params == load_presets()["falcon-7b"].computed_params


def test_nested_text_config(tmp_path):
    wrapped = {"model_type": "llava", "text_config": LLAMA2_7B_CONFIG, "vision_config": {"hidden_size": 1024}}
    spec = resolve_model(str(write_config(tmp_path / "llava", wrapped)))
    assert spec.computed_params == 6_738_415_616
    assert any("text_config" in n for n in spec.notes)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"is not valid JSON \(line 1"),
        ("[1, 2]", "holds a JSON list, not an object"),
        ({k: v for k, v in LLAMA2_7B_CONFIG.items() if k != "num_hidden_layers"},
         "is missing 'num_hidden_layers'"),
        ({k: v for k, v in LLAMA2_7B_CONFIG.items() if k != "intermediate_size"},
         "is missing 'intermediate_size'"),
        ({**LLAMA2_7B_CONFIG, "hidden_size": 0}, "hidden_size must be a positive whole number, got 0"),
        ({**LLAMA2_7B_CONFIG, "vocab_size": -5}, "vocab_size must be a positive whole number, got -5"),
        ({**LLAMA2_7B_CONFIG, "num_hidden_layers": "32"}, "num_hidden_layers must be a positive whole number"),
        ({**LLAMA2_7B_CONFIG, "num_attention_heads": True}, "num_attention_heads must be a positive whole number"),
        ({**LLAMA2_7B_CONFIG, "num_attention_heads": 30}, "not divisible by num_attention_heads 30"),
        ({**LLAMA2_7B_CONFIG, "num_key_value_heads": 5}, "not a multiple of the 5 key/value heads"),
        ({**LLAMA2_7B_CONFIG, "tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
        ({**MIXTRAL_CONFIG, "num_experts_per_tok": None}, "missing 'num_experts_per_tok'"),
        ({**MIXTRAL_CONFIG, "num_experts_per_tok": 9}, "more than the 8 experts"),
    ],
)
def test_malformed_configs_name_the_file_and_field(tmp_path, content, message):
    path = write_config(tmp_path / "bad", content)
    with pytest.raises(InputError, match=message) as info:
        resolve_model(str(path))
    text = str(info.value)
    assert str(path) in text
    assert "\n" not in text and not isinstance(info.value, UnknownModelError)


def test_non_utf8_config_is_an_input_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="cannot read"):
        resolve_model(str(path))


# --------------------------------------------------------------------------------------------
# rentopt models


def test_cli_lists_presets_as_a_table():
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["id", "family", "params", "active"]
    row = next(line for line in lines if line.startswith("mixtral-8x7b "))
    assert "46.7B" in row and "12.9B" in row and "32/8" in row and "huggingface.co/mistralai" in row
    assert len(lines) == 2 + len(list_presets())


def test_cli_lists_presets_as_json():
    result = CliRunner().invoke(cli, ["models", "--format", "json"])
    assert result.exit_code == 0
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == [s.name for s in list_presets()]
    llama = next(r for r in rows if r["id"] == "llama-2-13b")
    assert llama["params"] == 13_015_864_320 and llama["active_params_b"] is None
    assert "llama2-13b" in llama["aliases"] and llama["source"].startswith("https://")
    assert next(r for r in rows if r["id"] == "mixtral-8x7b")["active_params_b"] == pytest.approx(12.88, abs=0.01)


def test_cli_shows_what_a_size_resolves_to():
    result = CliRunner().invoke(cli, ["models", "13b"])
    assert result.exit_code == 0
    assert "llama-2-13b" in result.stdout
    assert "note: 13b -> llama-2-13b (13.0B parameters), the nearest standard decoder shape" in result.stdout
    one = json.loads(CliRunner().invoke(cli, ["models", "0.5b", "--format", "json"]).stdout)
    assert one["id"] == "qwen2.5-0.5b" and one["notes"]


def test_cli_unknown_model_is_one_line_and_exit_2():
    result = CliRunner().invoke(cli, ["models", "lama-13b"])
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("rentopt: error: unknown model 'lama-13b'; closest presets:")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_cli_rejects_an_unknown_format():
    result = CliRunner().invoke(cli, ["models", "--format", "yaml"])
    assert result.exit_code == 2


# --------------------------------------------------------------------------------------------
# Context length


@pytest.mark.parametrize("name, positions", [
    # config.json max_position_embeddings of each model
    ("llama-2-7b", 4096), ("llama-65b", 2048), ("llama-3-8b", 8192), ("llama-3.1-8b", 131072),
    ("qwen2.5-0.5b", 32768), ("qwen3-8b", 40960), ("gemma-2-9b", 8192), ("falcon-7b", 2048), ("gpt3-175b", 2048),
])
def test_presets_carry_their_trained_context(name, positions):
    assert load_presets()[name].max_positions == positions


def test_every_preset_has_a_context():
    assert all(spec.max_positions for spec in list_presets())


def test_a_seq_len_past_the_context_without_rope_scaling_is_an_error():
    spec = load_presets()["llama-2-7b"]
    assert check_context(spec, 4096) == []
    with pytest.raises(InputError, match=r"--seq-len 8192 is beyond the 4096 positions .*\(--rope-scaling 2 "):
        check_context(spec, 8192)


def test_with_rope_scaling_it_is_a_warning_that_says_how_far():
    spec = load_presets()["llama-2-7b"].model_copy(update={"rope_scaling": 2.0})
    [inside] = check_context(spec, 8192)
    assert "RoPE scaling x2 stretches that to 8192" in inside
    [beyond] = check_context(spec, 16384)
    assert "beyond even the 8192 positions" in beyond


def test_config_json_context_and_rope_scaling_are_read(tmp_path):
    plain = resolve_model(str(write_config(tmp_path / "a", {**LLAMA2_7B_CONFIG, "max_position_embeddings": 4096})))
    assert (plain.max_positions, plain.rope_scaling) == (4096, None)
    # Qwen2.5's documented YaRN set-up for 128K: factor 4 over the 32,768 trained positions.
    yarn = {**LLAMA2_7B_CONFIG, "max_position_embeddings": 32768,
            "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}
    spec = resolve_model(str(write_config(tmp_path / "b", yarn)))
    assert (spec.max_positions, spec.rope_scaling) == (32768, 4.0)
    assert check_context(spec, 131072) and "stretches that to 131072" in check_context(spec, 131072)[0]
    # Llama 3.1's built-in "llama3" scaling is part of its trained 131,072 positions, not a stretch.
    llama31 = {**LLAMA2_7B_CONFIG, "max_position_embeddings": 131072,
               "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}}
    spec31 = resolve_model(str(write_config(tmp_path / "c", llama31)))
    assert (spec31.max_positions, spec31.rope_scaling) == (131072, None)
    # RoPE scaling without any stated context: the note says so instead of "context None -> 0"
    unstated = {k: v for k, v in LLAMA2_7B_CONFIG.items() if k != "max_position_embeddings"}
    unstated["rope_scaling"] = {"type": "linear", "factor": 2.0}
    notes = resolve_model(str(write_config(tmp_path / "e", unstated))).notes
    [rope] = [n for n in notes if n.startswith("RoPE scaling")]
    assert rope == "RoPE scaling linear x2 configured (trained context not stated)"
    bad = {**LLAMA2_7B_CONFIG, "max_position_embeddings": "long"}
    with pytest.raises(InputError, match="max_position_embeddings must be a positive whole number"):
        resolve_model(str(write_config(tmp_path / "d", bad)))


def test_cli_errors_past_the_context_and_warns_with_rope_scaling():
    runner = CliRunner()
    error = runner.invoke(cli, ["estimate", "--model", "llama-2-7b", "--mode", "lora", "--seq-len", "8192"])
    assert error.exit_code == 2 and "rentopt: error: --seq-len 8192 is beyond the 4096 positions" in error.output
    warned = runner.invoke(cli, ["estimate", "--model", "llama-2-7b", "--mode", "lora", "--seq-len", "8192",
                                 "--rope-scaling", "2", "--format", "json"])
    assert warned.exit_code == 0
    assert "rentopt: warning: seq_len 8192 is beyond the 4096 positions" in warned.stderr
    assert json.loads(warned.stdout)["peak_gb_per_gpu"] > 0
