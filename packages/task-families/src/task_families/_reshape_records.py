"""The record sets of the json-reshape family: what a person, an order, a device or a
support ticket looks like as nested JSON, which of their fields a draft may filter on, output,
sort by, leave out or flatten, and how a dotted field path is read from a record."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]
FieldPath = tuple[str, ...]


@dataclass(frozen=True)
class Dataset:
    noun: str
    id_path: FieldPath
    make: Callable[[random.Random, int], Record]
    fields: tuple[tuple[FieldPath, tuple[str, ...]], ...]
    """Fields that may be output: path and candidate output names."""
    numeric: tuple[FieldPath, ...]
    """Numeric fields for conditions and sorting."""
    categorical: tuple[FieldPath, ...]
    """String fields for equality conditions."""
    flag: tuple[FieldPath, str, str]
    """A boolean field and how to say it is true / false."""
    optional: tuple[FieldPath, Any]
    """A field that hard drafts leave out of some records, and its default."""
    explode: tuple[FieldPath, tuple[tuple[str, str], ...]]
    """A nested list and, for its elements, (key, output name) ('' key: the element)."""


_FIRST = ["Ada", "Bruno", "Chen", "Dalia", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jade"]
_LAST = ["Moreau", "Okafor", "Lind", "Silva", "Tanaka", "Novak", "Reyes", "Berg", "Kaur"]
_CITIES = ["Lyon", "Porto", "Oslo", "Graz", "Turin", "Ghent", "Brno"]
_SKILLS = ["python", "sql", "go", "rust", "excel", "design", "k8s"]


def _person(rng: random.Random, i: int) -> Record:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    return {
        "id": 100 + i,
        "name": {"first": first, "last": last},
        "age": rng.randint(19, 67),
        "dept": rng.choice(["sales", "ops", "eng", "hr", "legal"]),
        "contact": {"email": f"{first}.{last}{i}@example.com".lower(), "city": rng.choice(_CITIES)},
        "active": rng.random() < 0.6,
        "skills": rng.sample(_SKILLS, rng.randint(0, 3)),
    }


def _order(rng: random.Random, i: int) -> Record:
    items: list[dict[str, Any]] = [
        {
            "sku": f"{rng.choice(['BX', 'CL', 'DR', 'PN'])}-{rng.randint(10, 99)}",
            "qty": rng.randint(1, 5),
            "price": round(rng.uniform(2, 80), 2),
        }
        for _ in range(rng.randint(0, 3))
    ]
    return {
        "order_id": f"A{1000 + 7 * i}",
        "customer": {
            "name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}",
            "country": rng.choice(["DE", "FR", "NL", "PL", "ES"]),
        },
        "status": rng.choice(["new", "paid", "shipped", "returned"]),
        "total": round(sum(it["qty"] * it["price"] for it in items) + rng.choice([0, 4.99]), 2),
        "express": rng.random() < 0.3,
        "items": items,
    }


def _device(rng: random.Random, i: int) -> Record:
    return {
        "serial": f"SN-{4000 + 13 * i}",
        "model": rng.choice(["r540", "r650", "x1-mini", "edge-7"]),
        "location": {
            "site": rng.choice(["fra1", "ams2", "lon3", "par1"]),
            "rack": rng.randint(1, 40),
        },
        "metrics": {"cpu": round(rng.uniform(1, 99), 1), "temp_c": rng.randint(30, 85)},
        "online": rng.random() < 0.7,
        "interfaces": [
            {"name": f"eth{k}", "speed": rng.choice([100, 1000, 10000])}
            for k in range(rng.randint(0, 3))
        ],
    }


def _ticket(rng: random.Random, i: int) -> Record:
    return {
        "ticket": 5000 + i,
        "reporter": {
            "name": rng.choice(_FIRST),
            "team": rng.choice(["core", "web", "infra", "data"]),
        },
        "priority": rng.choice(["low", "medium", "high", "urgent"]),
        "hours": round(rng.uniform(0.5, 40), 1),
        "open": rng.random() < 0.5,
        "labels": rng.sample(
            ["bug", "ui", "perf", "docs", "security", "billing"], rng.randint(0, 3)
        ),
    }


DATASETS = {
    "people": Dataset(
        noun="people",
        id_path=("id",),
        make=_person,
        fields=(
            (("name", "first"), ("first_name", "given_name", "first")),
            (("name", "last"), ("last_name", "surname", "family_name")),
            (("age",), ("age", "age_years")),
            (("dept",), ("dept", "department", "team")),
            (("contact", "email"), ("email", "mail")),
            (("contact", "city"), ("city", "home_city")),
        ),
        numeric=(("age",),),
        categorical=(("contact", "city"), ("dept",)),
        flag=(("active",), "active", "inactive"),
        optional=(("contact", "city"), "unknown"),
        explode=(("skills",), (("", "skill"),)),
    ),
    "orders": Dataset(
        noun="orders",
        id_path=("order_id",),
        make=_order,
        fields=(
            (("customer", "name"), ("customer", "customer_name", "buyer")),
            (("customer", "country"), ("country", "country_code")),
            (("status",), ("status", "state")),
            (("total",), ("total", "amount", "order_total")),
        ),
        numeric=(("total",),),
        categorical=(("status",), ("customer", "country")),
        flag=(("express",), "sent express", "not sent express"),
        optional=(("customer", "country"), "n/a"),
        explode=(("items",), (("sku", "sku"), ("qty", "quantity"))),
    ),
    "devices": Dataset(
        noun="devices",
        id_path=("serial",),
        make=_device,
        fields=(
            (("model",), ("model", "hw_model")),
            (("location", "site"), ("site", "datacenter")),
            (("location", "rack"), ("rack", "rack_no")),
            (("metrics", "cpu"), ("cpu", "cpu_pct", "cpu_load")),
            (("metrics", "temp_c"), ("temp_c", "temperature")),
        ),
        numeric=(("metrics", "cpu"), ("metrics", "temp_c")),
        categorical=(("location", "site"), ("model",)),
        flag=(("online",), "online", "offline"),
        optional=(("location", "rack"), 0),
        explode=(("interfaces",), (("name", "iface"), ("speed", "speed_mbps"))),
    ),
    "tickets": Dataset(
        noun="support tickets",
        id_path=("ticket",),
        make=_ticket,
        fields=(
            (("reporter", "name"), ("reporter", "reported_by")),
            (("reporter", "team"), ("team", "owner_team")),
            (("priority",), ("priority", "prio")),
            (("hours",), ("hours", "time_spent")),
        ),
        numeric=(("hours",),),
        categorical=(("priority",), ("reporter", "team")),
        flag=(("open",), "open", "closed"),
        optional=(("reporter", "team"), "unassigned"),
        explode=(("labels",), (("", "label"),)),
    ),
}

MISSING = object()


def lookup(record: Record, path: FieldPath, default: Any = MISSING) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, dict) or key not in value:
            if default is MISSING:
                raise KeyError(".".join(path))
            return default
        value = value[key]
    return value


def dotted(path: FieldPath) -> str:
    return ".".join(path)
