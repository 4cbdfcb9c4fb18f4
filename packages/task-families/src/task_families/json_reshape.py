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
from task_families._reshape_records import (
    DATASETS,
    Dataset,
    FieldPath,
    Record,
    dotted,
    lookup,
)
from task_families._sources import fill, phrase_table, phrases, source

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
    rng: random.Random, kind: str, ds: Dataset, records: list[Record]
) -> tuple[str, str]:
    """A condition of ``kind``: its wording and a Python expression over record ``r``."""
    opt = ds.optional[0]
    if kind == "num":
        path = rng.choice([p for p in ds.numeric if p != opt])
        values = sorted(lookup(r, path) for r in records)
        value = values[rng.randint(len(values) * 3 // 10, len(values) * 7 // 10)]
        op = rng.choice(sorted(_NUM_OPS))
        text = f"`{dotted(path)}` " + rng.choice(_NUM_OPS[op]).format(v=value)
        return text, f"get(r, {path!r}) {op} {value!r}"
    if kind == "cat":
        path = rng.choice([p for p in ds.categorical if p != opt])
        value = rng.choice(sorted({lookup(r, path) for r in records}))
        if rng.random() < 0.3:
            text = rng.choice(_CAT_NOT_TEXT).format(p=dotted(path), v=value)
            return text, f"get(r, {path!r}) != {value!r}"
        text = rng.choice(_CAT_TEXT).format(p=dotted(path), v=value)
        return text, f"get(r, {path!r}) == {value!r}"
    path, yes, no = ds.flag
    truth = rng.random() < 0.6
    text = rng.choice(_FLAG_TEXT).format(
        p=dotted(path),
        j=json.dumps(truth),
        noun=ds.noun.split()[-1].rstrip("s"),
        word=yes if truth else no,
    )
    return text, f"get(r, {path!r}) is {truth!r}"


_GET = source("json_reshape", "get")


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
        key = rng.choice(sorted(DATASETS))
        ds = DATASETS[key]
        hard = difficulty == "hard"
        records = _draw_records(rng, ds, difficulty)
        conds, condition = _draw_conditions(rng, ds, records, difficulty)
        columns, sort_path, descending = _draw_columns(rng, ds, hard)
        plan, content = _draw_plan(
            rng, key, ds, records, hard, (columns, condition, sort_path, descending)
        )
        program = plan.program()
        rows, names = _expected(plan, records), plan.names()
        list_path = ds.explode[0]
        return TaskDraft(
            instruction=_instruction(rng, ds, plan, conds, hard),
            files={plan.src: content},
            tests=_tests(plan.out, plan.fmt, names, rows),
            solution=f"python3 - <<'PY'\n{program}PY\n",
            expert=_expert(plan, program, ds.noun),
            params={
                "dataset": key,
                "records": len(records),
                "layout": plan.layout,
                "conditions": len(conds),
                "columns": names,
                "sort": [dotted(sort_path), "desc" if descending else "asc"],
                "format": plan.fmt,
                "rows": len(rows),
                "missing_default": hard,
                "flatten": dotted(list_path) if hard else None,
                "output": plan.out,
            },
            mistakes=[
                shell(f"jq '.[0]' {plan.src}", "Let me pretty-print the first record."),
                shell(f"head -c 700 /app/{key}.csv", "Let me look at the input first."),
            ],
            tags=["json", "reshape"],
        )


def _draw_records(rng: random.Random, ds: Dataset, difficulty: str) -> list[Record]:
    """The shuffled records; in hard drafts some lack the optional field."""
    n = {"easy": 12, "medium": 35, "hard": 50}[difficulty] + rng.randrange(8)
    records = [ds.make(rng, i) for i in range(n)]
    rng.shuffle(records)
    opt_path = ds.optional[0]
    if difficulty == "hard":
        for record in records:
            if rng.random() < 0.25:
                del lookup(record, opt_path[:-1])[opt_path[-1]]
    return records


def _draw_conditions(
    rng: random.Random, ds: Dataset, records: list[Record], difficulty: str
) -> tuple[list[tuple[str, str]], str]:
    """The conditions (wording, code) and their conjunction, redrawn until it keeps some but
    not all records (and, in hard drafts, at least three flattened rows)."""
    for _ in range(50):
        kinds = ["num", "cat", "flag"]
        rng.shuffle(kinds)
        conds = [_condition(rng, k, ds, records) for k in kinds[: 1 if difficulty == "easy" else 2]]
        condition = " and ".join(f"({code})" for _, code in conds)
        test = eval(compile(f"lambda r: {condition}", "<condition>", "eval"), {"get": lookup})
        kept = [r for r in records if test(r)]
        flat = (
            sum(len(lookup(r, ds.explode[0])) for r in kept) if difficulty == "hard" else len(kept)
        )
        if 3 <= len(kept) < len(records) and flat >= 3:
            break
    return conds, condition


def _draw_columns(
    rng: random.Random, ds: Dataset, hard: bool
) -> tuple[tuple[tuple[FieldPath, str], ...], FieldPath, bool]:
    """The output columns (the id first, hard drafts include the optional field), the sort
    field and whether the sort is descending."""
    opt_path = ds.optional[0]
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
    return columns, sort_path, rng.random() < 0.5


def _draw_plan(
    rng: random.Random,
    key: str,
    ds: Dataset,
    records: list[Record],
    hard: bool,
    drawn: tuple[tuple[tuple[FieldPath, str], ...], str, FieldPath, bool],
) -> tuple[_Plan, str]:
    """The plan of the reshaping program and the input's content: the input's layout and path
    and the output's path and format are drawn here; the columns, condition, sort field and
    direction (``drawn``) were drawn before."""
    columns, condition, sort_path, descending = drawn
    layout = rng.choice(sorted(_LAYOUTS))
    wrap_key = rng.choice(["records", "items", "data", key])
    src = rng.choice([f"/app/data/{key}.json", f"/app/{key}.json", f"/app/input/{key}_export.json"])
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
    return plan, content


def _instruction(
    rng: random.Random, ds: Dataset, plan: _Plan, conds: list[tuple[str, str]], hard: bool
) -> str:
    """The instruction: input, conditions, fields, sort and output (and the hard rules)."""
    opt_path, opt_default = ds.optional
    list_path, elem_fields = ds.explode
    field_lines = [f"- `{dotted(p)}` as `{name}`" for p, name in plan.columns]
    if hard:
        field_lines += [
            f"- {'each entry' if k == '' else f'`{k}` of each entry'} of `{dotted(list_path)}` as `{o}`"
            for k, o in elem_fields
        ]
    sort_text = rng.choice(_SORT_TEXT["desc" if plan.descending else "asc"]).format(
        f=dotted(plan.sort_path), id=dotted(ds.id_path)
    )
    layout_text = rng.choice(_LAYOUTS[plan.layout]).format(key=plan.wrap_key)
    first = [
        rng.choice(_OPENERS).format(src=plan.src, noun=ds.noun, layout=layout_text),
        rng.choice(_KEEP_LEADS).format(cond=" and ".join(text for text, _ in conds)),
    ]
    rules = [sort_text, rng.choice(_OUT_TEXT[plan.fmt]).format(out=plan.out)]
    if hard:
        rules.append(
            rng.choice(
                [
                    f"Some records lack `{dotted(opt_path)}`; use {json.dumps(opt_default)} for it when it is missing.",
                    f"When `{dotted(opt_path)}` is absent, output the default {json.dumps(opt_default)}.",
                    f"`{dotted(opt_path)}` is missing from some records: write {json.dumps(opt_default)} there.",
                ]
            )
        )
        rules.append(
            rng.choice(
                [
                    f"Emit one row per entry of `{dotted(list_path)}` (a record with an empty list gives no rows); rows of one record keep the list's order.",
                    f"Flatten `{dotted(list_path)}`: every entry becomes its own row carrying the record's fields, records whose list is empty are dropped, and entries of one record stay in list order.",
                ]
            )
        )
    fields_block = rng.choice(_FIELD_LEADS) + "\n\n" + "\n".join(field_lines)
    return "\n\n".join([" ".join(first), fields_block, " ".join(rules)])


def _expert(plan: _Plan, program: str, noun: str) -> Callable[[], ExpertProgram]:
    """Look at the input, write the program, run it and look at the output."""

    def expert() -> ExpertProgram:
        yield shell(f"head -c 700 {plan.src}; echo", "Let me look at the input first.")
        yield write(
            "/app/reshape.py",
            program,
            "I write a script that filters, picks and renames the fields, sorts and writes the output.",
        )
        ran = yield shell(
            f"python3 /app/reshape.py && head -n 6 {plan.out}",
            "Now I run it and look at the start of the output.",
        )
        if not ran.ok:
            return "The script failed; see the output above."
        return f"Wrote the reshaped {noun} to {plan.out}."

    return expert


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
