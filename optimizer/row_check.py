"""The checks every offer passes at the door, whichever way it comes in.

One rule set for every way in: a provider plugin's rows (providers/base.py `check_offers`), a
team's snapshot (`refresh --from`, optimizer/catalog.py `parse_snapshot_sections`), an
`--offers-file` (optimizer/offers_io.py), and rows an older rentopt stored (re-checked once by
the store's migration m006, and skipped by its readers if one still fails: optimizer/store.py).
A row that fails is refused with its reason and never stored; the rows around it are not lost.

What a row must be (each rule is here because a fault-injection round found the tool taken
down without it: issue 24):
- its provider a plain name: letters, digits, `.`, `_`, `-` and single spaces, at most 64
  characters, starting with a letter or digit - never empty, a path (`../../etc`) or markup
  (`<script>`); provider names end up in tables, reports, file names and `--providers` lists;
- its offer id free of control characters, its GPU name, region and source free of all but
  line breaks and tabs: a newline or an ANSI escape in a name forged table lines and cleared
  screens (every output escapes them too: optimizer/text.py);
- its GPU a catalog id (or null with the provider's own spelling): an unknown id was a KeyError
  in every later quote;
- every number within `OFFER_LIMITS`, every price within the sane bands (optimizer/sanity.py)
  in a currency with an exchange rate (an unknown currency blocked every quote);
- its `fetched_at` with a time zone (the Offer model refuses a naive one), and not more than
  `MAX_FUTURE` ahead of now: a price dated in the future would outrank every real refresh.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Hashable, Sequence
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from rentopt.optimizer.models import Offer
from rentopt.optimizer.sanity import PriceBands, UnknownCurrency

# Sane limits on an offer's other numbers, (low, high) inclusive. Real offers sit far inside
# them; they stop a typo (or a fuzzer) from reaching the planner with 1e300 GB per GPU.
OFFER_LIMITS: dict[str, tuple[float, float]] = {
    # The largest scale-up domain sold as one node is 72 GPUs (NVIDIA GB200 NVL72).
    "gpus": (1, 1024),
    # The largest GPU memory sold is 288 GB (AMD Instinct MI355X).
    "gpu_memory_gb": (0.001, 4096),
    "nodes_available": (1, 1_000_000),
    "interconnect_gbps": (0, 1e6),
    "fabric_gbps": (0, 1e6),
    "net_up_mbps": (0, 1e8),
    "net_down_mbps": (0, 1e8),
    "host_ram_gb": (0, 1e6),
    "billing_granularity_s": (1, 31_536_000),  # up to a year
    "billing_minimum_s": (0, 31_536_000),
    # A calendar month is 672-744 hours; providers bill 720 (30 days) or 730 (a year / 12).
    "month_hours": (672, 744),
    "stopped_max_days": (0, 36_500),
    "free_disk_gb": (0, 1e9),
    "max_duration_hours": (0, 876_000),  # a century
}
MAX_TERM_HOURS = 5 * 8760  # the longest reserved term sold is 3 years (AWS, Azure)

# How far ahead of this machine's clock a price may be dated: clocks and time zones disagree by
# hours, never by days. A later date is refused (issue 23: prices dated 2099 pinned a provider).
MAX_FUTURE = timedelta(days=1)

MAX_NAME_LENGTH = 64
_NAME_PUNCTUATION = frozenset("._- ")
# Control characters (C0, DEL, C1), and the format characters that reorder or hide text on a
# terminal (bidirectional overrides and isolates, zero-width marks, line/paragraph separators).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
# Line breaks and tabs are kept in the free-text fields (a spreadsheet cell over two lines names
# a GPU "RTX\n4090"; outputs escape them: optimizer/text.py), never in an offer id.
_CONTROL_NOT_SPACE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
TEXT_FIELDS = {"offer_id": _CONTROL, "gpu_raw": _CONTROL_NOT_SPACE, "region": _CONTROL_NOT_SPACE,
               "source": _CONTROL_NOT_SPACE}


def clock() -> datetime:
    """This machine's clock, now (one place, so a test can set it)."""
    return datetime.now(timezone.utc)


