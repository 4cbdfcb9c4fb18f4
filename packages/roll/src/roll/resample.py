"""Chunk-level initialised resampling (IPA): start the policy from an expert's prefix.

An expert trajectory of a task (message level: its assistant steps' ``content`` are the
actions; token ids are not needed) has K assistant turns, one interaction chunk each. A
rollout at *anchor* k replays the expert's first k actions through the same deterministic
environment (``env.reset(seed)``, then ``env.step`` per action) and lets the policy act from
there: anchor K-1 leaves only the last chunk to the policy, anchor 0 the whole task. The
replay itself is done by :class:`roll.rollout.RolloutEngine` for an
:class:`~roll.rollout.EpisodeRequest` with ``prefix`` and ``anchor``: the replayed assistant
steps carry token ids (tokenised with the same template scheme as sampled turns, so
:func:`ale.chunking.token_view` accepts the trajectory) but no log-probs, and are marked
``prefix`` (:attr:`ale.trajectory.Step.prefix`); the trajectory records
``extra["roll"]["anchor"]``.

Two schedules choose anchors: :class:`SequentialRollback` starts at the last chunk and moves
the anchor back one chunk whenever the group at the current anchor succeeds often enough;
:class:`ParallelAnchors` starts rollouts at several anchors spread over the trajectory in the
same step (``start``: every group from the beginning, the experts kept for imitation alone).
A group with no positive reward (:func:`needs_imitation`; with ``imitation_share``, also one
with few) gets an imitation (NLL) term on the expert's replayed tokens, which
:func:`prefix_token_mask` marks; a group of tasks that started from the beginning has none,
and imitates the expert's whole trajectory instead (:func:`whole_expert_samples`), rendered
as the agent sees the task.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence

from ale.chunking import Loss, loss_of, token_view
from ale.jsonl import read_jsonl
from ale.trajectory import AgentInfo, Role, Step, Trajectory
from roll.algo.batch import Sample
from roll.config import ResampleConfig, TrainConfig
from roll.envs.registry import make_env
from roll.errors import ConfigError, RollError


def expert_actions(trajectory: Trajectory) -> list[str]:
    """The expert's actions: the ``content`` of each assistant step, in order."""
    return [s.content for s in trajectory.steps if s.role is Role.ASSISTANT]


def expert_opening(trajectory: Trajectory) -> list[dict[str, str]]:
    """The messages before the first assistant step (``{"role", "content"}``)."""
    opening: list[dict[str, str]] = []
    for step in trajectory.steps:
        if step.role is Role.ASSISTANT:
            break
        opening.append({"role": step.role.value, "content": _text(step)})
    return opening


def expert_observations(trajectory: Trajectory) -> list[str | None]:
    """For each assistant turn, the observation recorded after it (the text of the user/tool
    steps before the next assistant step, joined by newlines), or None when none was."""
    observations: list[str | None] = []
    pending: list[str] | None = None
    for step in trajectory.steps:
        if step.role is Role.ASSISTANT:
            if pending is not None:
                observations.append("\n".join(pending) if pending else None)
            pending = []
        elif pending is not None and step.role is not Role.SYSTEM:
            pending.append(_text(step))
    if pending is not None:
        observations.append("\n".join(pending) if pending else None)
    return observations


def _text(step: Step) -> str:
    if step.role is Role.TOOL and step.tool_results:
        return "\n".join(result.content for result in step.tool_results)
    return step.content


def _positive_share(group_rewards: Sequence[float]) -> float:
    if not group_rewards:
        raise RollError("a group needs at least one reward; pass the rewards of its rollouts")
    return sum(1 for r in group_rewards if r > 0) / len(group_rewards)


def needs_imitation(group_rewards: Sequence[float], share: float = 0.0) -> bool:
    """True when no rollout of the group got a positive reward (the paper's rule): learn from
    the expert's prefix by imitation, since the group's advantages carry no signal. With
    ``share`` above 0, also when the group's share of positive rollouts is at most ``share``
    (0.25 with groups of 4: at most one success), where the advantages carry little."""
    positives = sum(1 for r in group_rewards if r > 0)
    return positives == 0 or positives <= share * len(group_rewards)


def imitated_groups(
    groups: Mapping[Hashable, Sequence[float]], config: ResampleConfig
) -> set[Hashable]:
    """The groups (their rewards by group) that get the imitation term under ``config``:
    :func:`needs_imitation` at its ``imitation_share``."""
    return {g for g, rewards in groups.items() if needs_imitation(rewards, config.imitation_share)}


def prefix_token_mask(trajectory: Trajectory) -> list[bool]:
    """Over :func:`ale.chunking.token_view` positions: True on the replayed expert's assistant
    tokens (:attr:`~ale.trajectory.Step.prefix`, as :func:`ale.chunking.loss_of` decides),
    where the imitation term applies."""
    view = token_view(trajectory)
    prefix_steps = {
        index
        for index, step in enumerate(trajectory.steps)
        if step.role is Role.ASSISTANT and loss_of(step) is Loss.IMITATION
    }
    return [owner in prefix_steps for owner in view.step_index]


