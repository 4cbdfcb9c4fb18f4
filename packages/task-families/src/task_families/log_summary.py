"""log-summary: count log entries per level or per component and write a report.

The log's line format is drawn per task (a bracketed level, logfmt ``key=value`` pairs,
JSON lines, syslog-style lines, an ISO-stamped variant) and so are the key names the
structured formats use. The instruction names the log and the report format but not the
line format, so the task needs interaction: the expert heads the log first and writes its
parser for the format (and the keys) it saw. Medium drafts mix the case of levels and add
blank lines; hard drafts add lines that are not entries (stack traces, rotation markers,
truncated records) and a filter on the other field.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_LEVELS = ["debug", "info", "warn", "error", "fatal"]
_WEIGHTS = {"debug": 3, "info": 8, "warn": 4, "error": 3, "fatal": 1}
_COMPONENTS = ["auth", "db", "api", "cache", "scheduler", "billing", "mailer", "search"]
_MESSAGES = phrases("log_summary", "messages")
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_FORMATS = ("bracket", "logfmt", "json", "syslog", "iso")
_LEVEL_KEYS = ("level", "lvl", "severity")
_COMPONENT_KEYS = ("component", "service", "module")
_NOISE = phrases("log_summary", "noise")

_PATTERNS = {
    "bracket": r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \[(?P<level>\w+)\] (?P<component>[\w-]+): ",
    "iso": r"^\[\d{4}-\d\d-\d\dT[\d:]+Z\] (?P<level>\w+) \((?P<component>[\w-]+)\) ",
    "syslog": r"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ (?P<component>[\w-]+)\[\d+\]: (?P<level>\w+) ",
}

_OPENERS = phrases("log_summary", "openers")
_WHY = phrases("log_summary", "why")
_ASKS = phrase_table("log_summary", "asks")
_FORMATS_OUT = phrase_table("log_summary", "formats_out")
_ORDERS = phrase_table("log_summary", "orders")
_CASE_NOTES = phrase_table("log_summary", "case_notes")
_NOISE_NOTES = phrases("log_summary", "noise_notes")


def _render(
    fmt: str,
    keys: dict[str, str],
    order: list[str],
    when: tuple[int, int],
    level: str,
    comp: str,
    msg: str,
    host: str,
) -> str:
    """One entry in format ``fmt``; ``when`` is (month, seconds since the 1st)."""
    month, seconds = when
    day, rest = divmod(seconds, 86400)
    day, hh, mm, ss = day + 1, rest // 3600, rest // 60 % 60, rest % 60
    if fmt == "bracket":
        return f"2026-{month:02d}-{day:02d} {hh:02d}:{mm:02d}:{ss:02d} [{level}] {comp}: {msg}"
    if fmt == "iso":
        return f"[2026-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z] {level} ({comp}) {msg}"
    if fmt == "syslog":
        pid = 100 + 37 * (_COMPONENTS.index(comp) + 1)
        return f"{_MONTHS[month - 1]} {day:2d} {hh:02d}:{mm:02d}:{ss:02d} {host} {comp}[{pid}]: {level} {msg}"
    values = {
        "time": f"2026-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z",
        "level": level,
        "component": comp,
        "msg": msg,
    }
    if fmt == "json":
        return json.dumps({keys[k]: values[k] for k in order})
    return " ".join(
        f'{keys[k]}="{values[k]}"' if " " in values[k] else f"{keys[k]}={values[k]}" for k in order
    )


def _parse_code(fmt: str, level_key: str, comp_key: str) -> str:
    """Python source of ``entry(line) -> (level, component) | None`` for one format."""
    if fmt == "json":
        return textwrap.dedent(
            f"""\
            def entry(line):
                try:
                    record = json.loads(line)
                except ValueError:
                    return None
                if not isinstance(record, dict) or {level_key!r} not in record or {comp_key!r} not in record:
                    return None
                return str(record[{level_key!r}]), str(record[{comp_key!r}])
            """
        )
    if fmt == "logfmt":
        return textwrap.dedent(
            f"""\
            PAIR = re.compile(r'(\\w+)=("(?:[^"\\\\]|\\\\.)*"|\\S+)')


            def entry(line):
                if line[:1].isspace():
                    return None
                fields = {{k: v.strip('"') for k, v in PAIR.findall(line)}}
                if {level_key!r} not in fields or {comp_key!r} not in fields:
                    return None
                return fields[{level_key!r}], fields[{comp_key!r}]
            """
        )
    return textwrap.dedent(
        f"""\
        LINE = re.compile({_PATTERNS[fmt]!r})


        def entry(line):
            match = LINE.match(line)
            return (match.group("level"), match.group("component")) if match else None
        """
    )


def _script(
    log: str,
    out: str,
    parse: str,
    key: str,
    case: str,
    style: str,
    order: str,
    filt: tuple[str, str | list[str]] | None,
) -> str:
    """The whole counting program, given the parser for the format."""
    keep = "True"
    if filt is not None:
        field, values = filt
        keep = f"level.lower() in {values!r}" if field == "level" else f"component == {values!r}"
    name = "level" if key == "level" else "component"
    norm = f"level = level.{case}()"
    if order == "count":
        sort = "rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))"
    else:
        sort = "rows = sorted(counts.items())"
    if style == "json":
        emit = "fh.write(json.dumps(dict(rows), indent=2) + '\\n')"
    elif style == "lines":
        emit = "fh.writelines(f'{n} {c}\\n' for n, c in rows)"
    elif style == "uniq":
        emit = "fh.writelines(f'{c} {n}\\n' for n, c in rows)"
    else:
        emit = f"fh.write('{key},count\\n')\n{' ' * 12}fh.writelines(f'{{n}},{{c}}\\n' for n, c in rows)"
    body = textwrap.dedent(
        f"""\
        counts = {{}}
        with open({log!r}) as fh:
            for line in fh:
                found = entry(line.rstrip("\\n"))
                if found is None:
                    continue
                level, component = found
                if not ({keep}):
                    continue
                {norm}
                counts[{name}] = counts.get({name}, 0) + 1
        {sort}
        os.makedirs(os.path.dirname({out!r}), exist_ok=True)
        with open({out!r}, "w") as fh:
            {emit}
        """
    )
    return "import json\nimport os\nimport re\n\n" + parse + "\n\n" + body


def _detect(text: str) -> tuple[str, str, str] | None:
    """(format, level key, component key) of the first line of ``text`` that is an entry."""
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            lk = next((k for k in _LEVEL_KEYS if k in record), None)
            ck = next((k for k in _COMPONENT_KEYS if k in record), None)
            if lk and ck:
                return "json", lk, ck
        for fmt, pattern in _PATTERNS.items():
            if re.match(pattern, line):
                return fmt, "", ""
        pairs = dict(re.findall(r"(\w+)=(\S+)", line))
        lk = next((k for k in _LEVEL_KEYS if k in pairs), None)
        ck = next((k for k in _COMPONENT_KEYS if k in pairs), None)
        if lk and ck:
            return "logfmt", lk, ck
    return None


_DESCRIBE = {
    "bracket": "timestamp, `[LEVEL]`, then `component:` and the message",
    "iso": "an ISO timestamp in brackets, the level, the component in parentheses",
    "syslog": "syslog style: the component is the program name before `[pid]`, then the level",
    "json": "JSON lines",
    "logfmt": "logfmt key=value pairs",
}


@register
class LogSummary(Family):
    name = "log-summary"
    category = "text-processing"
    description = (
        "Count log entries per level or component in a log whose format must be inspected."
    )
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        fmt, key, keys, order_keys, upper_in_log = _draw_layout(rng)
        levels = sorted(rng.sample(_LEVELS, rng.randint(3, 5)), key=_LEVELS.index)
        comps = sorted(rng.sample(_COMPONENTS, rng.randint(3, 6)))
        n = {"easy": 25, "medium": 90, "hard": 200}[difficulty] + rng.randrange(15)
        case = rng.choice(["lower", "upper"])
        mixed = difficulty != "easy"
        noisy = difficulty == "hard"

        entries, lines = _draw_log(
            rng, n, (fmt, keys, order_keys), levels, comps, (upper_in_log, mixed, noisy)
        )

        filt: tuple[str, str | list[str]] | None = None
        counted = entries
        filter_text = ""
        if noisy:
            filt, counted, filter_text = _draw_filter(rng, key, case, entries)
        app, log, style, order, out = _draw_paths(rng, key)
        label = "level" if key == "level" else "component"
        instruction = _instruction(
            rng, (key, case, style, order), (log, app, out, label), noisy, filter_text
        )
        level_key, comp_key = keys["level"], keys["component"]
        script = _script(
            log, out, _parse_code(fmt, level_key, comp_key), key, case, style, order, filt
        )
        expected = sorted(
            _count(counted, key, case).items(),
            key=(lambda kv: (-kv[1], kv[0])) if order == "count" else None,
        )
        return TaskDraft(
            instruction=instruction,
            files={log: "\n".join(lines) + "\n"},
            tests=_tests(out, style, key, expected),
            solution=f"python3 - <<'PY'\n{script}PY\n",
            expert=_expert(log, out, (key, case, style, order), filt),
            params={
                "format": fmt,
                "key": key,
                "level_key": level_key if fmt in ("json", "logfmt") else None,
                "component_key": comp_key if fmt in ("json", "logfmt") else None,
                "lines": len(lines),
                "entries": n,
                "report": style,
                "order": order,
                "case": case,
                "filter": list(filt) if filt else None,
                "log": log,
                "output": out,
            },
            mistakes=[
                shell("head -n 8 /app/app.log", "First I look at the log."),
                shell("jq . " + log + " | head", "Let me pretty-print the log."),
            ],
            tags=["logs", "text"],
        )


def _draw_layout(rng: random.Random) -> tuple[str, str, dict[str, str], list[str], bool]:
    """The log's format, what is counted (level or component), the field names, the order
    of the fields and whether levels are upper case in the log."""
    fmt = rng.choice(_FORMATS)
    key = rng.choice(["level", "component"])
    level_key = rng.choice(_LEVEL_KEYS)
    comp_key = rng.choice(_COMPONENT_KEYS)
    keys = {
        "time": rng.choice(["ts", "time", "timestamp"]),
        "level": level_key,
        "component": comp_key,
        "msg": rng.choice(["msg", "message"]),
    }
    order_keys = ["time", "level", "component", "msg"]
    if rng.random() < 0.5:
        rng.shuffle(order_keys)
    upper_in_log = fmt in ("bracket", "iso", "syslog") or (fmt == "json" and rng.random() < 0.5)
    return fmt, key, keys, order_keys, upper_in_log


def _count(counted: list[tuple[str, str]], key: str, case: str) -> dict[str, int]:
    """Entries per level (in the asked case) or per component."""
    counts: dict[str, int] = {}
    for level, comp in counted:
        name = (level.upper() if case == "upper" else level) if key == "level" else comp
        counts[name] = counts.get(name, 0) + 1
    return counts


def _draw_paths(rng: random.Random, key: str) -> tuple[str, str, str, str, str]:
    """The application's name, the log's path, the report's style and order and its path."""
    app = rng.choice(
        ["orders", "gateway", "ledger", "notifier", "catalog", "billing-api", "auth-proxy"]
    )
    log = rng.choice(
        [
            f"/app/logs/{app}.log",
            f"/var/log/{app}/{app}.log",
            "/app/service.log",
            f"/app/data/{app}-2026-03.log",
            f"/srv/{app}/logs/current.log",
            f"/app/{app}.log",
            f"/var/log/{app}.log",
        ]
    )
    style = rng.choice(sorted(_FORMATS_OUT))
    order = rng.choice(["count", "name"])
    ext = {"json": "json", "lines": "txt", "uniq": "txt", "csv": "csv"}[style]
    out = rng.choice(
        [
            f"/app/{key}_counts.{ext}",
            f"/app/report.{ext}",
            f"/app/out/summary.{ext}",
            f"/app/reports/{app}_{key}s.{ext}",
        ]
    )
    return app, log, style, order, out