def provider_name_problem(name: object) -> str | None:
    """Why `name` cannot be a provider's name, or None.

    >>> provider_name_problem("lambda"), provider_name_problem("My Cloud 2"), provider_name_problem("恒源云")
    (None, None, None)
    >>> provider_name_problem("../../etc")
    "'../../etc' is not a provider name: use letters, digits, '.', '_', '-' and single spaces, starting with a letter or digit"
    >>> provider_name_problem("")
    'the provider name is empty'
    """
    if not isinstance(name, str) or not name:
        return "the provider name is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"the provider name is longer than {MAX_NAME_LENGTH} characters"
    ok = (name[0].isalnum() and not name.endswith(" ") and "  " not in name
          and all(c.isalnum() or c in _NAME_PUNCTUATION for c in name)
          and all(unicodedata.category(c)[0] in "LN" or c in _NAME_PUNCTUATION for c in name))
    if not ok:
        return (f"{shown(name)} is not a provider name: use letters, digits, '.', '_', '-' and single spaces, "
                "starting with a letter or digit")
    return None


def control_problem(field: str, value: object, pattern: re.Pattern[str] = _CONTROL) -> str | None:
    """Why a text field cannot be stored as it is (a control character in it), or None.

    >>> control_problem("offer_id", "a100x8") is None
    True
    >>> print(control_problem("offer_id", "x\\n#1 total 0.01 USD"))
    'x\\n#1 total 0.01 USD' holds a control character (\\n)
    """
    if isinstance(value, str) and (m := pattern.search(value)):
        return f"{shown(value)} holds a control character ({ascii(m.group())[1:-1]})"
    return None


def shown(text: str, limit: int = 60) -> str:
    """A foreign string quoted for a message, control characters escaped, cut at `limit`.

    >>> shown("a\\x1b[2Jb")
    "'a\\\\x1b[2Jb'"
    """
    cut = text if len(text) <= limit else text[:limit] + "..."
    return "'" + _CONTROL.sub(lambda m: ascii(m.group())[1:-1], cut).replace("'", "\\'") + "'"


@lru_cache(maxsize=1)
def _gpu_ids() -> frozenset[str]:
    from rentopt.optimizer.hardware import load_catalog

    return frozenset(load_catalog())


def known_gpu(gpu: str | None) -> bool:
    """Whether `gpu` is None (unknown, kept with its raw name) or a catalog id."""
    return gpu is None or gpu in _gpu_ids()


