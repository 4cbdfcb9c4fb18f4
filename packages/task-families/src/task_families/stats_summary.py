"""stats-summary: descriptive statistics and a least-squares fit of a measurement table.

A table of measurements (comma-separated or whitespace-aligned columns, drawn per task)
is given; the instruction asks for a drawn subset of statistics (mean, median, sample
standard deviation, min, max, the slope and intercept of a least-squares line, Pearson's
r) of named columns, stored in a JSON file under stated keys with stated rounding.
Medium drafts add comment lines; hard drafts mark missing readings ``NA`` (to be skipped)
and ask for one column in another unit.
"""

from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import Code, fill, phrase_table, phrases

_STATS: dict[str, Callable[[list[float]], float]] = {
    "mean": statistics.mean,
    "median": statistics.median,
    "stdev": statistics.stdev,
    "min": min,
    "max": max,
}


@dataclass(frozen=True)
class _Col:
    name: str
    short: str
    lo: float
    hi: float
    decimals: int


@dataclass(frozen=True)
class _Unit:
    """A unit conversion: ``new = old * factor + offset``."""

    column: str
    to_unit: str
    factor: float
    offset: float
    formula: str


# Each domain: the independent column first, then columns that may depend on it.
_DOMAINS: dict[str, list[_Col]] = {
    "weather": [
        _Col("hour", "hour", 0, 48, 1),
        _Col("temp_c", "temp", -5, 30, 2),
        _Col("humidity_pct", "humidity", 20, 95, 1),
        _Col("pressure_hpa", "pressure", 990, 1030, 1),
    ],
    "growth": [
        _Col("day", "day", 1, 60, 0),
        _Col("height_cm", "height", 2, 80, 2),
        _Col("mass_g", "mass", 5, 400, 1),
        _Col("leaf_count", "leaves", 2, 40, 0),
    ],
    "battery": [
        _Col("cycle", "cycle", 1, 500, 0),
        _Col("capacity_mah", "capacity", 1800, 3200, 1),
        _Col("voltage_v", "voltage", 3.4, 4.2, 3),
        _Col("cell_temp_c", "celltemp", 18, 45, 2),
    ],
    "pump": [
        _Col("pressure_kpa", "pressure", 50, 400, 1),
        _Col("flow_lpm", "flow", 5, 120, 2),
        _Col("power_w", "power", 200, 1500, 1),
        _Col("fluid_temp_c", "fluidtemp", 10, 60, 2),
    ],
}

_UNITS: dict[str, list[_Unit]] = {
    "temp_c": [_Unit("temp_c", "degrees Fahrenheit", 1.8, 32.0, "F = C * 9/5 + 32")],
    "cell_temp_c": [_Unit("cell_temp_c", "kelvin", 1.0, 273.15, "K = C + 273.15")],
    "fluid_temp_c": [_Unit("fluid_temp_c", "degrees Fahrenheit", 1.8, 32.0, "F = C * 9/5 + 32")],
    "pressure_hpa": [_Unit("pressure_hpa", "kilopascals", 0.1, 0.0, "1 hPa = 0.1 kPa")],
    "height_cm": [_Unit("height_cm", "millimetres", 10.0, 0.0, "1 cm = 10 mm")],
    "mass_g": [_Unit("mass_g", "kilograms", 0.001, 0.0, "1 g = 0.001 kg")],
    "capacity_mah": [_Unit("capacity_mah", "ampere-hours", 0.001, 0.0, "1 mAh = 0.001 Ah")],
    "flow_lpm": [_Unit("flow_lpm", "litres per second", 1 / 60, 0.0, "L/s = L/min / 60")],
    "power_w": [_Unit("power_w", "kilowatts", 0.001, 0.0, "1 W = 0.001 kW")],
    "pressure_kpa": [_Unit("pressure_kpa", "bar", 0.01, 0.0, "1 kPa = 0.01 bar")],
}