def _check_chunks(num_chunks: int) -> None:
    if num_chunks < 1:
        raise ConfigError(
            f"num_chunks must be at least 1 (the expert's assistant turns), got {num_chunks}"
        )


class SequentialRollback:
    """One anchor at a time, from the last chunk back to the first.

    Starts at anchor K-1 (the policy plays only the expert's last chunk); each
    :meth:`update` with the rewards of the group at the current anchor moves the anchor one
    chunk back when the share of positive rewards reaches ``threshold``, and stays at 0.
    """

    def __init__(self, num_chunks: int, *, threshold: float = 0.5) -> None:
        _check_chunks(num_chunks)
        if not 0.0 < threshold <= 1.0:
            raise ConfigError(f"threshold must be in (0, 1], got {threshold}")
        self.num_chunks = num_chunks
        self.threshold = threshold
        self._current = num_chunks - 1

    @property
    def current(self) -> int:
        """The anchor to start rollouts from now (settable, to restore a saved schedule)."""
        return self._current

    @current.setter
    def current(self, anchor: int) -> None:
        if not 0 <= anchor < self.num_chunks:
            raise ConfigError(f"anchor {anchor} is outside [0, {self.num_chunks - 1}]")
        self._current = anchor

    def update(self, group_rewards: Sequence[float]) -> int:
        """Record the rewards of the group run at :attr:`current`; returns the next anchor."""
        if _positive_share(group_rewards) >= self.threshold and self._current > 0:
            self._current -= 1
        return self._current


