"""json-reshape: filter, select, rename and sort nested JSON records into a new file.

The records (people, orders, devices or support tickets) are nested objects; the
instruction states the condition, the fields to keep (dotted paths and their new names),
the sort order and the output format (a JSON array, JSON lines or CSV). Harder drafts add
a second condition, leave some fields out of some records (with a stated default) and ask
for one output row per element of a nested list. Single-turn: every rule is stated.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ale.synth.expert import shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

Record = dict[str, Any]
FieldPath = tuple[str, ...]


@dataclass(frozen=True)
class _Dataset:
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


_DATASETS = {
    "people": _Dataset(
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
    "orders": _Dataset(
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
    "devices": _Dataset(
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
    "tickets": _Dataset(
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

_MISSING = object()


def _get(record: Record, path: FieldPath, default: Any = _MISSING) -> Any:
    value: Any = record
    for key in path:
        if not isinstance(value, dict) or key not in value:
            if default is _MISSING:
                raise KeyError(".".join(path))
            return default
        value = value[key]
    return value


def _dotted(path: FieldPath) -> str:
    return ".".join(path)


_OPENERS = phrases("json_reshape", "openers")
_LAYOUTS = phrase_table("json_reshape", "layouts")
_NUM_OPS = phrase_table("json_reshape", "num_ops")
_KEEP_LEADS = phrases("json_reshape", "keep_leads")
_FIELD_LEADS = phrases("json_reshape", "field_leads")
_SORT_TEXT = phrase_table("json_reshape", "sort_text")
_OUT_TEXT = phrase_table("json_reshape", "out_text")


_CAT_TEXT = phrases("json_reshape", "cat_text")
_CAT_NOT_TEXT = phrases("json_reshape", "cat_not_text")
_FLAG_TEXT = phrases("json_reshape", "flag_text")


def _condition(
    rng: random.Random, kind: str, ds: _Dataset, records: list[Record]
) -> tuple[str, str]:
    """A condition of ``kind``: its wording and a Python expression over record ``r``."""
    opt = ds.optional[0]
    if kind == "num":
        path = rng.choice([p for p in ds.numeric if p != opt])
        values = sorted(_get(r, path) for r in records)
        value = values[rng.randint(len(values) * 3 // 10, len(values) * 7 // 10)]
        op = rng.choice(sorted(_NUM_OPS))
        text = f"`{_dotted(path)}` " + rng.choice(_NUM_OPS[op]).format(v=value)
        return text, f"get(r, {path!r}) {op} {value!r}"
    if kind == "cat":
        path = rng.choice([p for p in ds.categorical if p != opt])
        value = rng.choice(sorted({_get(r, path) for r in records}))
        if rng.random() < 0.3:
            text = rng.choice(_CAT_NOT_TEXT).format(p=_dotted(path), v=value)
            return text, f"get(r, {path!r}) != {value!r}"
        text = rng.choice(_CAT_TEXT).format(p=_dotted(path), v=value)
        return text, f"get(r, {path!r}) == {value!r}"
    path, yes, no = ds.flag
    truth = rng.random() < 0.6
    text = rng.choice(_FLAG_TEXT).format(
        p=_dotted(path),
        j=json.dumps(truth),
        noun=ds.noun.split()[-1].rstrip("s"),
        word=yes if truth else no,
    )
    return text, f"get(r, {path!r}) is {truth!r}"


_GET = """\
MISSING = object()


def get(record, path, default=MISSING):
    value = record
    for key in path:
        if not isinstance(value, dict) or key not in value:
            if default is MISSING:
                raise KeyError(".".join(path))
            return default
        value = value[key]
    return value
