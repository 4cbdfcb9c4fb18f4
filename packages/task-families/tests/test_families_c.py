"""Families of group c: stats-summary, numeric-solve, maze-path, text-rewrite.

Without Docker: determinism, rendering, instruction variety, the experts reading what
they are shown, and a few checks that the embedded answers are right.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import statistics
import textwrap

import pytest
from task_families.maze_path import solve
from task_families.text_rewrite import _rewrite

from ale.synth.dedup import jaccard
from ale.synth.expert import Action, ExpertRun, Final, Observation
from ale.synth.family import DIFFICULTIES, draft_for, get_family
from ale.synth.render import render_task
from ale.task import load_task

FAMILIES = ["stats-summary", "numeric-solve", "maze-path", "text-rewrite"]


def _drive(draft, observations: list[str]) -> list[Action | Final]:
    """Run the expert, answering its shell actions with ``observations`` in turn."""
    run = ExpertRun(draft.expert())
    steps: list[Action | Final] = []
    answers = iter(observations)
    step = run.next(None)
    while True:
        steps.append(step)
        if isinstance(step, Final):
            return steps
        text = next(answers, "(no output)") if step.kind == "shell" else "Wrote."
        step = run.next(Observation(text + "\nExit code: 0", 0))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_deterministic(family: str, difficulty: str) -> None:
    for seed in (1, 7):
        a, b = draft_for(family, seed, difficulty), draft_for(family, seed, difficulty)
        assert a.instruction == b.instruction
        assert a.files == b.files
        assert a.tests == b.tests
        assert a.solution == b.solution
        assert a.params == b.params
        assert json.dumps(a.params, sort_keys=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_seeds_differ(family: str) -> None:
    drafts = [draft_for(family, seed, "medium") for seed in range(6)]
    assert len({d.instruction for d in drafts}) == 6
    assert len({json.dumps(d.files, sort_keys=True) + d.tests for d in drafts}) == 6


@pytest.mark.parametrize("family", FAMILIES)
def test_renders_and_loads(family: str, tmp_path) -> None:
    fam = get_family(family)
    draft = draft_for(family, 3, "hard")
    dest = render_task(
        draft, tmp_path / "task", family=family, category=fam.category, difficulty="hard", seed=3
    )
    task = load_task(dest)
    assert task.metadata.category == fam.category
    assert task.metadata.difficulty == "hard"
    assert family in task.metadata.tags
    assert task.instruction.strip() == draft.instruction.strip()
    assert (dest / "solution" / "solve.sh").read_text().endswith(draft.solution)
    compile((dest / "tests" / "test_outputs.py").read_text(), "test_outputs.py", "exec")
    for path in draft.files:
        assert (dest / "environment" / "rootfs" / path.lstrip("/")).is_file()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_instruction_variety(family: str, difficulty: str) -> None:
    texts = [draft_for(family, seed, difficulty).instruction for seed in range(30)]
    scores = [jaccard(a, b) for a, b in itertools.combinations(texts, 2)]
    assert statistics.mean(scores) < 0.3, statistics.mean(scores)
    assert max(scores) < 0.8, max(scores)


def test_families_metadata() -> None:
    cats = {f: (get_family(f).category, get_family(f).multi_turn) for f in FAMILIES}
    assert cats == {
        "stats-summary": ("scientific-computing", False),
        "numeric-solve": ("scientific-computing", False),
        "maze-path": ("games", True),
        "text-rewrite": ("text-processing", False),
    }


# ---------------------------------------------------------------- stats-summary


def test_stats_expert_reads_the_delimiter() -> None:
    draft = draft_for("stats-summary", 2, "medium")
    src = draft.params["source"]
    for header, split in (("a,b,c", "line.split(',')"), ("   a   b   c", "line.split()")):
        steps = _drive(draft, [f"# comment\n{header}\n1 2 3\n42 {src}", "{}"])
        script = next(s for s in steps if isinstance(s, Action) and s.kind == "write")
        assert split in script.content
        assert isinstance(steps[-1], Final)


def test_stats_hard_has_na_and_conversion() -> None:
    drafts = [draft_for("stats-summary", seed, "hard") for seed in range(10)]
    assert all("NA" in next(iter(d.files.values())) for d in drafts)
    assert sum(d.params["convert"] is not None for d in drafts) >= 7
    easy = draft_for("stats-summary", 1, "easy")
    assert "NA" not in next(iter(easy.files.values()))


# ---------------------------------------------------------------- numeric-solve


def _expected(draft) -> list[float]:
    return json.loads(re.search(r"EXPECTED = (\[.*\])", draft.tests).group(1))


def test_numeric_kinds_all_drawn() -> None:
    kinds = {
        draft_for("numeric-solve", s, d).params["kind"] for s in range(12) for d in DIFFICULTIES
    }
    assert kinds == {"trapezoid", "bisection", "ode"}


def test_numeric_bisection_answers_are_roots() -> None:
    for seed in range(40):
        draft = draft_for("numeric-solve", seed, "hard")
        if draft.params["kind"] != "bisection":
            continue
        coeffs, (a, b) = draft.params["coefficients"], draft.params["interval"]
        roots = _expected(draft)
        assert len(roots) == draft.params["roots_in_interval"] >= 2
        assert roots == sorted(roots)
        for r in roots:
            assert a < r < b
            value = 0.0
            for c in coeffs:
                value = value * r + c
            assert abs(value) < 1e-6


def test_numeric_expert_reports_what_it_ran() -> None:
    draft = next(
        d
        for s in range(30)
        if (d := draft_for("numeric-solve", s, "medium")).params["kind"] == "trapezoid"
    )
    steps = _drive(draft, ["t_s,velocity_mps\n0,1\n1,2\n20 samples.csv", "1.2345"])
    assert "t_s,velocity_mps" in steps[1].thought
    assert steps[-1].message.endswith("1.2345.")


# ---------------------------------------------------------------- maze-path


def test_maze_embedded_optimum_and_features() -> None:
    for difficulty in DIFFICULTIES:
        for seed in range(5):
            draft = draft_for("maze-path", seed, difficulty)
            maze = next(iter(draft.files.values())).splitlines()
            best = solve(maze)
            assert best is not None and f"SHORTEST = {best[0]}\n" in draft.tests
            assert draft.params["shortest"] == best[0] == len(best[1])
            if difficulty == "medium":
                assert draft.params["goals"] >= 2
            if difficulty == "hard":
                assert draft.params["doors"]
                # the doors matter: ignoring them gives a shorter (wrong) answer
                opened = [re.sub("[A-F]", ".", row) for row in maze]
                assert solve(opened)[0] < best[0]


def test_maze_expert_fits_the_search_to_the_census() -> None:
    draft = draft_for("maze-path", 4, "easy")
    src = draft.params["source"]
    plain = "    200 #\n     80 .\n      1 G\n      1 S"
    steps = _drive(draft, [f"17 {src}\n#####", plain, "22 moves\n22"])
    script = next(s for s in steps if isinstance(s, Action) and s.kind == "write")
    assert "EXPECTED_ROWS = 17" in script.content and "KEYS = ''" in script.content
    assert "plain breadth-first" in script.thought
    keyed = "    200 #\n      1 A\n      1 B\n     80 .\n      1 G\n      1 S\n      1 a\n      1 b"
    steps = _drive(draft, [f"23 {src}\n#####", keyed, "30 moves\n30"])
    script = next(s for s in steps if isinstance(s, Action) and s.kind == "write")
    assert "EXPECTED_ROWS = 23" in script.content and "KEYS = 'ab'" in script.content
    assert "doors A, B" in script.thought
    assert steps[-1].message.startswith("Found a shortest path of 30 moves")


def test_maze_test_module_checks_moves() -> None:
    draft = next(
        d for s in range(30) if (d := draft_for("maze-path", s, "hard")).params["ask"] != "length"
    )
    maze = next(iter(draft.files.values())).splitlines()
    moves = solve(maze)[1]
    scope: dict = {}
    exec(draft.tests, scope)  # the generated test module
    if draft.params["ask"] == "moves":
        scope["answer"] = lambda: (None, moves)
    else:
        scope["answer"] = lambda: (len(moves), moves)
    scope["test_moves_valid_and_optimal"]()
    scope["answer"] = lambda: (None, moves[:-1] + ("U" if moves[-1] != "U" else "D"))
    with pytest.raises(AssertionError):
        scope["test_moves_valid_and_optimal"]()


# ---------------------------------------------------------------- text-rewrite


def test_rewrite_rules() -> None:
    doc = textwrap.dedent(
        """\
        # Nimbus Notes

        Nimbus was released on 03/07/2024 and NimbusDB
        followed later; the nimbus user owns it.

        ## 4. Setup

        ```bash
        ## 9. Nimbus 03/07/2024
        ```

        | Name   | Count |
        |--------|------:|
        | Nimbus | 3     |

        ### 4.7 Steps
        """
    )
    cfg = {
        "rename": ["Nimbus", "Zenith"],
        "dates": ["us", "long"],
        "renumber": True,
        "subsections": True,
        "table": True,
        "wrap": None,
    }
    got = _rewrite(doc, cfg).splitlines()
    assert got[2] == "Zenith was released on March 7, 2024 and NimbusDB"
    assert got[3] == "followed later; the nimbus user owns it."
    assert got[5] == "## 1. Setup"
    assert got[8] == "## 9. Nimbus 03/07/2024"
    assert got[11:13] == ["Name,Count", "Zenith,3"]
    assert got[14] == "### 1.1 Steps"


def test_rewrite_wrap_matches_textwrap() -> None:
    for seed in range(40):
        draft = draft_for("text-rewrite", seed, "medium")
        width = draft.params["wrap"]
        if not width:
            continue
        want = re.search(r"EXPECTED = (.*)\n", draft.tests).group(1)
        expected = ast.literal_eval(want)
        paragraphs = re.split(r"\n\n+", expected.strip("\n"))
        for block in paragraphs:
            if block.startswith(("#", "- ", "|", "```")):
                continue
            assert block.split("\n") == textwrap.wrap(" ".join(block.split()), width)


def test_rewrite_expert_counts_code_blocks() -> None:
    draft = draft_for("text-rewrite", 2, "hard")
    steps = _drive(draft, ["# T\n\n```bash\nx\n```\n\n```yaml\ny\n```\n", "", "3c3\n"])
    assert "2 code block(s)" in steps[2].thought
    assert isinstance(steps[-1], Final) and draft.params["output"] in steps[-1].message
