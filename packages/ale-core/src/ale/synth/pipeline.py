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
import json
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import yaml

from ale.agents import BenchAgent
from ale.episode import EpisodeResult, EpisodeRunner
from ale.synth.config import SynthConfig
from ale.synth.dataset import write_dataset
from ale.synth.dedup import deduplicate
from ale.synth.episodes import Agents, EpisodeStages, saved_trajectory
from ale.synth.family import draft_for
from ale.synth.filters import Contamination, held_out_instructions, heuristic_reason
from ale.synth.journal import Journal
from ale.synth.mix import mix
from ale.synth.plan import Candidate, plan
from ale.synth.render import render_task
from ale.task import Task, load_task

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
        stages = EpisodeStages(self.config, self.agents, self._episode, self.work)
        alive = await self._episodes(j, "verify", alive, stages.verify)
        alive = await self._episodes(j, "trajectory", alive, stages.trajectory)
        alive = self._filter(j, alive)
        if self.config.filters.replay:
            alive = await self._episodes(j, "replay", alive, stages.replay)
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

    def _filter(self, j: Journal, alive: list[Candidate]) -> list[Candidate]:
        started = time.monotonic()
        self.progress.stage("filter", len(alive), 0)
        kept = []
        for c in alive:
            reason = heuristic_reason(saved_trajectory(self.work, c), self.config.filters)
            if reason is None:
                kept.append(c)
                j.put("filter", c.id, True)
            else:
                j.put("filter", c.id, False, reason, kind="heuristic")
            self.progress.advance("filter", c.id, reason is None, reason or "")
        self._timed("filter", started, len(kept), len(alive) - len(kept))
        return kept

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
        trajectories = [saved_trajectory(self.work, c) for c in chosen]
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