class RowCheck:
    """The door's rules (see the module docstring), for many rows: exchange rates and the
    catalog are loaded once, provider names checked once each."""

    def __init__(self, now: datetime | None = None, bands: PriceBands | None = None) -> None:
        self.now = now or clock()
        self.bands = bands or PriceBands()
        self._names: dict[str, str | None] = {}

    def problem(self, offer: Offer) -> tuple[str, str] | None:
        """(field, why) for the first rule `offer` breaks, else None."""
        if offer.provider not in self._names:
            self._names[offer.provider] = provider_name_problem(offer.provider)
        if problem := self._names[offer.provider]:
            return "provider", problem
        for field, pattern in TEXT_FIELDS.items():
            if problem := control_problem(field, getattr(offer, field), pattern):
                return field, problem
        if not known_gpu(offer.gpu):
            return "gpu", (f"{shown(str(offer.gpu))} is not a GPU id rentopt knows; use an id from `rentopt gpus`, "
                           "or null with gpu_raw and gpu_memory_gb for a card it does not know")
        for field, (low, high) in OFFER_LIMITS.items():
            value = getattr(offer, field)
            if value is not None and (not math.isfinite(value) or not low <= value <= high):
                return field, f"{value!r} is outside the sane range {low:g} to {high:g}"
        for i, option in enumerate(offer.price_options):
            if option.term_hours is not None and option.term_hours > MAX_TERM_HOURS:
                return (f"price_options.{i}.term_hours",
                        f"{option.term_hours} is longer than {MAX_TERM_HOURS} hours (5 years)")
        for i, option in enumerate(offer.price_options):
            try:
                problem = self.bands.gpu_hour_problem(option, offer.gpus, offer.month_hours, offer.currency)
            except UnknownCurrency as exc:
                return "currency", str(exc)
            if problem:
                return f"price_options.{i}.amount", problem
        if problem := self.bands.storage_problem(offer):  # the GPU-hour prices are checked above
            field, _, message = problem.partition(": ")
            return (field, message) if message else ("currency", problem)
        if problem := self.date_problem(offer.fetched_at):
            return "fetched_at", problem
        return None

    def first_problem(self, offers: Sequence[Offer]) -> tuple[int, tuple[str, str]] | None:
        """(index, `problem`'s answer) of the first of `offers` that breaks a rule, else None:
        what asking `problem` of each in turn gives, in fewer steps for a file's many offers.

        Each rule is first asked once per distinct input it reads (a provider name, a text, a
        GPU id, a price with the count, month and currency it is divided by, the storage and
        transfer prices with their currency, a date), and the number limits are compared per
        field; an offer one of them flags (or whose input raised) is a suspect. `problem` itself
        is then asked of the suspects in order: every offer it refuses is a suspect, so the first
        it refuses is the first of all."""
        suspects: set[int] = set()

        def flag(keys: Sequence[Hashable], bad: Callable[[int], bool], owners: Sequence[int] | None = None) -> None:
            """Flag the offers whose key's verdict is bad (`bad(i)` of the first item with it); an
            item is an offer, or with `owners` a part of the offer `owners[i]`."""
            verdicts: dict[Hashable, bool] = {}
            for i, key in enumerate(keys):
                try:
                    verdict = verdicts.get(key)
                except TypeError:  # unhashable (a signalling NaN): asked of `problem` itself
                    verdict = True
                if verdict is None:
                    try:
                        verdict = bad(i)
                    except Exception:  # noqa: BLE001 - `problem` raises it again, in its turn
                        verdict = True
                    verdicts[key] = verdict
                if verdict:
                    suspects.add(i if owners is None else owners[i])

        flag([o.provider for o in offers],
             lambda i: self._names.setdefault(offers[i].provider, provider_name_problem(offers[i].provider)) is not None)
        for field, pattern in TEXT_FIELDS.items():
            flag([getattr(o, field) for o in offers],
                 lambda i, f=field, p=pattern: control_problem(f, getattr(offers[i], f), p) is not None)
        flag([o.gpu for o in offers], lambda i: not known_gpu(offers[i].gpu))
        for field, (low, high) in OFFER_LIMITS.items():  # NaN and infinities fail the comparison too
            suspects.update(i for i, o in enumerate(offers)
                            if (value := getattr(o, field)) is not None and not low <= value <= high)
        options = [(i, option) for i, o in enumerate(offers) for option in o.price_options]

        def bad_option(j: int) -> bool:  # an unknown currency raises: `problem` says so
            i, option = options[j]
            o = offers[i]
            return (option.term_hours is not None and option.term_hours > MAX_TERM_HOURS) or \
                self.bands.gpu_hour_problem(option, o.gpus, o.month_hours, o.currency) is not None

        flag([(option.unit, option.amount, option.term_hours, offers[i].gpus, offers[i].month_hours, offers[i].currency)
              for i, option in options], bad_option, owners=[i for i, _ in options])
        flag([(o.storage_gb_month, o.storage_stopped_gb_month, o.egress_gb, o.ingress_gb, o.currency) for o in offers],
             lambda i: self.bands.storage_problem(offers[i]) is not None)
        flag([o.fetched_at for o in offers], lambda i: self.date_problem(offers[i].fetched_at) is not None)
        for i in sorted(suspects):
            if found := self.problem(offers[i]):
                return i, found
        return None

    def reason(self, offer: Offer) -> str | None:
        """`problem` as one phrase: "field: why" (a GPU-hour price's reason names its amount)."""
        found = self.problem(offer)
        if found is None:
            return None
        field, why = found
        return why if field.startswith("price_options.") and field.endswith(".amount") or field == "currency" \
            else f"{field}: {why}"

    def date_problem(self, when: datetime) -> str | None:
        """Why a price's date cannot be taken: no time zone, or more than MAX_FUTURE ahead."""
        if when.tzinfo is None or when.utcoffset() is None:
            return f"{when.isoformat()} has no time zone; write it as 2026-11-28T06:00:00Z"
        if when - self.now > MAX_FUTURE:
            return (f"{when.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC is more than a day in the future "
                    f"(now {self.now.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC); a price cannot be dated later "
                    "than it was read")
        return None
