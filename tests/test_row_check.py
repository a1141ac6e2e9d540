"""RowCheck.first_problem: the door's rules asked of many offers at once give what asking
`problem` of each offer in turn gives: the same offer, field and words, the same exception."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.optimizer.row_check import RowCheck

NOW = datetime(2026, 12, 5, tzinfo=timezone.utc)
T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def offer(offer_id: str, **fields) -> Offer:
    values = dict(provider="alpha", offer_id=offer_id, gpu="A100-SXM4-80GB", gpu_raw="A100 SXM4 80GB", gpus=4,
                  gpu_memory_gb=80.0, price_options=[PriceOption(unit="hour", amount=Decimal("7.20"))],
                  currency="USD", fetched_at=T0, source="https://alpha.test")
    good = Offer(**values)
    return good.model_copy(update=fields)  # not validated: what the door must refuse gets through to it


def hour(amount: str) -> list[PriceOption]:
    return [PriceOption(unit=PriceUnit.HOUR, amount=Decimal(amount))]


# Good offers sharing the inputs the rules read (an equal amount written two ways, one instant in
# two time zones), and one offer breaking each rule; several break two (the first rule speaks).
POOL = [
    offer("good"), offer("good-2", price_options=hour("7.200")), offer("good-3", provider="beta", region="eu"),
    offer("good-4", fetched_at=T0.astimezone(timezone(timedelta(hours=8)))),
    offer("good-5", storage_gb_month=Decimal("0.10"), egress_gb=Decimal("0.01")),
    offer("provider", provider="../etc"), offer("provider-2", provider="a  b"),
    offer("id\x1b[2J"), offer("gpu-raw", gpu_raw="RTX\u202e4090"), offer("region", region="eu\x07"),
    offer("source", source="s\x00"), offer("gpu", gpu="NOT-A-GPU"),
    offer("gpus", gpus=0), offer("gpus-huge", gpus=10 ** 400), offer("memory-nan", gpu_memory_gb=float("nan")),
    offer("memory-inf", gpu_memory_gb=float("inf")), offer("month", month_hours=800),
    offer("term", price_options=[PriceOption(unit=PriceUnit.TERM, amount=Decimal("50000"), term_hours=10 ** 6)]),
    offer("band", price_options=hour("1000")), offer("band-2", price_options=hour("1000.0")),
    offer("band-month", price_options=[*hour("7.20"), PriceOption(unit=PriceUnit.MONTH, amount=Decimal("800000"))]),
    offer("price-snan", price_options=[PriceOption.model_construct(unit=PriceUnit.HOUR, amount=Decimal("sNaN"),
                                                                   term_hours=None, interruptible=False, label="")]),
    offer("storage-snan", storage_gb_month=Decimal("sNaN")),  # neither can be a key: asked of `problem` itself
    offer("currency", currency="XYZ"), offer("storage", storage_gb_month=Decimal("9")),
    offer("stopped", storage_stopped_gb_month=Decimal("9")), offer("egress", egress_gb=Decimal("9")),
    offer("future", fetched_at=NOW + timedelta(days=2)), offer("naive", fetched_at=datetime(2026, 11, 28)),
    offer("year-10000", fetched_at=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))),  # its words overflow
    offer("two-faults", provider="../etc", storage_gb_month=Decimal("9")),
    offer("two-faults-2", storage_gb_month=Decimal("9"), fetched_at=NOW + timedelta(days=2)),
]


def by_each(offers: list[Offer]):
    """The reference: `problem` asked of each offer in turn; an exception as (type, words)."""
    door = RowCheck(now=NOW)
    try:
        for i, o in enumerate(offers):
            if found := door.problem(o):
                return i, found
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)
    return None


def at_once(offers: list[Offer]):
    try:
        return RowCheck(now=NOW).first_problem(offers)
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(range(len(POOL))), max_size=14))
def test_first_problem_is_the_first_offer_problem_refuses(picks):
    offers = [POOL[p] for p in picks]
    assert at_once(offers) == by_each(offers)


def test_every_rule_of_the_door_is_screened(rentopt_home):
    """Each faulty offer alone after good ones is found, with `problem`'s words (and the
    huge count's OverflowError, raised in its turn, not before an earlier offer's problem)."""
    good = POOL[:5]
    for bad in POOL[5:]:
        found = at_once([*good, bad])
        assert found is not None and found == by_each([*good, bad]), bad.offer_id
    assert at_once([*good, POOL[5], POOL[13]])[0] == 5  # the bad provider before the huge count
    assert at_once(good) is None