_SINGLE = ["mean", "median", "stdev", "min", "max"]
_PAIR = ["slope", "intercept", "r"]
_ALIASES = [
    {"mean": "mean", "median": "median", "stdev": "stdev", "min": "min", "max": "max"},
    {"mean": "avg", "median": "median", "stdev": "std", "min": "min", "max": "max"},
    {"mean": "mean", "median": "med", "stdev": "sd", "min": "lo", "max": "hi"},
    {"mean": "average", "median": "median", "stdev": "std_dev", "min": "minimum", "max": "maximum"},
]
_KEY_STYLES = ["{s}_{stat}", "{stat}_{s}", "{s}.{stat}", "{s}-{stat}"]
_PAIR_STYLES = [
    {"slope": "slope", "intercept": "intercept", "r": "r"},
    {"slope": "fit_slope", "intercept": "fit_intercept", "r": "pearson_r"},
    {"slope": "{y}_vs_{x}_slope", "intercept": "{y}_vs_{x}_intercept", "r": "{y}_vs_{x}_r"},
    {"slope": "b1", "intercept": "b0", "r": "correlation"},
]
_DESCRIBE = phrase_table("stats_summary", "describe")
_OPENERS = phrases("stats_summary", "openers")
_ASKS = phrases("stats_summary", "asks")
_ROUNDING = phrases("stats_summary", "rounding")
_FORMAT = phrase_table("stats_summary", "format")
_COMMENTS = phrases("stats_summary", "comments")
_NA = phrases("stats_summary", "na")
_CONVERT = phrases("stats_summary", "convert")


def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}"


@register
class StatsSummary(Family):
    name = "stats-summary"
    category = "scientific-computing"
    description = "Compute drawn statistics and a least-squares fit of a measurement table."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        domain = rng.choice(sorted(_DOMAINS))
        cols = _DOMAINS[domain]
        n_rows = {"easy": 15, "medium": 40, "hard": 80}[difficulty] + rng.randrange(12)
        fmt = rng.choice(["csv", "ws"])
        hard = difficulty == "hard"
        xcol = cols[0]
        table = _draw_table(rng, cols, n_rows)
        singles, pairs, ycol = _draw_stats(rng, difficulty, cols)

        # Hard: NA cells and one converted column (one the statistics use).
        unit: _Unit | None = None
        if hard:
            used = {c.name for _, c in singles} | ({xcol.name, ycol.name} if pairs else set())
            unit = _draw_na_and_unit(rng, cols, table, used)
        conv = _conversions(cols, unit)

        decimals = rng.choice([2, 3, 4])
        alias = rng.choice(_ALIASES)
        style = rng.choice(_KEY_STYLES)
        pstyle = rng.choice(_PAIR_STYLES)
        expected, spec, lines_desc = _expected_stats(
            rng, (table, conv), singles, (pairs, xcol, ycol), decimals, (alias, style, pstyle)
        )

        src, out = _draw_paths(rng, domain, fmt)
        comments = difficulty != "easy"
        content = _data_text(rng, domain, cols, table, fmt, comments)

        instruction = _instruction(
            rng, (src, domain, fmt, out), comments, decimals, (hard, unit), lines_desc
        )

        params = {
            "domain": domain,
            "format": fmt,
            "rows": n_rows,
            "source": src,
            "output": out,
            "decimals": decimals,
            "stats": [s[0] for s in spec],
            "na": hard,
            "convert": unit.column if unit else None,
            "comments": comments,
        }
        script = _script_body(src, out, spec, conv, decimals, fmt)
        wrong = "data.csv" if src != "data.csv" else "input.csv"
        return TaskDraft(
            instruction=instruction,
            files={f"/app/{src}": content},
            tests=_tests(out, expected, decimals),
            solution="python3 - <<'PY'\n" + script + "PY\n",
            expert=_expert(src, out, spec, conv, decimals),
            params=params,
            mistakes=[
                shell(f"head -n 5 /app/{wrong}", "Let me look at the data file first."),
                shell("python3 -c 'import numpy'", "Check whether numpy is available."),
            ],
            tags=["statistics", "json"],
        )


def _conversions(cols: list[_Col], unit: _Unit | None) -> dict[str, tuple[float, float]]:
    """Column -> (factor, offset) that turns its values into the asked unit."""
    conv = {c.name: (1.0, 0.0) for c in cols}
    if unit is not None:
        conv[unit.column] = (unit.factor, unit.offset)
    return conv


def _draw_paths(rng: random.Random, domain: str, fmt: str) -> tuple[str, str]:
    """The data file's path (under /app) and the output's."""
    stem = rng.choice(["readings", "measurements", "log", "samples", "run", domain])
    ext = rng.choice([".csv", ".txt"] if fmt == "csv" else [".dat", ".txt", ".ssv"])
    sub = rng.choice(["", "", "data/", "raw/"])
    src = f"{sub}{stem}{ext}"
    out = rng.choice(["stats.json", "summary.json", f"{domain}_stats.json", "out/summary.json"])
    return src, out