def _draw_log(
    rng: random.Random,
    n: int,
    layout: tuple[str, dict[str, str], list[str]],
    levels: list[str],
    comps: list[str],
    flags: tuple[bool, bool, bool],
) -> tuple[list[tuple[str, str]], list[str]]:
    """``n`` (level, component) entries and the log lines showing them, noise included."""
    fmt, keys, order_keys = layout
    upper_in_log, mixed, noisy = flags
    entries: list[tuple[str, str]] = []
    lines: list[str] = []
    t = rng.randrange(0, 20000)
    month = rng.randint(1, 12)
    weights = [_WEIGHTS[lv] for lv in levels]
    for _ in range(n):
        t += rng.randint(1, 400)
        level = rng.choices(levels, weights)[0]
        comp = rng.choice(comps)
        shown = level.upper() if upper_in_log else level
        if mixed and rng.random() < 0.25:
            shown = rng.choice([level.upper(), level.capitalize(), level])
        entries.append((level, comp))
        host = f"web-{rng.randint(1, 4)}"
        msg = rng.choice(_MESSAGES)
        lines.append(_render(fmt, keys, order_keys, (month, t), shown, comp, msg, host))
        if mixed and rng.random() < 0.04:
            lines.append("")
        if noisy and level in ("error", "fatal") and rng.random() < 0.5:
            if fmt == "json":
                cut = _render(fmt, keys, order_keys, (month, t), shown, comp, msg, host)
                lines.append(cut[: rng.randint(10, len(cut) // 2)])
            else:
                lines.extend(_NOISE[: rng.randint(2, 4)])
        if noisy and rng.random() < 0.01:
            lines.append("--- log rotated ---")
    return entries, lines


def _draw_filter(
    rng: random.Random, key: str, case: str, entries: list[tuple[str, str]]
) -> tuple[tuple[str, str | list[str]], list[tuple[str, str]], str]:
    """A hard draft's filter (on the other key), the entries it keeps and its sentence."""
    if key == "component":
        occurring = sorted({lv for lv, _ in entries}, key=_LEVELS.index)
        present = [lv for lv in occurring if lv in ("warn", "error", "fatal")] or occurring
        chosen = sorted(rng.sample(present, rng.randint(1, len(present))), key=_LEVELS.index)
        names = " or ".join(f"`{c.upper() if case == 'upper' else c}`" for c in chosen)
        filter_text = rng.choice(
            [
                f"Only count entries whose level is {names} (in any case).",
                f"Leave out everything except entries at level {names}, whatever the case.",
            ]
        )
        return ("level", chosen), [e for e in entries if e[0] in chosen], filter_text
    comp = rng.choice(sorted({c for _, c in entries}))
    filter_text = rng.choice(
        [
            f"Only count the entries of the `{comp}` component.",
            f"Restrict the count to entries logged by `{comp}`.",
        ]
    )
    return ("component", comp), [e for e in entries if e[1] == comp], filter_text


def _instruction(
    rng: random.Random,
    report: tuple[str, str, str, str],
    where: tuple[str, str, str, str],
    noisy: bool,
    filter_text: str,
) -> str:
    """The instruction: opener and ask, then the notes in a drawn order."""
    key, case, style, order = report
    log, app, out, label = where
    ask = (
        rng.choice(_ASKS[key])
        + " "
        + rng.choice(_FORMATS_OUT[style]).format(
            out=out, key=label, order=rng.choice(_ORDERS[order])
        )
    )
    ask = ask.replace(" ;", ";")
    parts = [rng.choice(_OPENERS).format(log=log, app=app), ask]
    extra = []
    if key == "level":
        extra.append(rng.choice(_CASE_NOTES[case]))
    if noisy:
        extra += [rng.choice(_NOISE_NOTES), filter_text]
    extra.append(
        rng.choice(
            [
                f"Only include {label}s that actually occur.",
                f"Leave out any {label} with no entries.",
                "Do not list names with a count of zero.",
                "Names that never occur must not be listed.",
                f"Every {label} that appears at least once must be in the report.",
            ]
        )
    )
    extra.append(rng.choice(_WHY).format(key=label))
    rng.shuffle(extra)
    return " ".join(p for p in parts + extra if p)


def _expert(
    log: str,
    out: str,
    report: tuple[str, str, str, str],
    filt: tuple[str, str | list[str]] | None,
) -> Callable[[], ExpertProgram]:
    """The expert: look at the log's format, write a counting script for it, run it."""
    key, case, style, order = report
    label = "level" if key == "level" else "component"

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"head -n 8 {log}; echo; wc -l {log}",
            "First I look at how the log lines are written.",
        )
        found = _detect(seen.output)
        if found is None:
            return "I could not recognise the line format of the log."
        got_fmt, lk, ck = found
        if got_fmt in ("json", "logfmt"):
            note = f"The log is {_DESCRIBE[got_fmt]}; the level is under `{lk}` and the component under `{ck}`."
        else:
            note = f"Each line is {_DESCRIBE[got_fmt]}, so a regular expression will do."
        program = _script(log, out, _parse_code(got_fmt, lk, ck), key, case, style, order, filt)
        yield write("/app/count_log.py", program, note + " I write a small script for it.")
        ran = yield shell(
            f"python3 /app/count_log.py && cat {out}", "Now I run it and check the report."
        )
        if not ran.ok:
            return "The script failed; see the output above."
        return f"Wrote the per-{label} counts of {log} to {out}."

    return expert


def _tests(out: str, style: str, key: str, expected: list[tuple[str, int]]) -> str:
    return fill(
        "log_summary", "test_outputs", out=out, style=style, key=key, expected=json.dumps(expected)
    )