"""


@dataclass(frozen=True)
class _Plan:
    """Everything the reshaping program needs."""

    src: str
    layout: str
    wrap_key: str
    out: str
    fmt: str
    columns: tuple[tuple[FieldPath, str], ...]
    condition: str
    sort_path: FieldPath
    descending: bool
    id_path: FieldPath
    optional: tuple[FieldPath, Any] | None
    explode: tuple[FieldPath, tuple[tuple[str, str], ...]] | None

    def names(self) -> list[str]:
        extra = [o for _, o in self.explode[1]] if self.explode else []
        return [n for _, n in self.columns] + extra

    def core(self) -> str:
        """Code turning ``records`` into ``rows``: filter, sort, select and rename."""
        pairs = []
        for path, name in self.columns:
            default = ""
            if self.optional and path == self.optional[0]:
                default = f", {self.optional[1]!r}"
            pairs.append(f"{name!r}: get(r, {path!r}{default})")
        base = "{" + ", ".join(pairs) + "}"
        if self.explode is None:
            build = f"rows = [{base} for r in kept]"
        else:
            list_path, elem = self.explode
            cells = ", ".join(f"{o!r}: {'item' if k == '' else f'item[{k!r}]'}" for k, o in elem)
            build = (
                f"rows = [\n    {{**{base}, {cells}}}\n"
                f"    for r in kept\n    for item in get(r, {list_path!r})\n]"
            )
        return (
            f"kept = [r for r in records if {self.condition}]\n"
            f"kept.sort(key=lambda r: get(r, {self.id_path!r}))\n"
            f"kept.sort(key=lambda r: get(r, {self.sort_path!r}), reverse={self.descending!r})\n"
            f"{build}\n"
        )

    def program(self) -> str:
        if self.layout == "jsonl":
            load = "records = [json.loads(line) for line in fh if line.strip()]"
        elif self.layout == "array":
            load = "records = json.load(fh)"
        else:
            load = f"records = json.load(fh)[{self.wrap_key!r}]"
        names = self.names()
        if self.fmt == "json":
            dump = "json.dump(rows, fh, indent=2)"
        elif self.fmt == "jsonl":
            dump = "fh.writelines(json.dumps(row) + '\\n' for row in rows)"
        else:
            dump = (
                f"writer = csv.writer(fh)\n    writer.writerow({names!r})\n"
                f"    writer.writerows([row[n] for n in {names!r}] for row in rows)"
            )
        newline = ', newline=""' if self.fmt == "csv" else ""
        return (
            f"import csv\nimport json\nimport os\n\n{_GET}\n\n"
            f"with open({self.src!r}) as fh:\n    {load}\n"
            f"{self.core()}"
            f"os.makedirs(os.path.dirname({self.out!r}), exist_ok=True)\n"
            f"with open({self.out!r}, 'w'{newline}) as fh:\n    {dump}\n"
        )


@register
class JsonReshape(Family):
    name = "json-reshape"
    category = "data-processing"
    description = "Filter, select, rename and sort nested JSON records into JSON, JSONL or CSV."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        key = rng.choice(sorted(_DATASETS))
        ds = _DATASETS[key]
        hard = difficulty == "hard"
        n = {"easy": 12, "medium": 35, "hard": 50}[difficulty] + rng.randrange(8)
        records = [ds.make(rng, i) for i in range(n)]
        rng.shuffle(records)
        opt_path, opt_default = ds.optional
        if hard:
            for record in records:
                if rng.random() < 0.25:
                    del _get(record, opt_path[:-1])[opt_path[-1]]

        for _ in range(50):
            kinds = ["num", "cat", "flag"]
            rng.shuffle(kinds)
            conds = [
                _condition(rng, k, ds, records) for k in kinds[: 1 if difficulty == "easy" else 2]
            ]
            condition = " and ".join(f"({code})" for _, code in conds)
            test = eval(compile(f"lambda r: {condition}", "<condition>", "eval"), {"get": _get})
            kept = [r for r in records if test(r)]
            flat = sum(len(_get(r, ds.explode[0])) for r in kept) if hard else len(kept)
            if 3 <= len(kept) < len(records) and flat >= 3:
                break

        id_names = ["id", "person_id"] if ds.id_path == ("id",) else [ds.id_path[-1], "id", "key"]
        choices = [f for f in ds.fields if hard or f[0] != opt_path]
        picked = rng.sample(choices, rng.randint(2, min(4, len(choices))))
        if hard and all(path != opt_path for path, _ in picked):
            picked[-1] = next(f for f in ds.fields if f[0] == opt_path)
        columns = (
            (ds.id_path, rng.choice(id_names)),
            *((path, rng.choice(names)) for path, names in picked),
        )
        sort_path = rng.choice([p for p in ds.numeric if p != opt_path])
        descending = rng.random() < 0.5

        layout = rng.choice(sorted(_LAYOUTS))
        wrap_key = rng.choice(["records", "items", "data", key])
        src = rng.choice(
            [f"/app/data/{key}.json", f"/app/{key}.json", f"/app/input/{key}_export.json"]
        )
        if layout == "jsonl":
            src = src[:-5] + ".jsonl"
            content = "".join(json.dumps(r) + "\n" for r in records)
        elif layout == "array":
            content = json.dumps(records, indent=2) + "\n"
        else:
            content = json.dumps({"exported": "2026-03-02", wrap_key: records}, indent=2) + "\n"
        fmt = rng.choice(["json", "jsonl", "csv"])
        stem = rng.choice(["extract", "result", f"{key}_flat", f"selected_{key}"])
        out = rng.choice([f"/app/out/{stem}", f"/app/{stem}", f"/app/export/{stem}"]) + "." + fmt
        plan = _Plan(
            src=src,
            layout=layout,
            wrap_key=wrap_key,
            out=out,
            fmt=fmt,
            columns=columns,
            condition=condition,
            sort_path=sort_path,
            descending=descending,
            id_path=ds.id_path,
            optional=ds.optional if hard else None,
            explode=ds.explode if hard else None,
        )
        program = plan.program()
        rows, names = _expected(plan, records), plan.names()

        list_path, elem_fields = ds.explode
        field_lines = [f"- `{_dotted(p)}` as `{name}`" for p, name in columns]
        if hard:
            field_lines += [
                f"- {'each entry' if k == '' else f'`{k}` of each entry'} of `{_dotted(list_path)}` as `{o}`"
                for k, o in elem_fields
            ]
        sort_text = rng.choice(_SORT_TEXT["desc" if descending else "asc"]).format(
            f=_dotted(sort_path), id=_dotted(ds.id_path)
        )
        layout_text = rng.choice(_LAYOUTS[layout]).format(key=wrap_key)
        first = [
            rng.choice(_OPENERS).format(src=src, noun=ds.noun, layout=layout_text),
            rng.choice(_KEEP_LEADS).format(cond=" and ".join(text for text, _ in conds)),
        ]
        rules = [sort_text, rng.choice(_OUT_TEXT[fmt]).format(out=out)]
        if hard:
            rules.append(
                rng.choice(
                    [
                        f"Some records lack `{_dotted(opt_path)}`; use {json.dumps(opt_default)} for it when it is missing.",
                        f"When `{_dotted(opt_path)}` is absent, output the default {json.dumps(opt_default)}.",
                        f"`{_dotted(opt_path)}` is missing from some records: write {json.dumps(opt_default)} there.",
                    ]
                )
            )
            rules.append(
                rng.choice(
                    [
                        f"Emit one row per entry of `{_dotted(list_path)}` (a record with an empty list gives no rows); rows of one record keep the list's order.",
                        f"Flatten `{_dotted(list_path)}`: every entry becomes its own row carrying the record's fields, records whose list is empty are dropped, and entries of one record stay in list order.",
                    ]
                )
            )
        fields_block = rng.choice(_FIELD_LEADS) + "\n\n" + "\n".join(field_lines)
        instruction = "\n\n".join([" ".join(first), fields_block, " ".join(rules)])
        solution = f"python3 - <<'PY'\n{program}PY\n"

        def expert() -> ExpertProgram:
            yield shell(f"head -c 700 {src}; echo", "Let me look at the input first.")
            yield write(
                "/app/reshape.py",
                program,
                "I write a script that filters, picks and renames the fields, sorts and writes the output.",
            )
            ran = yield shell(
                f"python3 /app/reshape.py && head -n 6 {out}",
                "Now I run it and look at the start of the output.",
            )
            if not ran.ok:
                return "The script failed; see the output above."
            return f"Wrote the reshaped {ds.noun} to {out}."

        return TaskDraft(
            instruction=instruction,
            files={src: content},
            tests=_tests(out, fmt, names, rows),
            solution=solution,
            expert=expert,
            params={
                "dataset": key,
                "records": n,
                "layout": layout,
                "conditions": len(conds),
                "columns": names,
                "sort": [_dotted(sort_path), "desc" if descending else "asc"],
                "format": fmt,
                "rows": len(rows),
                "missing_default": hard,
                "flatten": _dotted(list_path) if hard else None,
                "output": out,
            },
            mistakes=[
                shell(f"jq '.[0]' {src}", "Let me pretty-print the first record."),
                shell(f"head -c 700 /app/{key}.csv", "Let me look at the input first."),
            ],
            tags=["json", "reshape"],
        )


def _expected(plan: _Plan, records: list[Record]) -> list[Record]:
    """The rows the plan's program makes from ``records`` (run in memory)."""
    namespace: dict[str, Any] = {"records": json.loads(json.dumps(records))}
    exec(compile(_GET + plan.core(), "<reshape>", "exec"), namespace)
    return json.loads(json.dumps(namespace["rows"]))


def _tests(out: str, fmt: str, names: list[str], rows: list[Record]) -> str:
    return fill(
        "json_reshape",
        "test_outputs",
        out=out,
        fmt=fmt,
        names=json.dumps(names),
        rows=json.dumps(rows),
    )
