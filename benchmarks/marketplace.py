"""Synthetic offers shaped like a GPU marketplace, for the benchmarks (never for quotes).

Many providers (40: 32 pricing in USD, 8 in CNY), 30 GPU types written the way providers
write them (catalog ids, "RTX 4090", bare "H100", "A100 80GB PCIe"), 1-8 GPUs per node,
hourly prices everywhere, daily/weekly/monthly ones on a third of the rows, interruptible
(spot) rows, storage and transfer prices, regions, limits on rental length. Per-GPU-hour
prices are drawn around each card's typical rental price (USD, x 7.2 for CNY), always inside
the sane bands rentopt holds every price to (optimizer/sanity.py).

`csv_lines(n)` writes the offers-file CSV format (optimizer/offers_io.py) row by row, so a
1,000,000-offer file is written without ever holding 1,000,000 objects; `offers(n)` gives
the same rows as Offer objects, provider by provider (`by_provider`), to fill a price store.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal

FETCHED = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)
HEADER = ("provider,offer_id,gpu,gpus,price_hour,price_day,price_week,price_month,currency,storage_gb_month,"
          "egress_gb,ingress_gb,interconnect,region,spot,max_days")
CNY_PER_USD = Decimal("7.2")
# (how a provider writes the card, the card's catalog id, typical USD per GPU-hour, interconnect)
CARDS = [
    ("H100-SXM-80GB", "H100-SXM-80GB", "2.10", "nvlink"), ("H100 PCIe", "H100-PCIe-80GB", "1.80", "pcie"),
    ("H100", "H100-SXM-80GB", "2.00", "nvlink"), ("H200-SXM-141GB", "H200-SXM-141GB", "3.20", "nvlink"),
    ("A100-SXM4-80GB", "A100-SXM4-80GB", "1.20", "nvlink"), ("A100 80GB PCIe", "A100-PCIe-80GB", "1.00", "pcie"),
    ("A100-PCIe-40GB", "A100-PCIe-40GB", "0.70", "pcie"), ("A800-SXM4-80GB", "A800-SXM4-80GB", "1.10", "nvlink"),
    ("H800-SXM-80GB", "H800-SXM-80GB", "1.90", "nvlink"), ("H20", "H20-96GB", "1.00", "nvlink"),
    ("L40S", "L40S-48GB", "0.85", "pcie"), ("L40-48GB", "L40-48GB", "0.75", "pcie"), ("L20", "L20-48GB", "0.60", "pcie"),
    ("L4", "L4-24GB", "0.40", "pcie"), ("A40", "A40-48GB", "0.45", "pcie"), ("A10G-24GB", "A10G-24GB", "0.50", "pcie"),
    ("A10", "A10-24GB", "0.45", "pcie"), ("T4", "T4-16GB", "0.20", "pcie"), ("V100-SXM2-32GB", "V100-SXM2-32GB", "0.50", "nvlink"),
    ("RTX A6000", "RTX-A6000-48GB", "0.45", "pcie"), ("RTX 6000 Ada", "RTX-6000-Ada-48GB", "0.80", "pcie"),
    ("RTX A5000", "RTX-A5000-24GB", "0.25", "pcie"), ("RTX 5090", "RTX-5090-32GB", "0.60", "pcie"),
    ("RTX 4090", "RTX-4090-24GB", "0.35", "pcie"), ("RTX 4090D", "RTX-4090D-24GB", "0.32", "pcie"),
    ("RTX 4080 SUPER", "RTX-4080-SUPER-16GB", "0.25", "pcie"), ("RTX 3090", "RTX-3090-24GB", "0.20", "pcie"),
    ("RTX 3080 Ti", "RTX-3080Ti-12GB", "0.15", "pcie"), ("MI300X", "MI300X-192GB", "2.50", "unknown"),
    ("RTX-A4000-16GB", "RTX-A4000-16GB", "0.15", "pcie"),
]
PROVIDERS = [(f"market{i:02d}", "CNY" if i % 5 == 4 else "USD") for i in range(40)]
REGIONS = ["us-east", "us-west", "eu-central", "eu-north", "ap-tokyo", "cn-north", "cn-east", "ca-quebec"]
CENT = Decimal("0.01")


def rows(n: int, seed: int = 1) -> Iterator[dict[str, str]]:
    """`n` offers as CSV cells by column name; the same `n` and `seed` give the same rows."""
    rng = random.Random(seed)
    for i in range(n):
        provider, currency = PROVIDERS[i % len(PROVIDERS)]
        raw, _, base, link = CARDS[rng.randrange(len(CARDS))]
        gpus = rng.choice((1, 1, 2, 4, 8))
        per_gpu = Decimal(base) * rng.randint(70, 150) / 100 * (CNY_PER_USD if currency == "CNY" else 1)
        hour = (per_gpu * gpus).quantize(CENT)
        spot = rng.random() < 0.15
        cells = {"provider": provider, "offer_id": f"{provider}-{i}", "gpu": raw, "gpus": str(gpus),
                 "price_hour": str(hour * Decimal("0.6") if spot else hour), "currency": currency,
                 "storage_gb_month": "0.10" if currency == "USD" else "0.70", "egress_gb": "0.01" if i % 3 else "",
                 "ingress_gb": "0", "interconnect": link if gpus > 1 else "", "region": REGIONS[i % len(REGIONS)],
                 "spot": "yes" if spot else "no", "max_days": str(rng.choice((30, 90, 365))) if i % 4 == 0 else ""}
        if not spot and i % 3 == 0:
            cells["price_day"] = str((hour * 24 * Decimal("0.85")).quantize(CENT))
            cells["price_week"] = str((hour * 168 * Decimal("0.75")).quantize(CENT)) if i % 2 else ""
            cells["price_month"] = str((hour * 730 * Decimal("0.6")).quantize(CENT)) if i % 6 == 0 else ""
        yield cells


def csv_lines(n: int, seed: int = 1) -> Iterator[str]:
    """The offers file of `n` offers, line by line (the header first)."""
    columns = HEADER.split(",")
    yield HEADER + "\n"
    for cells in rows(n, seed):
        yield ",".join(cells.get(c, "") for c in columns) + "\n"


def write_csv(path, n: int, seed: int = 1) -> None:  # noqa: ANN001 - a path
    with open(path, "w", encoding="utf-8") as fp:
        fp.writelines(csv_lines(n, seed))


def by_provider(n: int, seed: int = 1, chunk: int = 50_000) -> Iterator[tuple[str, list]]:
    """The same offers as Offer objects, (provider, its offers) at most `chunk` rows at a time
    in total, for filling a store without holding all of them."""
    from rentopt.optimizer.offers_io import parse_offers_csv

    lines = csv_lines(n, seed)
    header = next(lines)
    while True:
        block = [line for _, line in zip(range(chunk), lines)]
        if not block:
            return
        offers = parse_offers_csv(header + "".join(block), name="marketplace", fetched_at=FETCHED, source="synthetic")
        grouped: dict[str, list] = {}
        for o in offers:
            grouped.setdefault(o.provider, []).append(o)
        yield from grouped.items()


def write_spreadsheet_csv(path, n: int, seed: int = 1) -> None:  # noqa: ANN001 - a path
    """The same offers as `write_csv`, saved the way a spreadsheet or Python's csv module saves
    them: a byte-order mark, CRLF line ends, every cell quoted."""
    import csv

    columns = HEADER.split(",")
    with open(path, "w", encoding="utf-8-sig", newline="") as fp:
        writer = csv.writer(fp, quoting=csv.QUOTE_ALL)  # lineterminator CRLF, the csv module's default
        writer.writerow(columns)
        writer.writerows([cells.get(c, "") for c in columns] for cells in rows(n, seed))


# Sellers of the second shape: many of them, most pricing in CNY by the month (China's rental
# platforms), a few spellings each, and one price per card and seller repeated over its listings.
TIE_SELLERS = [(f"seller{i:03d}", "USD" if i % 10 == 0 else "CNY") for i in range(300)]


def tie_rows(n: int, seed: int = 2) -> Iterator[dict[str, str]]:
    """`n` offers with many ties: each seller lists each card many times at one price (its
    monthly price in CNY, an hourly one for the USD sellers), across regions."""
    rng = random.Random(seed)
    price: dict[tuple[str, str, int], Decimal] = {}
    for i in range(n):
        provider, currency = TIE_SELLERS[rng.randrange(len(TIE_SELLERS))]
        raw, _, base, link = CARDS[rng.randrange(len(CARDS))]
        gpus = rng.choice((1, 2, 4, 8))
        key = (provider, raw, gpus)
        if key not in price:
            price[key] = Decimal(base) * rng.randint(70, 150) / 100 * gpus
        per_hour = price[key]
        cells = {"provider": provider, "offer_id": f"{provider}-{i}", "gpu": raw, "gpus": str(gpus),
                 "currency": currency, "interconnect": link if gpus > 1 else "", "region": REGIONS[i % len(REGIONS)],
                 "spot": "no"}
        if currency == "CNY":
            cells["price_month"] = str((per_hour * CNY_PER_USD * 730 * Decimal("0.55")).quantize(CENT))
        else:
            cells["price_hour"] = str(per_hour.quantize(CENT))
        yield cells


def write_ties_csv(path, n: int, seed: int = 2) -> None:  # noqa: ANN001 - a path
    columns = HEADER.split(",")
    with open(path, "w", encoding="utf-8") as fp:
        fp.write(HEADER + "\n")
        fp.writelines(",".join(cells.get(c, "") for c in columns) + "\n" for cells in tie_rows(n, seed))
