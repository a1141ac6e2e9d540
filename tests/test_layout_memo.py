"""What the layout search and the planner remember between node shapes gives what nothing
remembered gives: find_layout shares each ladder's steps (setups and memory estimates) between
shapes with the same GPU counts (feasibility._steps_of), and the planner shares a speed between
layouts that differ only in fields the speed model does not read (planner._speed_fields)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from rentopt.optimizer import feasibility, memory, planner
from rentopt.optimizer.feasibility import Fit, NodeShape, Pins, find_layout
from rentopt.optimizer.hardware import all_gpus
from rentopt.optimizer.job import speed_of
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.workload import resolve_model

MODELS = [resolve_model(m) for m in ("llama-2-7b", "llama-2-13b", "llama-2-70b")]
SETUPS = [TrainingSetup(mode="lora"), TrainingSetup(mode="qlora"), TrainingSetup(mode="full"),
          TrainingSetup(mode="lora", micro_batch=4, grad_checkpointing=True),
          TrainingSetup(mode="full", seq_len=32768), TrainingSetup(mode="inference")]
PINS = [Pins(), Pins(zero=3, offload="all"), Pins(zero=0, offload="none"), Pins(zero=3, offload="none"),
        Pins(zero=1), Pins(fsdp=True), Pins(tensor_parallel=2), Pins(offload="optimizer")]
GPUS = all_gpus()

shapes = st.builds(
    NodeShape,
    gpu=st.sampled_from(GPUS),
    gpus_per_node=st.sampled_from([1, 2, 4, 8]),
    nodes=st.integers(1, 3),
    interconnect=st.sampled_from(["nvlink", "pcie", "unknown"]),
    fabric=st.sampled_from([None, "infiniband", "roce", "ethernet"]),
    fabric_gbps=st.sampled_from([None, 100.0, 200.0, 400.0]),
    memory_gb=st.sampled_from([None, 24.0, 48.0, 80.0, 141.0]),
    host_ram_gb=st.sampled_from([None, 16.0, 64.0, 192.0, 2048.0]),
)
searches = st.tuples(st.sampled_from(MODELS), st.sampled_from(SETUPS), shapes, st.sampled_from(PINS),
                     st.sampled_from([1.0, 0.5, 1.7]))


def _forget() -> None:
    for cached in (feasibility._steps_of, feasibility._ladder, memory._estimate):
        cached.cache_clear()


def _answer(result) -> tuple:
    if isinstance(result, Fit):
        return "fit", result.layout.model_dump(), result.memory.model_dump(), result.host_ram_matters
    return "nofit", result.constraint, result.reason, result.overshoot, result.host_ram_matters


@settings(max_examples=60, deadline=None)
@given(st.lists(searches, min_size=1, max_size=25))
def test_shared_steps_give_the_answer_of_a_search_with_nothing_remembered(calls):
    _forget()
    remembered = [_answer(find_layout(m, s, sh, pins=p, activation_scale=a)) for m, s, sh, p, a in calls]
    for (m, s, sh, p, a), got in zip(calls, remembered):
        _forget()
        assert got == _answer(find_layout(m, s, sh, pins=p, activation_scale=a))


@settings(max_examples=60, deadline=None)
@given(searches, st.sampled_from(["elsewhere", "X-1GB"]), st.floats(0.1, 500), st.floats(0.1, 500),
       st.lists(st.sampled_from(["a note", "interconnect not stated by the provider: treated as PCIe"]), max_size=2))
def test_the_speed_model_reads_none_of_the_fields_its_memo_ignores(search, name, required, memory_gb, notes):
    """The planner memoises speeds by the layout's fields but SPEED_IGNORES (planner._speed_fields):
    layouts that differ only there must have the same speed."""
    model, setup, shape, pins, scale = search
    fit = find_layout(model, setup, shape, pins=pins, activation_scale=scale)
    if not isinstance(fit, Fit) or not setup.trains:
        return
    changed = fit.layout.model_copy(update={"gpu": name, "strategy": name, "required_gb_per_gpu": required,
                                            "gpu_memory_gb": memory_gb, "notes": notes, "plan_notes": notes[:1]})
    assert planner._speed_fields(changed) == planner._speed_fields(fit.layout)
    assert speed_of(model, setup, changed, shape.gpu) == speed_of(model, setup, fit.layout, shape.gpu)