def _draw_table(rng: random.Random, cols: list[_Col], n_rows: int) -> dict[str, list[str]]:
    """Column -> formatted cells: the first column increases, the others follow it plus noise."""
    xcol = cols[0]
    step = (xcol.hi - xcol.lo) / n_rows
    table: dict[str, list[str]] = {c.name: [] for c in cols}
    slopes = {c.name: rng.uniform(-1, 1) * (c.hi - c.lo) / (xcol.hi - xcol.lo) for c in cols}
    for i in range(n_rows):
        x = xcol.lo + i * step + rng.uniform(0, step * 0.8)
        table[xcol.name].append(_fmt(x, xcol.decimals))
        for c in cols[1:]:
            mid = (c.lo + c.hi) / 2 + slopes[c.name] * (x - (xcol.lo + xcol.hi) / 2) * 0.5
            noise = rng.gauss(0, (c.hi - c.lo) * 0.08)
            table[c.name].append(_fmt(min(c.hi, max(c.lo, mid + noise)), c.decimals))
    return table


def _draw_stats(
    rng: random.Random, difficulty: str, cols: list[_Col]
) -> tuple[list[tuple[str, _Col]], list[str], _Col]:
    """The statistics asked for: (stat, column) singles, pair statistics and the y column."""
    n_single = {"easy": rng.randint(2, 3), "medium": rng.randint(3, 4), "hard": 4}[difficulty]
    stat_cols = rng.sample(cols[1:], k=1 if difficulty == "easy" else 2)
    singles: list[tuple[str, _Col]] = []
    for stat in rng.sample(_SINGLE, k=n_single):
        singles.append((stat, rng.choice(stat_cols)))
    pairs: list[str] = []
    if difficulty != "easy":
        pairs = rng.sample(_PAIR, k=rng.randint(1, 2) if difficulty == "medium" else 3)
    ycol = rng.choice(cols[1:])
    if difficulty == "hard":
        singles.sort(key=lambda item: _SINGLE.index(item[0]))
    return singles, pairs, ycol


def _draw_na_and_unit(
    rng: random.Random, cols: list[_Col], table: dict[str, list[str]], used: set[str]
) -> _Unit | None:
    """A unit conversion of one used column (if any converts); sets NA cells in ``table``."""
    unit: _Unit | None = None
    convertible = [name for name in sorted(used) if name in _UNITS]
    if convertible:
        unit = rng.choice(_UNITS[rng.choice(convertible)])
    for c in cols:
        for i in range(len(table[c.name])):
            if rng.random() < 0.07:
                table[c.name][i] = "NA"
    return unit


def _values(
    table: dict[str, list[str]], conv: dict[str, tuple[float, float]], name: str
) -> list[float | None]:
    """Column ``name`` converted to the asked unit, None for NA cells."""
    fac, off = conv[name]
    return [None if v == "NA" else float(v) * fac + off for v in table[name]]


def _expected_stats(
    rng: random.Random,
    data: tuple[dict[str, list[str]], dict[str, tuple[float, float]]],
    singles: list[tuple[str, _Col]],
    pair_spec: tuple[list[str], _Col, _Col],
    decimals: int,
    styles: tuple[dict[str, str], str, dict[str, str]],
) -> tuple[dict[str, float], list[tuple[str, str, str, str]], list[str]]:
    """Expected values by key, the (key, stat, x, y) spec and each key's description line."""
    table, conv = data
    pairs, xcol, ycol = pair_spec
    alias, style, pstyle = styles
    expected: dict[str, float] = {}
    spec: list[tuple[str, str, str, str]] = []  # key, stat, column(s) x, y
    lines_desc: list[str] = []
    for stat, col in singles:
        key = style.format(s=col.short, stat=alias[stat])
        if key in expected:
            continue
        data_points = [v for v in _values(table, conv, col.name) if v is not None]
        expected[key] = round(_STATS[stat](data_points), decimals)
        spec.append((key, stat, col.name, ""))
        lines_desc.append(f"- `{key}`: " + rng.choice(_DESCRIBE[stat]).format(c=col.name))
    if pairs:
        both = [
            (a, b)
            for a, b in zip(
                _values(table, conv, xcol.name), _values(table, conv, ycol.name), strict=True
            )
            if a is not None and b is not None
        ]
        xs, ys = [a for a, _ in both], [b for _, b in both]
        fit = statistics.linear_regression(xs, ys)
        got = {
            "slope": fit.slope,
            "intercept": fit.intercept,
            "r": statistics.correlation(xs, ys),
        }
        for stat in _PAIR:
            if stat not in pairs:
                continue
            key = pstyle[stat].format(x=xcol.short, y=ycol.short)
            expected[key] = round(got[stat], decimals)
            spec.append((key, stat, xcol.name, ycol.name))
            text = rng.choice(_DESCRIBE[stat]).format(x=xcol.name, y=ycol.name)
            lines_desc.append(f"- `{key}`: {text}")
    return expected, spec, lines_desc


