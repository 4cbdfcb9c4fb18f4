"""The synthesis pipeline: stages in order, a journal so a killed run resumes.

Stages, cheapest first so sandboxes are spent only on candidates that can be kept:

1. ``generate``     each planned candidate's draft rendered as a task (a family that
                    raises rejects that candidate with its traceback; the run goes on);
2. ``decontaminate`` instruction n-gram overlap with the held-out sets;
3. ``dedup``        exact and MinHash near-duplicate instructions;
4. ``verify``       the oracle must pass and a no-op agent must fail, in sandboxes;
5. ``trajectory``   the family's expert (or the teacher) solves the task through the agent;
6. ``filter``       heuristics over the trajectory;
7. ``replay``       the trajectory's calls replayed in a fresh sandbox reach the same reward;
8. ``mix``          the dataset drawn from the survivors by the declared proportions;
9. ``write``        tasks/, trajectories.jsonl, manifest.json.

Every decision is appended to ``<work>/journal.jsonl`` as it is made. A run started
again with the same config skips what the journal already decided (except failures of
the infrastructure, which are tried again), so it picks up where it stopped and never
makes a task twice. Sandboxes and agents come in as arguments (:class:`Agents`, a
:class:`~ale.episode.EpisodeRunner`): this module starts nothing itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from ale.agents import BenchAgent
from ale.episode import EpisodeResult, EpisodeRunner
from ale.jsonl import read_jsonl, write_jsonl
from ale.synth.config import SynthConfig
from ale.synth.dataset import write_dataset
from ale.synth.dedup import deduplicate
from ale.synth.expert import ExpertRun
from ale.synth.family import draft_for, get_family
from ale.synth.filters import Contamination, held_out_instructions, heuristic_reason
from ale.synth.mix import mix, quotas
from ale.synth.render import render_task
from ale.task import Task, load_task
from ale.trajectory import StepMark, Trajectory

STAGES = (
    "generate",
    "decontaminate",
    "dedup",
    "verify",
    "trajectory",
    "filter",
    "replay",
    "mix",
    "write",
)


class Agents(Protocol):
    """The agents the stages need, made by the layer that wires the pipeline."""

    def oracle(self, task: Task) -> Any: ...

    def nop(self) -> Any: ...

    def expert(self, task: Task, run: ExpertRun) -> Any: ...

    def replay(self, trajectory: Trajectory) -> Any: ...

    def teacher(self) -> Any | None: ...


class Progress(Protocol):
    def stage(self, name: str, total: int, done: int) -> None:
        """A stage starts with ``total`` items, ``done`` of them already in the journal."""

    def advance(self, name: str, item: str, ok: bool, note: str) -> None: ...

    def end(self, name: str, kept: int, rejected: int, seconds: float) -> None: ...


class _Quiet:
    def stage(self, name: str, total: int, done: int) -> None:
        pass

    def advance(self, name: str, item: str, ok: bool, note: str) -> None:
        pass

    def end(self, name: str, kept: int, rejected: int, seconds: float) -> None:
        pass


class WorkDirError(ValueError):
    """The work directory belongs to another run."""


class Journal:
    """Append-only record of every stage decision, one JSON object a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                self.records[(rec["stage"], rec["id"])] = rec
        self._fh = path.open("a", encoding="utf-8")

    def get(self, stage: str, item: str) -> dict[str, Any] | None:
        rec = self.records.get((stage, item))
        return None if rec is None or rec.get("retry") else rec

    def put(self, stage: str, item: str, ok: bool, reason: str | None = None, **data: Any) -> None:
        rec = {"stage": stage, "id": item, "ok": ok, "reason": reason, **data}
        self.records[(stage, item)] = rec
        self._fh.write(json.dumps(rec, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class Candidate:
    """One planned task: family, difficulty and seed fix everything else."""

    def __init__(self, family: str, category: str, difficulty: str, seed: int, multi: bool):
        self.family, self.category, self.difficulty, self.seed = family, category, difficulty, seed
        self.multi_turn = multi
        self.id = f"{family}-{seed:08x}"

    def attrs(self) -> dict[str, str]:
        return {"family": self.family, "category": self.category, "difficulty": self.difficulty}


def family_shares(config: SynthConfig) -> dict[str, float]:
    """Each family's share of the dataset: declared, else its category's share split
    evenly among the config's families of that category, else even."""
    names = list(config.families)
    if config.mix.family:
        return {n: config.mix.family.get(n, 0.0) for n in names}
    if config.mix.category:
        by_cat: dict[str, list[str]] = {}
        for n in names:
            by_cat.setdefault(get_family(n).category, []).append(n)
        return {
            n: config.mix.category.get(cat, 0.0) / len(members)
            for cat, members in by_cat.items()
            for n in members
        }
    return {n: 1 / len(names) for n in names}


def plan(config: SynthConfig) -> list[Candidate]:
    """The candidates a config generates, in a fixed order (a function of the config)."""
    out: list[Candidate] = []
    seen: set[int] = set()
    for name, share in family_shares(config).items():
        family = get_family(name)
        count = math.ceil(config.target * share * config.oversample) if share > 0 else 0
        spread = (
            config.families[name].difficulty
            or config.mix.difficulty
            or {d: 1 / len(family.difficulties) for d in family.difficulties}
        )
        spread = {d: p for d, p in spread.items() if d in family.difficulties} or {
            d: 1 / len(family.difficulties) for d in family.difficulties
        }
        levels = [d for d, k in quotas(spread, count).items() for _ in range(k)]
        random.Random(f"{config.seed}|{name}|difficulty").shuffle(levels)
        for i, level in enumerate(levels):
            digest = hashlib.sha256(f"{config.seed}|{name}|{i}".encode()).hexdigest()
            seed = int(digest[:8], 16)
            while seed in seen:
                seed = (seed + 1) & 0xFFFFFFFF
            seen.add(seed)
            out.append(Candidate(name, family.category, level, seed, family.multi_turn))
    return out


class Pipeline:
    """One run of a config: ``await Pipeline(...).run()``."""

    def __init__(
        self,
        config: SynthConfig,
        runner: EpisodeRunner,
        agents: Agents,
        *,
        work_dir: Path,
        output: Path,
        held_out: list[Path] | None = None,
        progress: Progress | None = None,
        config_text: str | None = None,
    ) -> None:
        self.config = config
        self.runner = runner
        self.agents = agents
        self.work = Path(work_dir)
        self.output = Path(output)
        self.held_out = [*config.decontamination.sets, *(held_out or [])]
        self.progress = progress or _Quiet()
        self.config_text = config_text or yaml.safe_dump(
            config.model_dump(mode="json", exclude_none=True), sort_keys=False
        )
        self.seconds: dict[str, float] = {}
        self.episodes = 0
        self.held_out_count = 0
        self.max_overlap = 0.0

    # -- set-up ----------------------------------------------------------------------
    def _open_work(self) -> Journal:
        self.work.mkdir(parents=True, exist_ok=True)
        marker = self.work / "run.json"
        digest = self.config.digest()
        if marker.exists():
            found = json.loads(marker.read_text()).get("config_digest")
            if found != digest:
                raise WorkDirError(
                    f"{self.work} holds a run of another config (digest {found}, this one "
                    f"{digest}); delete it to start over, or pass another work directory."
                )
        else:
            marker.write_text(json.dumps({"config_digest": digest, "name": self.config.name}))
        for sub in ("candidates", "trajectories"):
            (self.work / sub).mkdir(exist_ok=True)
        return Journal(self.work / "journal.jsonl")

    # -- the run ---------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """Run every stage; return the manifest written with the dataset."""
        journal = self._open_work()
        try:
            return await self._run(journal)
        finally:
            journal.close()

    async def _run(self, j: Journal) -> dict[str, Any]:
        candidates = plan(self.config)
        alive = self._generate(j, candidates)
        alive = self._decontaminate(j, alive)
        alive = self._dedup(j, alive)
        alive = await self._episodes(j, "verify", alive, self._verify_one)
        alive = await self._episodes(j, "trajectory", alive, self._trajectory_one)
        alive = self._filter(j, alive)
        if self.config.filters.replay:
            alive = await self._episodes(j, "replay", alive, self._replay_one)
        chosen, proportions = self._mix(j, alive)
        return self._write(j, candidates, chosen, proportions)

    def _timed(self, name: str, started: float, kept: int, rejected: int) -> None:
        self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 3)
        self.progress.end(name, kept, rejected, self.seconds[name])

    def _generate(self, j: Journal, candidates: list[Candidate]) -> list[Candidate]:
        started = time.monotonic()
        done = sum(j.get("generate", c.id) is not None for c in candidates)
        self.progress.stage("generate", len(candidates), done)
        alive: list[Candidate] = []
        for c in candidates:
            rec = j.get("generate", c.id)
            task_dir = self.work / "candidates" / c.id
            if rec is not None and (not rec["ok"] or task_dir.is_dir()):
                if rec["ok"]:
                    alive.append(c)
                continue
            try:
                draft = draft_for(c.family, c.seed, c.difficulty)
                render_task(
                    draft,
                    task_dir,
                    family=c.family,
                    category=c.category,
                    difficulty=c.difficulty,
                    seed=c.seed,
                )
            except Exception as exc:
                tb = traceback.format_exc()
                j.put(
                    "generate",
                    c.id,
                    False,
                    f"the generator raised {type(exc).__name__}: {exc}",
                    kind="generator_error",
                    traceback=tb,
                )
                self.progress.advance("generate", c.id, False, f"{type(exc).__name__}: {exc}")
                continue
            j.put("generate", c.id, True, instruction=draft.instruction)
            self.progress.advance("generate", c.id, True, "")
            alive.append(c)
        self._timed("generate", started, len(alive), len(candidates) - len(alive))
        return alive

    def _instruction(self, j: Journal, c: Candidate) -> str:
        rec = j.get("generate", c.id) or {}
        text = rec.get("instruction")
        if text is None:
            text = (self.work / "candidates" / c.id / "instruction.md").read_text()
        return str(text)

    def _decontaminate(self, j: Journal, alive: list[Candidate]) -> list[Candidate]:
        started = time.monotonic()
        self.progress.stage("decontaminate", len(alive), 0)
        cfg = self.config.decontamination
        index = Contamination(held_out_instructions(self.held_out), cfg.n)
        kept: list[Candidate] = []
        for c in alive:
            score, source = index.overlap(self._instruction(j, c))
            self.max_overlap = max(self.max_overlap, score)
            if score >= cfg.max_overlap and score > 0:
                j.put(
                    "decontaminate",
                    c.id,
                    False,
                    f"{score:.0%} of its {cfg.n}-grams appear in held-out task {source}",
                    kind="contaminated",
                )
                self.progress.advance("decontaminate", c.id, False, str(source))
            else:
                kept.append(c)
                self.progress.advance("decontaminate", c.id, True, "")
        self.held_out_count = index.count
        self._timed("decontaminate", started, len(kept), len(alive) - len(kept))
        return kept

    def _dedup(self, j: Journal, alive: list[Candidate]) -> list[Candidate]:
        started = time.monotonic()
        self.progress.stage("dedup", len(alive), 0)
        cfg = self.config.dedup
        result = deduplicate(
            [self._instruction(j, c) for c in alive],
            threshold=cfg.threshold,
            k=cfg.shingle,
            num_perm=cfg.num_perm,
            bands=cfg.bands,
            seed=self.config.seed,
        )
        for i, (first, how, score) in result.duplicate_of.items():
            j.put(
                "dedup",
                alive[i].id,
                False,
                f"{how} duplicate of {alive[first].id} (similarity {score:.2f})",
                kind=f"duplicate_{how}",
            )
            self.progress.advance("dedup", alive[i].id, False, alive[first].id)
        kept = [alive[i] for i in result.kept]
        self._timed("dedup", started, len(kept), len(alive) - len(kept))
        return kept

    async def _episodes(
        self,
        j: Journal,
        stage: str,
        alive: list[Candidate],
        one: Callable[[Journal, Candidate, Task], Awaitable[None]],
    ) -> list[Candidate]:
        started = time.monotonic()
        todo = [c for c in alive if j.get(stage, c.id) is None]
        self.progress.stage(stage, len(alive), len(alive) - len(todo))
        gate = asyncio.Semaphore(self.config.concurrency)

        async def guarded(c: Candidate) -> None:
            async with gate:
                task = await asyncio.to_thread(load_task, self.work / "candidates" / c.id)
                await one(j, c, task)
                rec = j.records[(stage, c.id)]
                self.progress.advance(stage, c.id, rec["ok"], rec.get("reason") or "")

        await asyncio.gather(*(guarded(c) for c in todo))
        kept = [c for c in alive if (j.get(stage, c.id) or {}).get("ok")]
        self._timed(stage, started, len(kept), len(alive) - len(kept))
        return kept

    async def _episode(self, task: Task, agent: BenchAgent) -> EpisodeResult:
        self.episodes += 1
        return await self.runner.episode(task, agent)

    async def _verify_one(self, j: Journal, c: Candidate, task: Task) -> None:
        oracle = await self._episode(task, self.agents.oracle(task))
        if oracle.error is not None:
            j.put(
                "verify",
                c.id,
                False,
                f"oracle episode failed: {oracle.error}",
                kind="verify_error",
                retry=True,
            )
            return
        if not oracle.passed:
            j.put(
                "verify",
                c.id,
                False,
                f"the oracle solution fails its tests (reward {oracle.reward})",
                kind="oracle_failed",
            )
            return
        nop = await self._episode(task, self.agents.nop())
        if nop.error is not None:
            j.put(
                "verify",
                c.id,
                False,
                f"no-op episode failed: {nop.error}",
                kind="verify_error",
                retry=True,
            )
        elif nop.reward is not None and nop.reward > 0:
            j.put(
                "verify",
                c.id,
                False,
                f"the tests pass with no work done (reward {nop.reward})",
                kind="nop_passed",
            )
        else:
            j.put("verify", c.id, True, oracle_sec=oracle.seconds, nop_sec=nop.seconds)

    async def _trajectory_one(self, j: Journal, c: Candidate, task: Task) -> None:
        rng = random.Random(f"{self.config.seed}|mistake|{c.id}")
        mistake = rng.random() < self.config.mistake_rate
        teacher = None
        if self.config.teacher is not None and rng.random() < self.config.teacher.share:
            teacher = self.agents.teacher()
        source = "expert"
        outcome: EpisodeResult | None = None
        if teacher is not None:
            outcome = await self._episode(task, teacher)
            source = "teacher"
            if not outcome.passed:
                j.put("teacher", c.id, False, outcome.error or f"reward {outcome.reward}")
                outcome = None
        if outcome is None:
            source = "expert"
            draft = draft_for(c.family, c.seed, c.difficulty)
            run = ExpertRun(
                draft.expert(),
                mistake=mistake,
                mistake_after=rng.randrange(3),
                mistakes=list(draft.mistakes),
                rng=rng,
            )
            outcome = await self._episode(task, self.agents.expert(task, run))
        if outcome.error is not None or outcome.trajectory is None:
            j.put(
                "trajectory",
                c.id,
                False,
                f"the {source} episode failed: {outcome.error}",
                kind="trajectory_error",
                retry=True,
            )
            return
        if not outcome.passed:
            j.put(
                "trajectory",
                c.id,
                False,
                f"the {source} did not solve it (reward {outcome.reward})",
                kind="expert_failed",
            )
            return
        t = outcome.trajectory
        t.task_id = c.id
        t.extra["synth"] = {
            **c.attrs(),
            "seed": c.seed,
            "source": source,
            "multi_turn": c.multi_turn,
            "mistakes": sum(s.mark is StepMark.MISTAKE for s in t.steps),
        }
        write_jsonl(self.work / "trajectories" / f"{c.id}.jsonl", [t])
        j.put("trajectory", c.id, True, source=source)

    def _trajectory(self, c: Candidate) -> Trajectory:
        return next(iter(read_jsonl(self.work / "trajectories" / f"{c.id}.jsonl")))

    def _filter(self, j: Journal, alive: list[Candidate]) -> list[Candidate]:
        started = time.monotonic()
        self.progress.stage("filter", len(alive), 0)
        kept = []
        for c in alive:
            reason = heuristic_reason(self._trajectory(c), self.config.filters)
            if reason is None:
                kept.append(c)
                j.put("filter", c.id, True)
            else:
                j.put("filter", c.id, False, reason, kind="heuristic")
            self.progress.advance("filter", c.id, reason is None, reason or "")
        self._timed("filter", started, len(kept), len(alive) - len(kept))
        return kept

    async def _replay_one(self, j: Journal, c: Candidate, task: Task) -> None:
        recorded = self._trajectory(c)
        outcome = await self._episode(task, self.agents.replay(recorded))
        if outcome.error is not None:
            j.put(
                "replay",
                c.id,
                False,
                f"the replay episode failed: {outcome.error}",
                kind="replay_error",
                retry=True,
            )
        elif outcome.reward != recorded.reward:
            j.put(
                "replay",
                c.id,
                False,
                f"replayed, the calls reach reward {outcome.reward}, not {recorded.reward}",
                kind="replay_mismatch",
            )
        else:
            j.put("replay", c.id, True)

    def _mix(self, j: Journal, alive: list[Candidate]) -> tuple[list[Candidate], dict[str, Any]]:
        started = time.monotonic()
        self.progress.stage("mix", len(alive), 0)
        declared = {
            dim: shares
            for dim, shares in self.config.mix.model_dump().items()
            if shares is not None
        }
        picked, report = mix(
            [c.attrs() for c in alive], declared, self.config.target, self.config.seed
        )
        chosen = [alive[i] for i in picked]
        left = set(range(len(alive))) - set(picked)
        for i in sorted(left):
            j.put(
                "mix",
                alive[i].id,
                False,
                "not needed to fill the declared proportions",
                kind="not_selected",
            )
        self._timed("mix", started, len(chosen), len(left))
        return chosen, report

    def _write(
        self,
        j: Journal,
        candidates: list[Candidate],
        chosen: list[Candidate],
        proportions: dict[str, Any],
    ) -> dict[str, Any]:
        started = time.monotonic()
        self.progress.stage("write", len(chosen), 0)
        rejections: Counter[str] = Counter()
        rejected: list[dict[str, Any]] = []
        ids = {c.id for c in candidates}
        for (stage, item), r in sorted(j.records.items()):
            if item in ids and stage in STAGES and not r["ok"]:
                rejections[f"{stage}:{r.get('kind', 'rejected')}"] += 1
                rejected.append({"id": item, "stage": stage, "reason": r["reason"]})
        counts = self._stage_counts(j, candidates, chosen)
        tasks = [
            {**c.attrs(), "id": c.id, "seed": c.seed, "multi_turn": c.multi_turn} for c in chosen
        ]
        trajectories = [self._trajectory(c) for c in chosen]
        for entry, t in zip(tasks, trajectories, strict=True):
            entry["mistakes"] = t.extra.get("synth", {}).get("mistakes", 0)
            entry["source"] = t.extra.get("synth", {}).get("source", "expert")
        manifest = {
            "name": self.config.name,
            "seed": self.config.seed,
            "config_digest": self.config.digest(),
            "target": self.config.target,
            "counts": counts,
            "rejections": dict(sorted(rejections.items())),
            "proportions": proportions,
            "decontamination": {
                "held_out_sets": [str(p) for p in self.held_out],
                "held_out_tasks": self.held_out_count,
                "n": self.config.decontamination.n,
                "max_overlap_seen": round(self.max_overlap, 4),
            },
            "tasks": tasks,
            "rejected": sorted(rejected, key=lambda r: (r["stage"], r["id"])),
        }
        digests = write_dataset(
            self.output,
            [(c.id, self.work / "candidates" / c.id) for c in chosen],
            trajectories,
            manifest,
            self.config_text,
        )
        manifest["digests"] = digests
        self._timed("write", started, len(chosen), 0)
        manifest["run"] = {"seconds": dict(self.seconds), "episodes": self.episodes}
        (self.work / "last-run.json").write_text(json.dumps(manifest["run"], indent=2))
        return manifest

    @staticmethod
    def _stage_counts(
        j: Journal, candidates: list[Candidate], chosen: list[Candidate]
    ) -> dict[str, dict[str, int]]:
        """Per stage: candidates that entered, were kept, were rejected."""
        out: dict[str, dict[str, int]] = {}
        entering = len(candidates)
        for stage in STAGES[:-1]:
            recs = [j.records.get((stage, c.id)) for c in candidates]
            rejected = sum(1 for r in recs if r is not None and not r["ok"])
            if stage == "mix":
                out[stage] = {
                    "in": entering,
                    "kept": len(chosen),
                    "rejected": entering - len(chosen),
                }
                break
            out[stage] = {"in": entering, "kept": entering - rejected, "rejected": rejected}
            entering -= rejected
        return out
