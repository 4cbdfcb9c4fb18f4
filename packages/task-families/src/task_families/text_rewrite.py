"""text-rewrite: apply a list of stated edit rules to a Markdown document.

The document (a runbook, design note or release note with headings, paragraphs, lists,
fenced code blocks and a table) comes with rules drawn per task: rename a product name
(whole word, exact case), rewrite dates from one format to another, renumber the section
headings, turn the table into CSV lines, re-wrap paragraphs at a width. Code blocks are
never edited. The result goes to a new file or replaces the document, as stated. Harder
drafts have more rules and traps: the name inside longer words or code, dates and
heading-like comments in code blocks, numbered subsections.
"""

from __future__ import annotations

import hashlib
import inspect
import random
import textwrap
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrases

_MONTHS = phrases("text_rewrite", "months")
_FORMATS = {
    "iso": "`YYYY-MM-DD` (like `{iso}`)",
    "us": "`MM/DD/YYYY` (like `{us}`)",
    "eu": "`DD.MM.YYYY` (like `{eu}`)",
    "long": "`Month D, YYYY` with the full month name and no leading zero (like `{long}`)",
    "dmy": "`D Month YYYY` with the full month name and no leading zero (like `{dmy}`)",
}
_NAMES = ["Nimbus", "Atlas", "Orion", "Beacon", "Quartz", "Falcon", "Juniper", "Harbor"]
_NEW_NAMES = ["Stratus", "Zenith", "Meridian", "Polaris", "Cobalt", "Kestrel", "Sequoia"]
_TOPICS = ["runbook", "design note", "operations guide", "service handbook", "release notes"]
_SENTENCES = phrases("text_rewrite", "sentences")
_DECOYS = phrases("text_rewrite", "decoys")
_ITEMS = phrases("text_rewrite", "items")
_TITLES = phrases("text_rewrite", "titles")
_SUBTITLES = ["Prerequisites", "Steps", "Rollback", "Verification", "Notes"]

_OPENERS = phrases("text_rewrite", "openers")
_RULES_INTRO = phrases("text_rewrite", "rules_intro")
_RENAME = phrases("text_rewrite", "rename")
_DATES = phrases("text_rewrite", "dates")
_RENUMBER = phrases("text_rewrite", "renumber")
_SUBSECTIONS = phrases("text_rewrite", "subsections")
_TABLE = phrases("text_rewrite", "table")
_WRAP = phrases("text_rewrite", "wrap")
_CODE = phrases("text_rewrite", "code")
_OUT_NEW = phrases("text_rewrite", "out_new")
_OUT_INPLACE = phrases("text_rewrite", "out_inplace")


