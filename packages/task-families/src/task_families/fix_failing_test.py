"""fix-failing-test: a small Python module has an injected bug and its checker fails.

/app holds one module drawn from a menu (statistics, strings, dates, inventory, matrices,
parsers) with one bug (two on hard) drawn per seed: an off-by-one, a wrong operator or
comparison, swapped arguments, a wrong default. A checker script prints which cases fail.
The task needs interaction: which function is broken is only known by running the checker,
and the broken line only by reading that function (and, when the fault sits in a helper it
calls, the helper too). The tests run the module on hidden cases and check that the checker
file is unchanged.
"""

from __future__ import annotations

import builtins
import hashlib
import random
import re
import textwrap
from collections.abc import Callable
from typing import Any

from ale.synth.expert import Observation, shell
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._buggy_modules import _MODULES, Args, _Bug, _Module
from task_families._sources import phrase_table, phrases

_CHECKER = '''\
"""Checks for {mod}.py: run `python3 {checker}`; it prints each case and exits 1 on a failure."""

import sys

import {mod}

CASES = [
{cases}]


def same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and abs(got - want) < 1e-9
    return type(got) is type(want) and got == want


def main():
    failed = 0
    for name, args, want in CASES:
        call = name + "(" + ", ".join(repr(a) for a in args) + ")"
        try:
            got = getattr({mod}, name)(*args)
        except Exception as exc:
            got = "<" + type(exc).__name__ + ": " + str(exc) + ">"
        if same(got, want):
            print("ok   " + call)
        else:
            failed += 1
            print("FAIL " + call + ": expected " + repr(want) + ", got " + repr(got))
    print(str(len(CASES) - failed) + " passed, " + str(failed) + " failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''

_OPENERS = phrases("fix_failing_test", "openers")
_ASKS = phrases("fix_failing_test", "asks")
_NOTES = phrases("fix_failing_test", "notes")
_HIDDEN = phrases("fix_failing_test", "hidden")
_HARDER = phrase_table("fix_failing_test", "harder")

_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\(")
_NUMBERED = re.compile(r"^(\d+)[:-](.*)$")
_FAIL = re.compile(r"^FAIL ([A-Za-z_]\w*)\(")


def _load(source: str) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<module>", "exec"), namespace)
    return namespace


def _apply(source: str, bugs: list[_Bug]) -> str:
    lines = source.split("\n")
    for bug in bugs:
        hits = [i for i, line in enumerate(lines) if line.strip() == bug.good]
        assert len(hits) == 1, bug
        i = hits[0]
        lines[i] = lines[i][: len(lines[i]) - len(lines[i].lstrip())] + bug.bad
    return "\n".join(lines)


def _call(namespace: dict[str, Any], name: str, args: Args) -> Any:
    try:
        return namespace[name](*args)
    except Exception as exc:
        return f"<{type(exc).__name__}>"


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, int | float) and abs(got - want) < 1e-9
    return type(got) is type(want) and got == want


def _pick_cases(
    rng: random.Random, module: _Module, bugs: list[_Bug], per_func: int
) -> list[tuple[str, Args, Any]]:
    """``per_func`` random cases per public function, plus cases that make sure every bug
    shows up as at least one failure."""
    good = _load(module.source)
    broken = [_load(_apply(module.source, [bug])) for bug in bugs]
    chosen: list[tuple[str, Args, Any]] = []
    for name in sorted(module.cases):
        for _ in range(per_func):
            args = module.cases[name](rng)
            chosen.append((name, args, good[name](*args)))
    for space in broken:
        if any(not _same(_call(space, n, a), w) for n, a, w in chosen):
            continue
        names = sorted(module.cases)
        for _ in range(2000):
            name = rng.choice(names)
            args = module.cases[name](rng)
            want = good[name](*args)
            if not _same(_call(space, name, args), want):
                chosen.insert(rng.randrange(len(chosen) + 1), (name, args, want))
                break
        else:
            raise AssertionError("no case shows the bug")
    return chosen


def _sed_quote(bad: str, good: str, line: int) -> str:
    """A sed expression replacing ``bad`` by ``good`` on ``line``, quoted for bash."""
    pattern = re.sub(r"([\\/.*\[^$])", r"\\\1", bad)
    replacement = re.sub(r"([\\/&])", r"\\\1", good)
    return "'" + f"{line}s/{pattern}/{replacement}/".replace("'", "'\\''") + "'"


def _numbered(text: str) -> list[tuple[int, str]]:
    found = []
    for raw in text.splitlines():
        match = _NUMBERED.match(raw)
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


def _callees(lines: list[tuple[int, str]], seen: set[str]) -> list[str]:
    names: list[str] = []
    for _, text in lines:
        if text.lstrip().startswith("def "):
            continue
        for name in _CALL.findall(text):
            if name not in seen and name not in names and not hasattr(builtins, name):
                names.append(name)
    return names


def _clip(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _grep_defs(names: list[str], path: str) -> str:
    patterns = " ".join(f"-e '^def {name}('" for name in names)
    return f"grep -n -A 12 {patterns} {path}"


@register
class FixFailingTest(Family):
    name = "fix-failing-test"
    category = "debugging"
    description = "Find and fix an injected bug in a small Python module from its checker's output."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        module = rng.choice(_MODULES)
        mod = rng.choice(module.names)
        short = mod.split("_")[0]
        checker = rng.choice(
            [f"check_{mod}.py", f"check_{short}.py", f"{short}_check.py", "run_checks.py"]
        )
        bugs = _draw_bugs(rng, module, difficulty)
        per_func = {"easy": 1, "medium": 2, "hard": 3}[difficulty]
        checked = _pick_cases(rng, module, bugs, per_func)
        hidden = _pick_cases(rng, module, bugs, 4)
        broken_source = _apply(module.source, bugs)
        checker_text = _CHECKER.format(
            mod=mod,
            checker=checker,
            cases="".join(f"    ({n!r}, {a!r}, {w!r}),\n" for n, a, w in checked),
        )
        checker_sha = hashlib.sha256(checker_text.encode()).hexdigest()
        fill = {
            "mod": mod,
            "checker": checker,
            "topic": module.topic,
            "purpose": module.purpose,
            "purpose_cap": module.purpose[:1].upper() + module.purpose[1:],
        }
        instruction = _instruction(rng, difficulty, fill)
        tests = _tests(mod, checker, checker_sha, hidden)
        broken_lines = [line.strip() for line in broken_source.split("\n")]
        fix = " ".join(
            "-e " + _sed_quote(b.bad, b.good, broken_lines.index(b.bad) + 1) for b in bugs
        )
        solution = f"sed -i {fix} {mod}.py\npython3 {checker}\n"

        return TaskDraft(
            instruction=instruction,
            files={f"/app/{mod}.py": broken_source, f"/app/{checker}": checker_text},
            tests=tests,
            solution=solution,
            expert=_expert(mod, checker, bugs),
            params={
                "module": mod,
                "topic": module.topic,
                "checker": checker,
                "bugs": [{"function": b.func, "kind": b.kind} for b in bugs],
                "checked_cases": len(checked),
                "hidden_cases": len(hidden),
            },
            mistakes=[
                shell("python3 -m pytest -q", "Let me run the test suite."),
                shell(f"python3 tests/{checker}", "I run the checker."),
                shell(f"grep -n 'def ' src/{mod}.py", "Let me list the functions."),
            ],
            tags=["python", "debugging"],
        )


def _draw_bugs(rng: random.Random, module: _Module, difficulty: str) -> list[_Bug]:
    """The injected bugs: a public one (easy), either kind (medium), helper + public (hard)."""
    helper_bugs = [b for b in module.bugs if b.func.startswith("_")]
    public_bugs = [b for b in module.bugs if not b.func.startswith("_")]
    if difficulty == "easy":
        return [rng.choice(public_bugs)]
    if difficulty == "medium":
        return [rng.choice(helper_bugs if rng.random() < 0.5 else public_bugs)]
    first = rng.choice(helper_bugs)
    return [first, rng.choice([b for b in public_bugs if b.func != first.func])]


def _instruction(rng: random.Random, difficulty: str, fill: dict[str, str]) -> str:
    """The instruction: opener and ask, then the notes in a drawn order."""
    parts = [
        rng.choice(_OPENERS).format(**fill),
        rng.choice(_ASKS).format(**fill),
        rng.choice(_NOTES).format(**fill),
        rng.choice(_HIDDEN),
    ]
    if difficulty in _HARDER:
        parts.append(rng.choice(_HARDER[difficulty]))
    tail = parts[2:]
    rng.shuffle(tail)
    return " ".join(parts[:2] + tail)


def _failures(output: str) -> tuple[list[str], list[str]]:
    """The checker's FAIL lines and the functions they name, in first-seen order."""
    fails = [line for line in output.splitlines() if _FAIL.match(line)]
    failing: list[str] = []
    for line in fails:
        name = _FAIL.match(line).group(1)  # type: ignore[union-attr]
        if name not in failing:
            failing.append(name)
    return fails, failing


def _expert(mod: str, checker: str, bugs: list[_Bug]) -> Callable[[], ExpertProgram]:
    """The expert: run the checker, read the failing functions and their callees, fix, rerun."""
    path = f"{mod}.py"

    def expert() -> ExpertProgram:
        ran: Observation = yield shell(
            f"python3 {checker}", "First I run the checker to see what fails."
        )
        fails, failing = _failures(ran.output)
        if not failing:
            return "The checker reports no failures, so there is nothing to fix."
        located: dict[int, int] = {}
        seen: set[str] = set()
        todo = list(failing)
        first = _clip(fails[0][5:])
        thought = f"`{failing[0]}` fails ({first}). Let me read its code."
        if len(failing) > 1:
            thought = (
                f"{len(fails)} cases fail, in {', '.join(failing)} (first: {first}). "
                "I read those functions."
            )
        for _round in range(3):
            seen.update(todo)
            view = yield shell(_grep_defs(todo, path), thought)
            lines = _numbered(view.output)
            for i, bug in enumerate(bugs):
                for number, text in lines:
                    if i not in located and text.strip() == bug.bad:
                        located[i] = number
            if len(located) == len(bugs):
                break
            todo = _callees(lines, seen)[:4]
            if not todo:
                break
            called = ", ".join(f"`{n}`" for n in todo)
            thought = (
                f"Those bodies do not explain every failure; they call {called}, "
                "so I read that code next."
            )
            if located:
                thought = (
                    f"Line {min(located.values())} looks wrong, but that does not explain "
                    f"every failure; the code also calls {called}, so I read that next."
                )
        if len(located) < len(bugs):
            return "I could not find the faulty line from what the checker shows."
        notes = "; ".join(
            f"line {located[i]} `{b.bad}` should be `{b.good}` ({b.kind})"
            for i, b in enumerate(bugs)
        )
        exprs = " ".join("-e " + _sed_quote(b.bad, b.good, located[i]) for i, b in enumerate(bugs))
        yield shell(f"sed -i {exprs} {path}", f"Found it: {notes}. I fix it in place.")
        again = yield shell(f"python3 {checker}", "Now I re-run the checker.")
        if not again.ok:
            return "The checker still fails after my fix; see the output above."
        return f"Fixed {mod}.py ({notes}); {checker} now passes."

    return expert


def _tests(mod: str, checker: str, sha: str, cases: list[tuple[str, Args, Any]]) -> str:
    listed = "".join(f"    ({n!r}, {a!r}, {w!r}),\n" for n, a, w in cases)
    return textwrap.dedent(
        """\
        import hashlib
        import subprocess
        import sys
        from pathlib import Path

        import pytest

        sys.path.insert(0, "/app")
        import {mod}  # noqa: E402

        CHECKER = Path("/app/{checker}")
        CHECKER_SHA256 = "{sha}"
        CASES = [
        {cases}]


        def same(got, want):
            if isinstance(want, float) or isinstance(got, float):
                return isinstance(got, (int, float)) and abs(got - want) < 1e-9
            return type(got) is type(want) and got == want


        def test_checker_unchanged():
            assert hashlib.sha256(CHECKER.read_bytes()).hexdigest() == CHECKER_SHA256


        def test_checker_passes():
            done = subprocess.run(
                [sys.executable, CHECKER.name], cwd="/app", capture_output=True, text=True
            )
            assert done.returncode == 0, done.stdout[-2000:]


        @pytest.mark.parametrize("name,args,want", CASES)
        def test_hidden_case(name, args, want):
            got = getattr({mod}, name)(*args)
            assert same(got, want), (name, args, want, got)
        """
    ).format(mod=mod, checker=checker, sha=sha, cases=listed)
