"""Config checks, dedup, mixing, filters and the expert driver of the synthesis pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from ale.synth.config import FilterConfig, SynthConfigError, load_config, parse_config
from ale.synth.dedup import deduplicate, jaccard
from ale.synth.expert import ExpertRun, Final, Observation, format_shell, shell, typo, write
from ale.synth.filters import Contamination, heuristic_reason
from ale.synth.mix import mix, quotas
from ale.trajectory import AgentInfo, FailureMode, Role, Step, ToolCall, ToolResult, Trajectory

BASE = {"name": "x", "seed": 1, "target": 10, "families": ["csv-aggregate"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"families": ["csv-agregate"]},
            "no task family named 'csv-agregate'; did you mean 'csv-aggregate'",
        ),
        ({"mix": {"difficulty": {"easy": 0.5, "hard": 0.4}}}, "mix.difficulty sum to 0.9, not 1"),
        ({"mix": {"family": {"csv-aggregate": 1.2}}}, "mix.family sum to 1.2, not 1"),
        ({"mix": {"category": {"games": 1.0}}}, "no family in families: is of that category"),
        ({"mix": {"difficulty": {"esay": 1.0}}}, "did you mean 'easy'"),
        ({"famlies": ["csv-aggregate"]}, "unknown key famlies; did you mean 'families'"),
        ({"dedup": {"treshold": 0.5}}, "unknown key dedup.treshold; did you mean 'threshold'"),
        ({"target": 0}, "target: Input should be greater than 0"),
        ({"families": []}, "names no families"),
    ],
)
def test_bad_configs_are_refused_before_anything_starts(change: dict, message: str) -> None:
    with pytest.raises(SynthConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_config({**BASE, **change})


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SynthConfigError, match="cannot read the config"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(SynthConfigError, match="not valid YAML"):
        load_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("name: g\nseed: 2\ntarget: 5\nfamilies:\n  csv-aggregate:\n")
    assert load_config(good).families["csv-aggregate"].difficulty is None


def test_digest_ignores_where_and_how_fast() -> None:
    a = parse_config(BASE)
    b = parse_config({**BASE, "output": "/elsewhere", "concurrency": 9})
    assert a.digest() == b.digest() != parse_config({**BASE, "seed": 2}).digest()


def test_dedup_exact_and_near() -> None:
    base = "Sum the amount column per region of sales.csv and write the totals to out.json now"
    texts = [
        base,
        base.upper() + "  ",  # exact after normalising
        base.replace("now", "today"),  # near
        "Find the shortest path through the maze in maze.txt and write its length to a file",
    ]
    result = deduplicate(texts, threshold=0.6)
    assert result.kept == [0, 3]
    assert result.duplicate_of[1][:2] == (0, "exact")
    assert result.duplicate_of[2][:2] == (0, "near")
    assert jaccard(texts[0], texts[3]) == 0.0


def test_quotas_and_mix_follow_declared_shares() -> None:
    assert quotas({"a": 0.5, "b": 0.3, "c": 0.2}, 7) == {"a": 4, "b": 2, "c": 1}
    items = [
        {"family": f, "difficulty": d} for f in "xyz" for d in ("easy", "hard") for _ in range(5)
    ]
    declared = {
        "family": {"x": 0.5, "y": 0.25, "z": 0.25},
        "difficulty": {"easy": 0.5, "hard": 0.5},
    }
    chosen, report = mix(items, declared, 8, seed=1)
    assert len(chosen) == 8
    assert report["family"]["x"]["count"] == 4 and report["family"]["y"]["count"] == 2
    assert report["difficulty"]["easy"]["achieved"] == 0.5
    # a shortage is reported, and the dataset is still filled from the rest
    scarce = [i for i in items if i["family"] != "y"] + [{"family": "y", "difficulty": "easy"}]
    chosen, report = mix(scarce, declared, 8, seed=1)
    assert len(chosen) == 8 and report["family"]["y"]["count"] == 1
    assert report["family"]["y"]["declared"] == 0.25


def _traj(*calls: dict, failure: FailureMode | None = None) -> Trajectory:
    steps = [Step(role=Role.USER, content="do it")]
    for i, args in enumerate(calls):
        call = ToolCall(id=f"c{i}", name="run_shell_command", arguments=args)
        steps += [
            Step(role=Role.ASSISTANT, tool_calls=[call]),
            Step(role=Role.TOOL, tool_results=[ToolResult(call_id=call.id, content="ok")]),
        ]
    return Trajectory(agent=AgentInfo(name="a"), steps=steps, failure_mode=failure)


def test_heuristic_filter_reasons() -> None:
    cfg = FilterConfig(max_turns=4, max_chars=500, max_repeats=2)
    assert heuristic_reason(_traj({"command": "ls"}), cfg) is None
    assert "repeated 3 times" in heuristic_reason(_traj(*[{"command": "ls"}] * 3), cfg)
    assert "5 assistant turns" in heuristic_reason(
        _traj(*[{"command": f"ls {i}"} for i in range(5)]), cfg
    )
    assert "characters" in heuristic_reason(_traj({"command": "x" * 600}), cfg)
    assert "could not be parsed" in heuristic_reason(_traj({"_invalid_json": "{"}), cfg)
    assert "loop_detected" in heuristic_reason(_traj(failure=FailureMode.LOOP_DETECTED), cfg)
    unparsed = _traj({"command": "ls"})
    unparsed.steps.append(
        Step(role=Role.TOOL, tool_results=[ToolResult(content="bad", is_error=True)])
    )
    assert "could not parse" in heuristic_reason(unparsed, cfg)


def test_contamination_overlap() -> None:
    held = Contamination(
        [("tb/a", "Write a script that counts the words in every file of the docs folder")], 5
    )
    score, source = held.overlap("Please write a script that counts the words in every file here")
    assert source == "tb/a" and 0.3 < score < 1
    assert held.overlap("Sort the numbers in data.txt") == (0.0, None)


def test_expert_run_inserts_one_recoverable_typo() -> None:
    def program():
        seen = yield shell("cat config.ini", "look")
        yield write("out.txt", seen.output, "save")
        return "done"

    run = ExpertRun(program(), mistake=True, mistake_after=0)
    first = run.next(None)
    assert first.command == "catt config.ini" and run.marks == ["mistake"]
    again = run.next(Observation("bash: catt: command not found\nExit code: 127", 127))
    assert again.command == "cat config.ini" and "typo for `cat`" in again.thought
    saved = run.next(Observation("port=8080\nExit code: 0", 0))
    assert saved.kind == "write" and saved.content == "port=8080"
    assert isinstance(run.next(Observation("Wrote", 0)), Final)
    assert run.marks == ["mistake", "recovery", "", ""] and run.mistakes_made == 1


def test_expert_run_family_mistakes_and_no_mistake() -> None:
    def program():
        yield shell("ls")
        return "ok"

    run = ExpertRun(program(), mistake=True, mistakes=[shell("cat /nope", "guess")])
    assert run.next(None).command == "cat /nope"
    assert run.next(Observation("No such file\nExit code: 1", 1)).command == "ls"
    plain = ExpertRun(program())
    assert plain.next(None).command == "ls" and plain.marks == [""]


def test_typo_and_observation_format() -> None:
    assert typo("  grep -n x f") == ("  grepp -n x f", "grep")
    assert typo("./run.sh") is None
    text = format_shell("a\n", "b\n", 2)
    assert text == "stdout:\na\nstderr:\nb\nExit code: 2"
    obs = Observation(format_shell("", "", 0), 0)
    assert obs.output == "" and obs.ok


def test_held_out_sets_are_task_dirs_or_datasets_and_never_empty(tmp_path: Path) -> None:
    import shutil

    from ale.synth.filters import held_out_instructions

    fixtures = Path(__file__).parent / "fixtures" / "tasks"
    dataset = tmp_path / "dataset"
    shutil.copytree(fixtures, dataset / "tasks")
    (dataset / "manifest.json").write_text("{}")
    direct = held_out_instructions([fixtures])
    assert direct and held_out_instructions([dataset]) == direct
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no tasks"):
        held_out_instructions([tmp_path / "empty"])


def test_families_come_from_entry_points_and_none_installed_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ale.synth import family as fam

    monkeypatch.setattr(fam, "_REGISTRY", {})
    monkeypatch.setattr(fam, "entry_points", lambda group: [])
    assert fam.families() == {}
    with pytest.raises(fam.UnknownFamily, match="no task families are installed; install"):
        fam.get_family("text-find")