# The tasks' oracle (and the expert's script) embed this function's source, so it stays
# as written: splitting it would change every generated text-rewrite task. _script strips
# the noqa marker below from the embedded copy, so the generated files stay the same.
def _rewrite(text: str, cfg: dict) -> str:  # noqa: C901
    """Apply the rules in ``cfg`` to ``text`` (outside fenced code blocks)."""
    import re

    months = "January February March April May June July August September October November December"
    months = months.split()
    month_re = "|".join(months)
    patterns = {
        "iso": r"\b(\d{4})-(\d{2})-(\d{2})\b",
        "us": r"\b(\d{2})/(\d{2})/(\d{4})\b",
        "eu": r"\b(\d{2})\.(\d{2})\.(\d{4})\b",
        "long": r"\b(" + month_re + r") (\d{1,2}), (\d{4})\b",
        "dmy": r"\b(\d{1,2}) (" + month_re + r") (\d{4})\b",
    }

    def ymd(fmt, m):
        g = m.groups()
        if fmt == "iso":
            return int(g[0]), int(g[1]), int(g[2])
        if fmt == "us":
            return int(g[2]), int(g[0]), int(g[1])
        if fmt == "eu":
            return int(g[2]), int(g[1]), int(g[0])
        if fmt == "long":
            return int(g[2]), months.index(g[0]) + 1, int(g[1])
        return int(g[2]), months.index(g[1]) + 1, int(g[0])

    def show(fmt, y, mo, d):
        return {
            "iso": f"{y:04d}-{mo:02d}-{d:02d}",
            "us": f"{mo:02d}/{d:02d}/{y:04d}",
            "eu": f"{d:02d}.{mo:02d}.{y:04d}",
            "long": f"{months[mo - 1]} {d}, {y}",
            "dmy": f"{d} {months[mo - 1]} {y}",
        }[fmt]

    lines, code, fenced = [], [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            lines.append(line)
            code.append(True)
            continue
        if not fenced:
            if cfg.get("rename"):
                old, new = cfg["rename"]
                line = re.sub(r"\b" + re.escape(old) + r"\b", new, line)
            if cfg.get("dates"):
                src, dst = cfg["dates"]
                line = re.sub(patterns[src], lambda m, s=src, d=dst: show(d, *ymd(s, m)), line)
        lines.append(line)
        code.append(fenced)

    if cfg.get("renumber"):
        section = sub = 0
        for i, line in enumerate(lines):
            if code[i]:
                continue
            m = re.match(r"## \d+\. (.*)$", line)
            if m:
                section, sub = section + 1, 0
                lines[i] = f"## {section}. {m.group(1)}"
            m = re.match(r"### \d+\.\d+ (.*)$", line)
            if m and cfg.get("subsections"):
                sub += 1
                lines[i] = f"### {section}.{sub} {m.group(1)}"

    if cfg.get("table"):
        kept = []
        for line, is_code in zip(lines, code, strict=True):
            if not is_code and line.startswith("|"):
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if all(re.fullmatch(r":?-+:?", c) for c in cells):
                    continue
                line = ",".join(cells)
            kept.append((line, is_code))
        lines, code = [x[0] for x in kept], [x[1] for x in kept]

    if cfg.get("wrap"):
        width = cfg["wrap"]
        result, para = [], []

        def flush():
            current = ""
            for word in " ".join(para).split():
                if current and len(current) + 1 + len(word) > width:
                    result.append(current)
                    current = word
                else:
                    current = f"{current} {word}" if current else word
            if current:
                result.append(current)
            para.clear()

        for line, is_code in zip(lines, code, strict=True):
            plain = line.strip() and not line.startswith(("#", "- ", "|"))
            if not is_code and plain:
                para.append(line)
                continue
            flush()
            result.append(line)
        flush()
        lines = result
    return "\n".join(lines)


def _date(rng: random.Random) -> tuple[int, int, int]:
    return rng.randint(2021, 2026), rng.randint(1, 12), rng.randint(1, 28)


def _show(fmt: str, y: int, mo: int, d: int) -> str:
    return {
        "iso": f"{y:04d}-{mo:02d}-{d:02d}",
        "us": f"{mo:02d}/{d:02d}/{y:04d}",
        "eu": f"{d:02d}.{mo:02d}.{y:04d}",
        "long": f"{_MONTHS[mo - 1]} {d}, {y}",
        "dmy": f"{d} {_MONTHS[mo - 1]} {y}",
    }[fmt]


def _document(
    rng: random.Random, difficulty: str, term: str, date_fmt: str, scramble: bool, table: bool
) -> str:
    """A Markdown document: title, numbered sections, paragraphs, lists, code, a table."""
    hard = difficulty == "hard"

    def fill(template: str) -> str:
        return template.format(
            T=term,
            L=term.lower(),
            D=_show(date_fmt, *_date(rng)).replace(" ", "\x00"),
            N=rng.randint(2, 90),
        )

    def paragraph(k: int, first: str | None = None) -> list[str]:
        chosen = rng.sample(_SENTENCES, k=k)
        if first:
            chosen[0] = first
        if hard and rng.random() < 0.5:
            chosen.insert(rng.randint(0, len(chosen)), rng.choice(_DECOYS))
        words = " ".join(fill(s) for s in chosen).split(" ")
        lines, current, limit = [], "", rng.randint(45, 95)
        for word in words:
            if current and len(current) + len(word) > limit:
                lines.append(current)
                current, limit = word, rng.randint(45, 95)
            else:
                current = f"{current} {word}" if current else word
        lines.append(current)
        return [ln.replace("\x00", " ") for ln in lines]

    n_sec = {"easy": 3, "medium": 4, "hard": 5}[difficulty] + rng.randrange(2)
    numbers = list(range(1, n_sec + 1))
    if scramble:
        while numbers == list(range(1, n_sec + 1)):
            numbers = [rng.randint(1, n_sec + 2) for _ in range(n_sec)]
    titles = rng.sample(_TITLES, k=n_sec)
    code_at = rng.sample(range(n_sec), k=1 if difficulty == "easy" else 2)
    table_at = rng.randrange(n_sec) if table else -1
    sub_at = rng.sample(range(n_sec), k=2) if hard else []
    out = [f"# {term} {rng.choice(_TOPICS).title()}", ""]
    out += [*paragraph(2, "{T} was last reviewed on {D}."), ""]
    for i in range(n_sec):
        num = numbers[i]
        out += [f"## {num}. {titles[i].format(T=term)}", ""]
        out += [*paragraph(rng.randint(2, 4)), ""]
        if rng.random() < 0.5:
            out += [f"- {fill(s)}".replace("\x00", " ") for s in rng.sample(_ITEMS, k=3)] + [""]
        if i in code_at:
            out += [*_code_block(rng, term, date_fmt, hard), ""]
        if i == table_at:
            out += [*_table(rng, term), ""]
        if i in sub_at:
            subs = rng.sample(_SUBTITLES, k=rng.randint(2, 3))
            for j, title in enumerate(subs):
                m = j + 1 if not scramble else rng.randint(1, 5)
                out += [f"### {num}.{m} {title}", "", *paragraph(2), ""]
    return "\n".join(out)


def _code_block(rng: random.Random, term: str, date_fmt: str, hard: bool) -> list[str]:
    low = term.lower()
    day = _show(date_fmt, *_date(rng))
    if rng.random() < 0.5:
        body = [
            "```bash",
            f"# restart {term} after a config change",
            f"sudo systemctl restart {low}",
            f"{low}ctl status --since '{day}'",
        ]
        if hard:
            body.insert(2, f"## {rng.randint(2, 9)}. drain the node first")
    else:
        body = [
            "```yaml",
            f"service: {term}",
            f"released: '{day}'",
            f"replicas: {rng.randint(2, 9)}",
        ]
        if hard:
            body.append(f"# {term} owners: platform team")
    return [*body, "```"]


def _table(rng: random.Random, term: str) -> list[str]:
    rows = [["Component", "Owner", "Replicas", "Status"]]
    parts = [f"{term} API", "Scheduler", f"{term} worker", "Gateway", "Cache", "Indexer"]
    for name in rng.sample(parts, k=rng.randint(3, 5)):
        rows.append(
            [
                name,
                rng.choice(["platform", "data", "infra", "billing"]),
                str(rng.randint(1, 12)),
                rng.choice(["stable", "beta", "deprecated"]),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return [line(rows[0]), sep, *[line(r) for r in rows[1:]]]


@register
class TextRewrite(Family):
    name = "text-rewrite"
    category = "text-processing"
    description = "Apply stated edit rules (rename, dates, numbering, table, wrap) to a document."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        term = rng.choice(_NAMES)
        new = rng.choice(_NEW_NAMES)
        src_fmt, dst_fmt = rng.sample(sorted(_FORMATS), k=2)
        chosen = _draw_rules(rng, difficulty)
        width = rng.choice([50, 60, 66, 72, 80])
        table = "table" in chosen or rng.random() < 0.5
        doc = _document(rng, difficulty, term, src_fmt, "renumber" in chosen, table)
        cfg = {
            "rename": [term, new] if "rename" in chosen else None,
            "dates": [src_fmt, dst_fmt] if "dates" in chosen else None,
            "renumber": "renumber" in chosen,
            "subsections": "renumber" in chosen and difficulty == "hard",
            "table": "table" in chosen,
            "wrap": width if "wrap" in chosen else None,
        }
        expected = _rewrite(doc, cfg)
        assert expected.rstrip("\n") != doc.rstrip("\n")
        src, out, in_place = _draw_paths(rng)
        rules = _rule_texts(rng, chosen, cfg)
        topic = rng.choice(_TOPICS)
        ask = rng.choice(_OUT_INPLACE if in_place else _OUT_NEW).format(src=src, out=out)
        instruction = (
            rng.choice(_OPENERS).format(src=src, topic=topic)
            + " "
            + rng.choice(_RULES_INTRO)
            + "\n\n"
            + "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1))
            + "\n\n"
            + rng.choice(_CODE)
            + " "
            + ask
        )
        original_sha = hashlib.sha256(doc.encode()).hexdigest()
        script = _script(src, out, cfg)
        wrong = "README.md" if src != "README.md" else "readme.txt"
        return TaskDraft(
            instruction=instruction,
            files={f"/app/{src}": doc},
            tests=_tests(src, out, in_place, expected, original_sha),
            solution="python3 - <<'PY'\n" + script + "PY\n",
            expert=_expert(src, out, script, len(rules)),
            params={
                "rules": chosen,
                "source": src,
                "output": out,
                "in_place": in_place,
                "dates": [src_fmt, dst_fmt] if cfg["dates"] else None,
                "wrap": cfg["wrap"],
                "term": [term, new] if cfg["rename"] else None,
            },
            mistakes=[
                shell(f"cat /app/{wrong}", "Read the document first."),
                shell("python3 apply_rules.py", "Apply the rules."),
            ],
            tags=["markdown", "text-editing"],
        )


def _draw_rules(rng: random.Random, difficulty: str) -> list[str]:
    """The rules to apply, in their fixed order (hard drafts get all four)."""
    last = rng.choice(["table", "wrap"])
    pool = ["rename", "dates", "renumber", last]
    count = {"easy": 2, "medium": 3, "hard": 4}[difficulty]
    if difficulty == "hard":
        return pool
    picked = rng.sample(pool, k=count)
    return [r for r in pool if r in picked]


def _draw_paths(rng: random.Random) -> tuple[str, str, bool]:
    """The document's path, the output's path and whether that is the document itself."""
    stem = rng.choice(["README.md", "RUNBOOK.md", "notes.md", "guide.md", "handbook.md"])
    src = rng.choice(["", "docs/", "doc/"]) + stem
    in_place = rng.random() < 0.4
    out = src if in_place else rng.choice(["edited.md", "out.md", "result.md", "docs/new.md"])
    if out == src:
        in_place = True
    return src, out, in_place


def _rule_texts(rng: random.Random, chosen: list[str], cfg: dict) -> list[str]:
    """How the instruction states each chosen rule (dates shown on one example date)."""
    example = _date(rng)
    shown = {k: v.format(**{k: _show(k, *example)}) for k, v in _FORMATS.items()}
    rules: list[str] = []
    for rule in chosen:
        if rule == "rename":
            old, new = cfg["rename"]
            rules.append(rng.choice(_RENAME).format(old=old, new=new))
        elif rule == "dates":
            src_fmt, dst_fmt = cfg["dates"]
            rules.append(rng.choice(_DATES).format(src=shown[src_fmt], dst=shown[dst_fmt]))
        elif rule == "renumber":
            text = rng.choice(_RENUMBER)
            if cfg["subsections"]:
                text += " " + rng.choice(_SUBSECTIONS)
            rules.append(text)
        elif rule == "table":
            rules.append(rng.choice(_TABLE))
        else:
            rules.append(rng.choice(_WRAP).format(n=cfg["wrap"]))
    return rules


def _expert(src: str, out: str, script: str, n_rules: int) -> Callable[[], ExpertProgram]:
    """Read the document, keep a copy, write and run the script, look at the diff."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(f"cat {src}", "Read the document first.")
        fences = sum(1 for ln in seen.output.splitlines() if ln.startswith("```"))
        note = (
            f"I see {fences // 2} code block(s) to protect; I write a script "
            "that applies the rules line by line outside the fences."
        )
        backup = "/tmp/original.md"
        yield shell(f"cp {src} {backup}", "Keep a copy of the original to compare against.")
        yield write("/app/rewrite.py", script, note)
        ran = yield shell(
            f"python3 rewrite.py && (diff {backup} {out} | head -n 40)",
            "Apply it and look at the changes.",
        )
        if not ran.ok:
            return "The rewrite failed; see the error above."
        return f"Applied {n_rules} rule(s); the result is in {out}."

    return expert


def _script(src: str, out: str, cfg: dict) -> str:
    # the lint marker on the def line is not part of the oracle the tasks ship
    body = inspect.getsource(_rewrite).replace("  # noqa: C901", "", 1)
    return (
        "import os\n\n\n"
        + body
        + textwrap.dedent(
            f"""\


            text = open({src!r}).read()
            os.makedirs(os.path.dirname({out!r}) or ".", exist_ok=True)
            with open({out!r}, "w") as fh:
                fh.write(_rewrite(text, {cfg!r}))
            """
        )
    )


def _tests(src: str, out: str, in_place: bool, expected: str, sha: str) -> str:
    checks = fill("text_rewrite", "test_outputs", expected=expected, path="/app/" + out)
    if not in_place:
        checks += textwrap.dedent(
            f"""\


            def test_original_untouched():
                data = Path({"/app/" + src!r}).read_bytes()
                assert hashlib.sha256(data).hexdigest() == {sha!r}
            """
        )
    return checks
