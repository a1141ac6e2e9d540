"""What plan_instance hands the solver and the answer: each candidate's billing Use and what its
plan prints, the signature a validation must match, and the offers set aside with their reasons."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from decimal import Decimal

import numpy as np

from rentopt.optimizer.billing import Use
from rentopt.optimizer.feasibility import Pins
from rentopt.optimizer.first_pass import Rough
from rentopt.optimizer.job import Prepared, Speed, WorkPlan
from rentopt.optimizer.models import REJECT_REASONS, GpuSpec, Layout, Offer
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.solver import PlanInstance
from rentopt.optimizer.ties import Ties


@dataclass(frozen=True)
class Signature:
    """What a run executes: the thing a validation must match to validate the training job."""

    precision: str
    attention: str
    family: str  # data parallel, zero1/2/3, fsdp, tensor parallel, pipeline
    offload: str

    @classmethod
    def of(cls, layout: Layout) -> Signature:
        if layout.tensor_parallel > 1 or layout.pipeline_parallel > 1:
            family = f"tp{layout.tensor_parallel}+pp{layout.pipeline_parallel}"
        elif layout.fsdp:
            family = "fsdp"
        elif layout.zero:
            family = f"zero{layout.zero}"
        else:
            family = "data-parallel"
        return cls(layout.precision, layout.attention, family, layout.offload)

    def pins(self, base: Pins) -> Pins:
        """Layout pins that make a validation run this family (the same code path, smaller)."""
        if self.family.startswith("zero"):
            return replace(base, zero=int(self.family[4:]), fsdp=None, offload=self.offload)
        if self.family == "fsdp":
            return replace(base, fsdp=True, zero=None, offload=self.offload)
        if self.family.startswith("tp"):
            return replace(base, offload=self.offload)
        return replace(base, zero=0, offload=self.offload)


@dataclass
class Candidate:
    """The planner's view of one solver candidate: its billing Use and what its plan prints."""

    use: Use
    offer: Offer
    layout: Layout
    gpu: GpuSpec
    speed: Speed | None  # training
    tokens: float | None
    disk_gb: Decimal
    import_gb: Decimal
    out_gb: Decimal
    hours_low: Decimal | None = None
    hours_high: Decimal | None = None
    notes: tuple[str, ...] = ()
    signature: Signature | None = None
    key_notes: tuple[str, ...] = ()  # the notes that can change the choice (not the speed model's account)

    @property
    def id(self) -> str:
        return self.use.id


class Rejections:
    """Offers the planner set aside, by table rows in bulk: a million spot-only rows are one
    entry, and a reason is written out only when the rejections are listed."""

    def __init__(self) -> None:
        self._chunks: list[tuple[np.ndarray, str, str | Callable[[int], str]]] = []

    def add(self, rows: np.ndarray | int, constraint: str, reason: str | Callable[[int], str]) -> None:
        """`reason`: one text for all `rows`, or a function of the position in `rows`."""
        if constraint not in REJECT_REASONS:  # Rejection is not validated when it is built
            raise ValueError(f"{constraint!r} is not a RejectReason")
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        if len(rows):
            self._chunks.append((rows, constraint, reason))

    def __len__(self) -> int:
        return sum(len(rows) for rows, _, _ in self._chunks)

    def spread(self, ties: Ties) -> None:
        """A rejected class representative's reason holds for every member of its class."""
        for n, (rows, constraint, reason) in enumerate(self._chunks):
            at = np.flatnonzero(ties.klass[rows] >= 0) if len(ties.klass) else np.zeros(0, np.int64)
            if not len(at):
                continue
            extra, counts = ties.others_of(rows[at])
            origin = np.r_[np.arange(len(rows)), np.repeat(at, counts)]
            self._chunks[n] = (np.r_[rows, extra], constraint,
                               reason if isinstance(reason, str) else (lambda i, r=reason, o=origin: r(int(o[i]))))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for rows, constraint, _ in self._chunks:
            out[constraint] = out.get(constraint, 0) + len(rows)
        return out

    def listed(self) -> list[tuple[int, str, str]]:
        """(table row, constraint, reason) for every rejection, in the offers' order (a row's
        rejections in the order they were added)."""
        rows, constraints, reasons = self.columns()
        return list(zip(rows.tolist(), constraints, reasons))

    def columns(self) -> tuple[np.ndarray, list[str], list[str]]:
        """`listed` as columns: (table rows, constraints, reasons). One sort of the rows, not of
        a tuple per rejection."""
        if not self._chunks:
            return np.zeros(0, dtype=np.int64), [], []
        rows = np.concatenate([r for r, _, _ in self._chunks])
        constraints: list[str] = []
        reasons: list[str] = []
        for chunk, constraint, reason in self._chunks:
            constraints += [constraint] * len(chunk)
            reasons += [reason] * len(chunk) if isinstance(reason, str) else [reason(i) for i in range(len(chunk))]
        order = np.argsort(rows, kind="stable")
        at = order.tolist()
        return rows[order], [constraints[i] for i in at], [reasons[i] for i in at]


@dataclass
class Planned:
    """plan_instance's result."""

    instance: PlanInstance
    candidates: dict[str, Candidate]
    rejections: Rejections
    work: WorkPlan
    prep: Prepared
    closest_memory: str | None = None
    first_pass: dict[str, int] = field(default_factory=dict)  # candidates before / after rough pruning
    table: OfferTable | None = None
    closest_misses: list[str] = field(default_factory=list)  # the few nearest memory misses, nearest first
    same_price: dict[tuple[str, str], str] = field(default_factory=dict)  # a planned offer -> its tied offers, in words
    same_price_ids: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # ... and their offer ids
    rough: Rough | None = None  # every candidate's first-pass columns, kept only without the first pass (oracle tests)

    @property
    def rejected(self) -> list[tuple[int, str, str]]:
        """(offer table row, constraint, reason) of every rejected offer, in the offers' order."""
        return self.rejections.listed()
