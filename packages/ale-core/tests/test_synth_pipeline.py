"""The synthesis pipeline at its seams: a runner and agents standing in for sandboxes.

The real runner (rock, Docker) is tested in packages/rock/tests/test_synth_docker.py;
here the stages' logic is: rejections and their reasons, isolation of a family that
raises, resumption without repeating work, mixing and the written dataset."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from ale.episode import EpisodeResult
from ale.jsonl import read_jsonl
from ale.synth.config import parse_config
from ale.synth.dataset import dataset_stats
from ale.synth.expert import ExpertRun, Final, Observation
from ale.synth.family import Family, TaskDraft, register
from ale.synth.pipeline import Pipeline, WorkDirError
from ale.synth.plan import family_shares, plan
from ale.trajectory import AgentInfo, Role, Step, StepMark, ToolCall, ToolResult, Trajectory


@register
class _Exploding(Family):
    """Raises for one seed in three: the pipeline must reject only those candidates."""

    name = "test-exploding"
    category = "games"
    description = "A test family that sometimes raises."

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        if rng.random() < 0.34:
            raise RuntimeError("the generator broke on purpose")
        words = " ".join(
            rng.choice(["red", "blue", "green", "cyan", "gold", "teal"]) for _ in range(12)
        )
        return TaskDraft(
            instruction=f"Solve puzzle {rng.randrange(10**9)}: {words}.",
            files={"/app/p.txt": "x"},
            tests="def test_x():\n    assert False\n",
            solution="true\n",
            expert=lambda: _two_steps(),
        )


def _two_steps():  # an expert program of two shell actions
    from ale.synth.expert import shell

    seen = yield shell("ls", "look")
    yield shell(f"echo {len(seen.output)}", "act")
    return "done"


class FakeAgents:
    def oracle(self, task: Any) -> Any:
        return ("oracle", task.id)

    def nop(self) -> Any:
        return ("nop", None)

    def expert(self, task: Any, run: ExpertRun) -> Any:
        return ("expert", run)

    def replay(self, trajectory: Trajectory) -> Any:
        return ("replay", trajectory)

    def teacher(self) -> Any:
        return None


class Killed(BaseException):
    """Stands for the process being killed mid-stage (nothing catches it)."""


class FakeRunner:
    """Oracle passes, nop fails, experts are driven with canned observations."""

    def __init__(self, *, stop_after: int | None = None, nop_passes: set[str] = frozenset()):
        self.episodes: list[tuple[str, str]] = []
        self.stop_after = stop_after
        self.nop_passes = nop_passes

    async def episode(
        self, task: Any, agent: Any, *, logs_dir: Path | None = None
    ) -> EpisodeResult:
        if self.stop_after is not None and len(self.episodes) >= self.stop_after:
            raise Killed
        kind, payload = agent
        self.episodes.append((kind, task.id))
        if kind == "oracle":
            return EpisodeResult(reward=1.0)
        if kind == "nop":
            return EpisodeResult(reward=1.0 if task.id in self.nop_passes else 0.0)
        if kind == "replay":
            return EpisodeResult(reward=payload.reward)
        run: ExpertRun = payload
        t = Trajectory(agent=AgentInfo(name="fake"), steps=[Step(role=Role.USER, content="go")])
        obs = None
        while not isinstance(step := run.next(obs), Final):
            call = ToolCall(
                id=f"c{len(t.steps)}", name="run_shell_command", arguments={"command": step.command}
            )
            t.steps.append(
                Step(
                    role=Role.ASSISTANT,
                    content=step.thought,
                    tool_calls=[call],
                    mark=StepMark(run.marks[-1]) if run.marks[-1] else None,
                )
            )
            obs = Observation("out\nExit code: 0", 0)
            t.steps.append(
                Step(role=Role.TOOL, tool_results=[ToolResult(call_id=call.id, content=obs.text)])
            )
        t.steps.append(Step(role=Role.ASSISTANT, content=step.message))
        t.reward = 1.0
        return EpisodeResult(reward=1.0, trajectory=t)


def _config(tmp_path: Path, **over: Any) -> Any:
    data = {
        "name": "t",
        "seed": 3,
        "target": 6,
        "oversample": 2.0,
        "concurrency": 2,
        "families": ["test-exploding"],
        "mistake_rate": 0.5,
        "decontamination": {"sets": []},
        **over,
    }
    return parse_config(data)


async def _run(tmp_path: Path, config: Any, runner: Any, work: str = "work", out: str = "out"):
    pipe = Pipeline(config, runner, FakeAgents(), work_dir=tmp_path / work, output=tmp_path / out)
    return await pipe.run()


async def test_a_family_that_raises_is_isolated(tmp_path: Path) -> None:
    manifest = await _run(tmp_path, _config(tmp_path), FakeRunner())
    rejected = [r for r in manifest["rejected"] if r["stage"] == "generate"]
    assert rejected, "some seeds of the test family raise"
    assert all("RuntimeError: the generator broke on purpose" in r["reason"] for r in rejected)
    journal = [json.loads(x) for x in (tmp_path / "work/journal.jsonl").read_text().splitlines()]
    tracebacks = [r["traceback"] for r in journal if r["stage"] == "generate" and not r["ok"]]
    assert tracebacks and all("Traceback" in tb for tb in tracebacks)
    assert len(manifest["tasks"]) == 6  # the run went on and filled the target


async def test_dataset_written_with_manifest_and_trajectories(tmp_path: Path) -> None:
    manifest = await _run(tmp_path, _config(tmp_path), FakeRunner())
    out = tmp_path / "out"
    ids = sorted(t["id"] for t in manifest["tasks"])
    assert sorted(p.name for p in (out / "tasks").iterdir()) == ids
    trajectories = list(read_jsonl(out / "trajectories.jsonl"))
    assert [t.task_id for t in trajectories] == ids
    assert all(
        t.reward == 1.0 and t.extra["synth"]["family"] == "test-exploding" for t in trajectories
    )
    assert all(s.timestamp is None for t in trajectories for s in t.steps)
    assert manifest["counts"]["generate"]["in"] == len(plan(_config(tmp_path)))
    stats = dataset_stats(out)
    assert stats["tasks"] == 6 and stats["digests_ok"]
    assert stats["with_mistake"] == sum(t["mistakes"] > 0 for t in manifest["tasks"])
    (out / "tasks" / ids[0] / "instruction.md").write_text("tampered\n")
    assert dataset_stats(out)["changed_tasks"] == [ids[0]]


async def test_nop_passing_candidates_are_rejected(tmp_path: Path) -> None:
    config = _config(tmp_path)
    first = await _run(tmp_path, config, FakeRunner(), work="w1", out="o1")
    victim = first["tasks"][0]["id"]
    second = await _run(tmp_path, config, FakeRunner(nop_passes={victim}), work="w2", out="o2")
    reasons = {r["id"]: r["reason"] for r in second["rejected"]}
    assert "tests pass with no work done" in reasons[victim]
    assert victim not in {t["id"] for t in second["tasks"]}


async def test_killed_run_resumes_without_repeating_work(tmp_path: Path) -> None:
    config = _config(tmp_path)
    whole = await _run(tmp_path, config, FakeRunner(), work="whole", out="whole-out")
    first = FakeRunner(stop_after=7)
    with pytest.raises(Killed):
        await _run(tmp_path, config, first, work="w", out="o")
    done_before = {(k, i) for k, i in first.episodes}
    second = FakeRunner()
    resumed = await _run(tmp_path, config, second, work="w", out="o")
    redone = {(k, i) for k, i in second.episodes} & done_before
    # only episodes cut short by the kill (at most the two in flight) run again
    assert len(redone) <= config.concurrency
    assert resumed["digests"]["dataset"] == whole["digests"]["dataset"]
    assert len({t["id"] for t in resumed["tasks"]}) == len(resumed["tasks"])


async def test_work_dir_of_another_config_is_refused(tmp_path: Path) -> None:
    await _run(tmp_path, _config(tmp_path), FakeRunner())
    with pytest.raises(WorkDirError, match="another config"):
        await _run(tmp_path, _config(tmp_path, seed=4), FakeRunner())


async def test_same_config_regenerates_the_same_dataset(tmp_path: Path) -> None:
    a = await _run(tmp_path, _config(tmp_path), FakeRunner(), work="a", out="oa")
    b = await _run(tmp_path, _config(tmp_path), FakeRunner(), work="b", out="ob")
    assert a["digests"] == b["digests"]
    c = await _run(tmp_path, _config(tmp_path, seed=9), FakeRunner(), work="c", out="oc")
    assert c["digests"]["tasks"] != a["digests"]["tasks"]


async def test_duplicates_and_contamination_are_rejected(tmp_path: Path) -> None:
    held = tmp_path / "held" / "one"
    (held / "tests").mkdir(parents=True)
    (held / "environment").mkdir()
    (held / "environment" / "Dockerfile").write_text("FROM x\n")
    (held / "tests" / "test.sh").write_text("true\n")
    cfg = _config(tmp_path)
    cands = plan(cfg)
    from ale.synth.family import draft_for

    text = next(draft_for(c.family, c.seed, c.difficulty).instruction for c in cands if _safe(c))
    (held / "instruction.md").write_text(text)
    (held / "task.toml").write_text('version = "1.0"\n')
    config = _config(tmp_path, decontamination={"sets": [str(tmp_path / "held")]})
    manifest = await _run(tmp_path, config, FakeRunner())
    kinds = manifest["rejections"]
    assert kinds.get("decontaminate:contaminated") == 1
    assert manifest["decontamination"]["held_out_tasks"] == 1


def _safe(c: Any) -> bool:
    from ale.synth.family import draft_for

    try:
        draft_for(c.family, c.seed, c.difficulty)
        return True
    except RuntimeError:
        return False


def test_plan_is_fixed_by_the_config_and_follows_difficulty_shares() -> None:
    cfg = parse_config(
        {
            "name": "p",
            "seed": 1,
            "target": 10,
            "oversample": 1.0,
            "families": ["test-exploding"],
            "mix": {"difficulty": {"easy": 0.5, "medium": 0.3, "hard": 0.2}},
            "decontamination": {"sets": []},
        }
    )
    a, b = plan(cfg), plan(cfg)
    assert [c.id for c in a] == [c.id for c in b]
    counts = {d: sum(c.difficulty == d for c in a) for d in ("easy", "medium", "hard")}
    assert counts == {"easy": 5, "medium": 3, "hard": 2}
    assert len({c.id for c in a}) == 10


def test_family_shares_split_a_category_evenly() -> None:
    cfg = parse_config(
        {
            "name": "p",
            "seed": 1,
            "target": 10,
            "families": ["test-exploding", "csv-aggregate"],
            "mix": {"category": {"games": 0.25, "data-processing": 0.75}},
            "decontamination": {"sets": []},
        }
    )
    assert family_shares(cfg) == {"test-exploding": 0.25, "csv-aggregate": 0.75}
