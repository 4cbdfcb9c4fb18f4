"""csv-aggregate: total a numeric column of a CSV file per group.

The file's delimiter and column order are drawn per task and the instruction names the
columns by meaning, not position, so the expert reads the header first and writes its
script for what it saw. Harder drafts add quoted fields, blank lines and a second file.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_GROUPS = phrase_table("csv_aggregate", "groups")
_VALUES = {"amount": "amount", "revenue": "revenue", "units": "units", "cost": "cost"}
_DELIMS = {",": "comma", ";": "semicolon", "\t": "tab", "|": "pipe"}
_OPENERS = phrases("csv_aggregate", "openers")
_ASKS = phrases("csv_aggregate", "asks")
_NOTES = phrases("csv_aggregate", "notes")
_HARD = phrases("csv_aggregate", "hard")


@register
class CsvAggregate(Family):
    name = "csv-aggregate"
    category = "data-processing"
    description = "Total a numeric column per group in a CSV whose layout must be inspected."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        group = rng.choice(sorted(_GROUPS))
        value = rng.choice(sorted(_VALUES))
        delim = rng.choice(sorted(_DELIMS))
        n_rows = {"easy": 12, "medium": 40, "hard": 90}[difficulty] + rng.randrange(8)
        hard = difficulty == "hard"
        rows, lines = _draw_table(rng, group, value, delim, n_rows, hard)
        totals: dict[str, float] = {}
        for row in rows:
            totals[row[group]] = totals.get(row[group], 0.0) + float(row[value])
        totals = {k: round(v, 2) for k, v in sorted(totals.items())}
        stem = rng.choice(["sales", "ledger", "records", "export", "data", "report"])
        src = (
            f"{stem}.{'tsv' if delim == chr(9) else 'csv'}" if rng.random() < 0.5 else f"{stem}.txt"
        )
        out = rng.choice(["totals.json", f"{group}_totals.json", "summary.json", "out/totals.json"])
        parts = [
            rng.choice(_OPENERS).format(src=src),
            rng.choice(_ASKS).format(group=group, value=value, out=out),
            rng.choice(_NOTES),
        ]
        if hard:
            parts.append(rng.choice(_HARD))
        tests = fill(
            "csv_aggregate",
            "test_outputs",
            expected=json.dumps(totals, sort_keys=True),
            path="/app/" + out,
        )
        return TaskDraft(
            instruction=" ".join(parts),
            files={f"/app/{src}": "\n".join(lines) + "\n"},
            tests=tests,
            solution=_script(src, out, group, value),
            expert=_expert(src, out, group, value),
            params={
                "group": group,
                "value": value,
                "delimiter": _DELIMS[delim],
                "rows": n_rows,
                "source": src,
                "output": out,
            },
            tags=["csv", "json"],
        )


def _draw_table(
    rng: random.Random, group: str, value: str, delim: str, n_rows: int, hard: bool
) -> tuple[list[dict[str, str]], list[str]]:
    """The rows and the file's lines (hard drafts quote some cells and leave blank lines)."""
    extra_cols = rng.sample(["id", "date", "note", "clerk", "channel"], k=rng.randint(1, 3))
    columns = [group, value, *extra_cols]
    rng.shuffle(columns)
    names = rng.sample(_GROUPS[group], k=rng.randint(3, len(_GROUPS[group])))
    rows: list[dict[str, str]] = []
    for i in range(n_rows):
        row = {
            group: rng.choice(names),
            value: f"{rng.uniform(1, 500):.2f}",
            "id": str(1000 + i),
            "date": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "note": rng.choice(["ok", "late", "rush", "n/a", "gift"]),
            "clerk": rng.choice(["ann", "bo", "cy", "di"]),
            "channel": rng.choice(["web", "phone", "walk-in"]),
        }
        rows.append(row)
    lines = [delim.join(columns)]
    for row in rows:
        cells = [f'"{row[c]}"' if hard and rng.random() < 0.3 else row[c] for c in columns]
        lines.append(delim.join(cells))
        if hard and rng.random() < 0.08:
            lines.append("")
    return rows, lines


def _expert(src: str, out: str, group: str, value: str) -> Callable[[], ExpertProgram]:
    """Read the header to find the delimiter and columns, write the script, run it."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(f"head -n 3 {src}", "First I look at the header.")
        header = seen.output.splitlines()[0] if seen.output else ""
        found = max(_DELIMS, key=header.count)
        cols = [c.strip('"') for c in header.split(found)]
        note = (
            f"The file is {_DELIMS[found]}-separated; `{group}` is column "
            f"{cols.index(group) + 1} and `{value}` column {cols.index(value) + 1}."
            if group in cols and value in cols
            else "I will let the csv module find the columns by name."
        )
        yield write("/app/aggregate.py", _script_body(src, out, group, value, found), note)
        ran = yield shell("python3 /app/aggregate.py && cat " + out, "Now I run it.")
        if not ran.ok:
            return "The script failed; see the output above."
        return f"Wrote the per-{group} totals of {value} to {out}."

    return expert


def _script_body(src: str, out: str, group: str, value: str, delim: str) -> str:
    return fill(
        "csv_aggregate", "aggregate", src=src, delim=delim, group=group, value=value, out=out
    )


def _script(src: str, out: str, group: str, value: str) -> str:
    """The oracle: sniff the delimiter from the header, then total."""
    return textwrap.dedent(
        f"""\
        python3 - <<'PY'
        import csv, json, os
        header = open({src!r}).readline()
        delim = max([",", ";", "\\t", "|"], key=header.count)
        totals = {{}}
        with open({src!r}, newline="") as fh:
            for row in csv.DictReader((l for l in fh if l.strip()), delimiter=delim):
                totals[row[{group!r}]] = totals.get(row[{group!r}], 0.0) + float(row[{value!r}])
        os.makedirs(os.path.dirname({out!r}) or ".", exist_ok=True)
        json.dump({{k: round(v, 2) for k, v in totals.items()}}, open({out!r}, "w"))
        PY
        """
    )