def _data_text(
    rng: random.Random,
    domain: str,
    cols: list[_Col],
    table: dict[str, list[str]],
    fmt: str,
    comments: bool,
) -> str:
    """The data file: header and rows (comma- or space-aligned), comment lines when asked."""
    names = [c.name for c in cols]
    n_rows = len(table[names[0]])
    rows = [[table[n][i] for n in names] for i in range(n_rows)]
    if fmt == "csv":
        body = [",".join(names)] + [",".join(r) for r in rows]
    else:
        width = max(len(v) for r in [names, *rows] for v in r) + 2
        body = ["".join(v.rjust(width) for v in r).rstrip() for r in [names, *rows]]
    if comments:
        body.insert(0, f"# {domain} logger export, {n_rows} rows")
        body.insert(1, f"# station {rng.randint(1, 40)}")
        for _ in range(rng.randint(1, 3)):
            body.insert(rng.randint(3, len(body)), f"# check {rng.randint(100, 999)}")
    return "\n".join(body) + "\n"


def _instruction(
    rng: random.Random,
    where: tuple[str, str, str, str],
    comments: bool,
    decimals: int,
    twists: tuple[bool, _Unit | None],
    lines_desc: list[str],
) -> str:
    """The instruction: the file and the ask, the list of keys, then rounding and notes."""
    src, domain, fmt, out = where
    hard, unit = twists
    parts = [
        rng.choice(_OPENERS).format(src=src, domain=domain),
        rng.choice(_FORMAT[fmt]),
    ]
    if comments:
        parts.append(rng.choice(_COMMENTS))
    parts.append(rng.choice(_ASKS).format(out=out))
    notes = [rng.choice(_ROUNDING).format(d=decimals)]
    if hard:
        notes.append(rng.choice(_NA))
    if unit is not None:
        notes.append(
            rng.choice(_CONVERT).format(c=unit.column, unit=unit.to_unit, formula=unit.formula)
        )
    notes.append(
        rng.choice(
            [
                "Use only the Python standard library (the `statistics` module helps).",
                "No third-party packages are installed; plain Python 3 is available.",
                "Python 3 is available, but numpy is not.",
                "",
            ]
        )
    )
    return (
        " ".join(parts) + "\n\n" + "\n".join(lines_desc) + "\n\n" + " ".join(n for n in notes if n)
    )


def _expert(
    src: str,
    out: str,
    spec: list[tuple[str, str, str, str]],
    conv: dict[str, tuple[float, float]],
    decimals: int,
) -> Callable[[], ExpertProgram]:
    """The expert: look at the file's separator, write a stdlib script for it, run it."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"head -n 6 {src}; wc -l {src}", "Let me look at the data file first."
        )
        lines = [ln for ln in seen.output.splitlines() if ln.strip() and ln[0] != "#"]
        header = lines[0] if lines else ""
        found = "csv" if "," in header else "ws"
        note = (
            "It is comma-separated" if found == "csv" else "The columns are separated by whitespace"
        ) + "; I will write a small stdlib script that skips comments and NA cells."
        yield write("/app/summarise.py", _script_body(src, out, spec, conv, decimals, found), note)
        ran = yield shell(f"python3 summarise.py && cat {out}", "Run it and show the result.")
        if not ran.ok:
            return "The script failed; see the error above."
        return f"Wrote the {len(spec)} requested statistics to {out}."

    return expert


def _script_body(
    src: str,
    out: str,
    spec: list[tuple[str, str, str, str]],
    conv: dict[str, tuple[float, float]],
    decimals: int,
    fmt: str,
) -> str:
    """A stdlib script computing ``spec`` from ``src`` (comments and NA skipped)."""
    split = "line.split(',')" if fmt == "csv" else "line.split()"
    return fill(
        "stats_summary",
        "compute",
        conv=conv,
        spec=spec,
        src=src,
        split=Code(split),
        out=out,
        decimals=Code(decimals),
    )


def _tests(out: str, expected: dict[str, float], decimals: int) -> str:
    path = "/app/" + out
    return fill(
        "stats_summary",
        "test_outputs",
        expected=json.dumps(expected),
        tol=10.0 ** (-decimals) * 1.01,
        path=path,
    )