class ParallelAnchors:
    """``count`` anchors spread evenly over [0, K-1], all rolled out in the same step.

    With ``count >= 2`` the anchors include 0 and K-1; ``count == 1`` gives K-1. Anchors are
    distinct, so there are ``min(count, K)`` of them.
    """

    def __init__(self, num_chunks: int, count: int) -> None:
        _check_chunks(num_chunks)
        if count < 1:
            raise ConfigError(f"count must be at least 1, got {count}")
        self.num_chunks = num_chunks
        self.count = count
        last = num_chunks - 1
        if count == 1:
            spread = [last]
        else:
            # i * last / (count - 1), rounded half up in integers
            spread = [(2 * i * last + count - 1) // (2 * (count - 1)) for i in range(count)]
        self._anchors = tuple(sorted(set(spread)))

    @property
    def anchors(self) -> tuple[int, ...]:
        """The anchors, ascending."""
        return self._anchors


def record_experts(env_name: str, seeds: Sequence[int], **env_kwargs: object) -> list[Trajectory]:
    """Message-level expert trajectories of a built-in environment, one per seed.

    The environment must have ``expert_action()`` (every built-in has); each trajectory's
    ``task_id`` is ``ENV_TASK_ID/SEED`` and ``extra.roll.env_seed`` the seed, as
    ``roll train``'s ``resample.experts`` expects.
    """
    out: list[Trajectory] = []
    for seed in seeds:
        env = make_env(env_name, **env_kwargs)
        expert = getattr(env, "expert_action", None)
        if expert is None:
            raise ConfigError(
                f"environment {env_name!r} has no expert_action(); record experts another way"
            )
        steps = [Step(role=Role(m["role"]), content=m["content"]) for m in env.reset(seed)]
        reward = 0.0
        for _ in range(env.max_turns):
            action = expert()
            steps.append(Step(role=Role.ASSISTANT, content=action))
            result = env.step(action)
            reward += result.reward
            if result.observation is not None:
                steps.append(Step(role=Role.USER, content=result.observation))
            if result.done:
                break
        out.append(
            Trajectory(
                agent=AgentInfo(name="roll-expert", extra={"env": env_name}),
                task_id=f"{env.task_id}/{seed}",
                steps=steps,
                reward=reward,
                extra={"roll": {"env_seed": seed}},
            )
        )
    return out


class Experts:
    """Expert trajectories for chunk-level initialised resampling, with their anchor state."""

    def __init__(self, config: TrainConfig) -> None:
        assert config.resample is not None
        self.config = config.resample
        path = config.resample.experts
        self.trajectories: list[Trajectory] = []
        self.seeds: list[int] = []
        self.by_task: dict[str, int] = {}
        """The first expert of each task id (tasks: the groups of that task start from it)."""
        self.rollback: list[SequentialRollback] = []
        self.parallel: list[ParallelAnchors] = []
        self.group_expert: dict[str, int] = {}
        """The expert index of each group started from an expert (this step's)."""
        for trajectory in read_jsonl(path, Trajectory) if path is not None else ():
            # in-process environments replay from a seed; tasks, in a sandbox of the task
            self.add(trajectory, seed=config.tasks is None)
        if not self.trajectories and not self.config.self_experts:
            raise ConfigError(f"{path} holds no expert trajectories")

    def add(self, trajectory: Trajectory, *, seed: bool = False) -> int:
        """Take ``trajectory`` as an expert (of its task, if that has none yet); its index."""
        index = len(self.trajectories)
        if seed:
            self.seeds.append(self._seed(trajectory))
        self.trajectories.append(trajectory)
        if trajectory.task_id:
            self.by_task.setdefault(trajectory.task_id, index)
        turns = max(sum(1 for s in trajectory.steps if s.role is Role.ASSISTANT), 1)
        self.rollback.append(SequentialRollback(turns, threshold=self.config.threshold))
        self.parallel.append(ParallelAnchors(turns, self.config.anchors))
        return index

    def learn_from(self, trajectories: Sequence[Trajectory]) -> int:
        """Self-sampling (``resample.self_experts``): a successful trajectory of the policy
        becomes the expert of its task when the task has none; how many were taken."""
        if not self.config.self_experts:
            return 0
        taken = 0
        for trajectory in trajectories:
            task = trajectory.task_id
            if task and task not in self.by_task and (trajectory.reward or 0.0) > 0:
                self.add(trajectory)
                taken += 1
        return taken

    @staticmethod
    def _seed(trajectory: Trajectory) -> int:
        roll = trajectory.extra.get("roll") if isinstance(trajectory.extra, dict) else None
        if isinstance(roll, dict) and isinstance(roll.get("env_seed"), int):
            return int(roll["env_seed"])
        tail = (trajectory.task_id or "").rpartition("/")[2]
        if tail.isdigit():
            return int(tail)
        raise ConfigError(
            f"expert trajectory {trajectory.trajectory_id} does not say its environment seed; "
            "record it as extra.roll.env_seed or end its task_id with /SEED"
        )

    def anchors(self, index: int) -> list[int]:
        if self.config.mode == "start":
            return [0]
        if self.config.mode == "parallel":
            return list(self.parallel[index].anchors)
        return [self.rollback[index].current]

    def start(self, task_id: str, launch: int) -> tuple[int, int] | None:
        """For a group of the task ``task_id`` (the ``launch``-th group started): the expert
        and the anchor it starts from, or None when the task has no expert. In parallel
        mode the task's groups take the anchors in turn; in sequential mode, the current."""
        index = self.by_task.get(task_id)
        if index is None:
            return None
        anchors = self.anchors(index)
        return index, anchors[launch % len(anchors)]

    def state(self) -> list[int]:
        return [r.current for r in self.rollback]

    def load_state(self, anchors: list[int]) -> None:
        for rollback, anchor in zip(self.rollback, anchors, strict=False):
            rollback.current = anchor


def whole_expert_samples(
    samples: Sequence[Sample],
    imitate: set[Hashable],
    experts: Experts,
    render: Callable[[Trajectory], Sample | None],
) -> tuple[list[Sample], int]:
    """For each group in ``imitate`` that started from an expert's anchor 0 (no prefix to
    imitate), the expert's whole trajectory as one more sample of imitation only, in a group
    of its own (so it moves no advantage), and the number of experts left out because their
    rendering could not be matched to the group's episodes (it opens with another prompt or
    tool format, and a term on it would teach the wrong prompt; or no episode spoke).

    ``render`` gives the trajectory's tokens as the policy sees an episode, its assistant
    turns in ``expert_mask``; the new groups are added to ``imitate``."""
    members: dict[Hashable, list[Sample]] = {}
    for sample in samples:
        members.setdefault(sample.group, []).append(sample)
    added: list[Sample] = []
    mismatched = 0
    for group in sorted(imitate & members.keys(), key=str):
        index = experts.group_expert.get(str(group))
        rows = members[group]
        if index is None or any(any(s.expert_mask) for s in rows):
            continue  # no expert, or its prefix already carries the term
        whole = render(experts.trajectories[index])
        if whole is None or not _opens_as(whole, rows):
            mismatched += 1
            continue
        whole.group = f"{group}/expert"
        whole.reward = 0.0
        added.append(whole)
    imitate.update(s.group for s in added)
    return added, mismatched


def _opens_as(expert: Sample, episodes: list[Sample]) -> bool:
    """Whether the expert's tokens before its first target are the prompt of the group's
    episodes (of one that the policy spoke in: the others cannot tell)."""
    spoke = next((e for e in episodes if True in e.rl_mask), None)
    if spoke is None or True not in expert.expert_mask:
        return False
    opening = expert.expert_mask.index(True)
    return opening == spoke.rl_mask.index(True) and (
        expert.input_ids[:opening] == spoke.input_ids[:opening]
    )
