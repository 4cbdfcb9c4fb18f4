"""implement-function: fill in a stub function in /app from its docstring and the instruction.

The function is drawn from a menu (roman numerals both ways, run-length coding, Caesar
shifts, word wrap, interval merging, bracket balancing, base conversion, snake/camel case,
range compression). The stub holds the signature and a docstring; the instruction restates
the contract with examples drawn per seed. Hard drafts spell out edge cases (empty inputs,
invalid values that must raise ``ValueError``, negative numbers...) that the hidden tests
check. Single-turn: everything needed is in the instruction and the stub.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Callable
from typing import Any

from ale.synth.expert import shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._function_specs import SPECS, Call, Spec
from task_families._sources import phrases

_OPENERS = phrases("implement_function", "openers")
_EXAMPLE_LEADS = phrases("implement_function", "example_leads")
_NOTES = phrases("implement_function", "notes")
_EDGE_LEADS = phrases("implement_function", "edge_leads")


def _evaluate(namespace: dict[str, Any], name: str, args: tuple[Any, ...]) -> Any:
    """JSON-normalised result, or the marker ``{"raises": "ValueError"}``."""
    try:
        got = namespace[name](*args)
    except ValueError:
        return {"raises": "ValueError"}
    return json.loads(json.dumps(got))


def _call_text(name: str, args: tuple[Any, ...]) -> str:
    return f"{name}({', '.join(repr(a) for a in args)})"


@register
class ImplementFunction(Family):
    name = "implement-function"
    category = "software-engineering"
    description = "Implement a specified function (roman numerals, RLE, word wrap...) from a stub."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        spec = rng.choice(SPECS)
        mod = rng.choice(spec.modules) + ".py"
        namespace: dict[str, Any] = {}
        exec(compile(spec.source, "<reference>", "exec"), namespace)
        examples, hidden = _draw_calls(rng, spec, difficulty)
        cases = [(name, list(args), _evaluate(namespace, name, args)) for name, args in hidden]

        title = spec.modules[0].replace("_", " ")
        stub = f'"""{title.capitalize()} helpers."""\n'
        for signature, doc in spec.stubs:
            stub += f'\n\ndef {signature}:\n    """{doc}"""\n    raise NotImplementedError\n'
        shown = [f"- `{_call_text(n, a)}` returns `{namespace[n](*a)!r}`" for n, a in examples]
        module_text = f'"""{title.capitalize()} helpers."""\n\n{spec.source}'
        stem = mod[:-3]
        probe = "".join(f"print(repr({_call_text(n, a)}))\n" for n, a in examples)
        return TaskDraft(
            instruction=_instruction(rng, spec, mod, shown, difficulty),
            files={f"/app/{mod}": stub},
            tests=_tests(stem, cases),
            solution=f"cat > {mod} <<'PY'\n{module_text}PY\n",
            expert=_expert(spec, mod, module_text, probe),
            params={
                "function": spec.key,
                "module": mod,
                "hidden_cases": len(cases),
                "edge_cases": difficulty == "hard",
            },
            tags=["python", "implementation"],
        )


def _draw_calls(rng: random.Random, spec: Spec, difficulty: str) -> tuple[list[Call], list[Call]]:
    """Distinct calls: three examples for the instruction and the hidden ones for the tests
    (hard drafts add the spec's edge cases)."""
    n_cases = {"easy": 6, "medium": 14, "hard": 14}[difficulty]
    calls: list[Call] = []
    for _ in range(1000):
        call = spec.basic(rng)
        if call not in calls:
            calls.append(call)
        if len(calls) == n_cases + 3:
            break
    examples, hidden = calls[:3], calls[3:]
    if difficulty == "hard":
        hidden += list(spec.edges)
    return examples, hidden


def _instruction(
    rng: random.Random, spec: Spec, mod: str, shown: list[str], difficulty: str
) -> str:
    parts = [
        rng.choice(_OPENERS),
        rng.choice(spec.summaries).format(mod=f"/app/{mod}"),
        rng.choice(_EXAMPLE_LEADS) + "\n\n" + "\n".join(shown),
    ]
    notes = [rng.choice(_NOTES)]
    if difficulty == "hard":
        edge_notes = list(spec.edge_notes)
        rng.shuffle(edge_notes)
        notes.insert(0, rng.choice(_EDGE_LEADS) + "\n\n" + "\n".join(f"- {n}" for n in edge_notes))
    elif difficulty == "medium":
        notes.append(
            rng.choice(
                [
                    "The hidden tests use many more inputs than the examples above.",
                    "It will be checked on a broader set of inputs than shown here.",
                    "Expect it to be exercised on more inputs than these.",
                ]
            )
        )
    return "\n\n".join([" ".join(parts[:2]), parts[2], *notes])


def _expert(spec: Spec, mod: str, module_text: str, probe: str) -> Callable[[], ExpertProgram]:
    """Look at the stub, write the implementation, try it on the examples."""

    def expert() -> ExpertProgram:
        yield shell(f"cat {mod}", "Let me look at the stub first.")
        yield write(
            mod,
            module_text,
            f"I write the implementation of {', '.join(s.split('(')[0] for s, _ in spec.stubs)}.",
        )
        ran = yield shell(
            f"python3 - <<'PY'\nfrom {mod[:-3]} import *\n{probe}PY",
            "Now I try it on the examples from the task.",
        )
        if not ran.ok:
            return "The implementation raised an error on the examples; see above."
        return f"Implemented {mod}; the examples give the expected results."

    return expert


def _tests(stem: str, cases: list[tuple[str, list[Any], Any]]) -> str:
    listed = "".join(f"    ({n!r}, {json.dumps(a)!r}, {json.dumps(w)!r}),\n" for n, a, w in cases)
    return textwrap.dedent(
        """\
        import json
        import sys

        import pytest

        sys.path.insert(0, "/app")
        import {stem}  # noqa: E402

        CASES = [
        {cases}]


        @pytest.mark.parametrize("name,args,want", CASES)
        def test_case(name, args, want):
            args, want = json.loads(args), json.loads(want)
            func = getattr({stem}, name)
            if isinstance(want, dict) and want.get("raises") == "ValueError":
                with pytest.raises(ValueError):
                    func(*args)
                return
            got = json.loads(json.dumps(func(*args)))
            assert got == want, (name, args)
        """
    ).format(stem=stem, cases=listed)
