"""Chunk-level initialised resampling: replaying an expert's prefix, anchor schedules, masks."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ale.chunking import num_chunks, token_view
from ale.trajectory import AgentInfo, Role, Step, Trajectory
from iflow.models.tiny import build_tiny_model
from roll.config import ResampleConfig
from roll.envs import GuessEnv, make_env
from roll.errors import ConfigError, RollError
from roll.generation import Generation, HFBackend, SamplingParams
from roll.resample import (
    ParallelAnchors,
    SequentialRollback,
    expert_actions,
    expert_observations,
    expert_opening,
    imitated_groups,
    needs_imitation,
    prefix_token_mask,
)
from roll.rollout import EpisodeRequest, RolloutEngine


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> HFBackend:
    path: Path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    return HFBackend.from_path(path, device="cpu")


@pytest.fixture(scope="module")
def tokenizer(hf: HFBackend) -> Any:
    return hf.tokenizer


class Scripted:
    """Answers each prompt with ``reply(decoded prompt)`` and the EOS."""

    name = "scripted"
    policy_version = 0

    def __init__(self, tokenizer: Any, reply: Callable[[str], str]) -> None:
        self.tokenizer, self.reply = tokenizer, reply

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            text = self.reply(self.tokenizer.decode(prompt, skip_special_tokens=False))
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            ids = [*ids, self.tokenizer.eos_token_id]
            out.append(Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def bisect(prompt: str) -> str:
    """Binary search over [1, 10] from the guesses and hints in the prompt."""
    guesses = re.findall(r"<\|im_start\|>assistant\n(\d+)<\|im_end\|>", prompt)
    hints = re.findall(r"<\|im_start\|>user\n(higher|lower)<\|im_end\|>", prompt)
    low, high = 1, 10
    for guess, hint in zip(guesses, hints, strict=True):
        low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
    return str((low + high) // 2)


def echo(prompt: str) -> str:
    return re.findall(r"Word \d+ of \d+: (\S+?)<\|im_end\|>", prompt)[-1]


GUESS_OPENING = (
    "I am thinking of a whole number from 1 to 10. Guess it: reply with one number. "
    "After a wrong guess I say 'higher' or 'lower'."
)


def expert(*messages: tuple[str, str]) -> Trajectory:
    """A message-level expert trajectory (no token ids), as a person would write one."""
    steps = [Step(role=Role(role), content=content) for role, content in messages]
    return Trajectory(
        agent=AgentInfo(name="expert"),
        model="expert-model",
        episode_id="expert-episode",
        steps=steps,
        reward=1.0,
    )


def guess_expert(first_hint: str = "higher") -> Trajectory:
    """Guess with seed 0 (the secret is 7): 5, higher, 8, lower, 7."""
    return expert(
        ("user", GUESS_OPENING),
        ("assistant", "5"),
        ("user", first_hint),
        ("assistant", "8"),
        ("user", "lower"),
        ("assistant", "7"),
    )


def run(engine: RolloutEngine, *requests: EpisodeRequest) -> list[Trajectory]:
    return engine.run(list(requests))


def test_expert_helpers() -> None:
    trajectory = guess_expert()
    assert expert_actions(trajectory) == ["5", "8", "7"]
    assert expert_observations(trajectory) == ["higher", "lower", None]
    assert expert_opening(trajectory) == [{"role": "user", "content": GUESS_OPENING}]
    assert GuessEnv().reset(0) == expert_opening(trajectory)


@pytest.mark.parametrize("anchor", [0, 1, 2])
def test_replay_then_policy(tokenizer: Any, anchor: int) -> None:
    engine = RolloutEngine(
        Scripted(tokenizer, bisect), tokenizer, SamplingParams(max_new_tokens=8), max_seq_len=1024
    )
    prefix = guess_expert()
    (trajectory,) = run(
        engine, EpisodeRequest(make_env("guess"), seed=0, prefix=prefix, anchor=anchor)
    )
    assert trajectory.reward == 1.0 and trajectory.failure_mode is None
    assert trajectory.extra["roll"]["anchor"] == anchor
    assert trajectory.episode_id == prefix.episode_id
    assistant = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
    replayed, sampled = assistant[:anchor], assistant[anchor:]
    assert [s.content for s in replayed] == ["5", "8"][:anchor]
    for step in replayed:
        assert step.prefix and "roll" not in step.extra
        assert step.logprobs is None and step.policy_version is None
        assert step.model == "expert-model"
        assert tokenizer.decode(step.token_ids) == step.content + "<|im_end|>"
    assert all(s.logprobs is not None and not s.prefix for s in sampled)
    assert trajectory.extra["roll"]["finish_reasons"][:anchor] == ["prefix"] * anchor

    view = token_view(trajectory)  # the replayed turns are chunks like the sampled ones
    assert num_chunks(view.policy_mask) == len(assistant) == trajectory.extra["roll"]["turns"]
    text = tokenizer.decode(view.token_ids, skip_special_tokens=False)
    chat = [{"role": s.role.value, "content": s.content} for s in trajectory.steps]
    assert text + "\n" == tokenizer.apply_chat_template(chat, tokenize=False)

    mask = prefix_token_mask(trajectory)
    assert len(mask) == len(view.token_ids)
    assert sum(mask) == sum(len(s.token_ids or []) for s in replayed)
    for i, (in_prefix, policy, logprob) in enumerate(
        zip(mask, view.policy_mask, view.logprobs, strict=True)
    ):
        assert in_prefix == (policy and logprob is None), i
        if in_prefix:
            assert trajectory.steps[view.step_index[i]] in replayed


def test_replayed_rewards_count(tokenizer: Any) -> None:
    # echo seed 0 shows path, items, dog; the expert misspelt the second word
    prefix = expert(
        ("system", "Repeat each word I show you exactly, with nothing else."),
        ("user", "Word 1 of 3: path"),
        ("assistant", "path"),
        ("user", "Word 2 of 3: items"),
        ("assistant", "itemz"),
        ("user", "Word 3 of 3: dog"),
        ("assistant", "dog"),
    )
    engine = RolloutEngine(
        Scripted(tokenizer, echo), tokenizer, SamplingParams(max_new_tokens=8), max_seq_len=1024
    )
    (trajectory,) = run(engine, EpisodeRequest(make_env("echo"), seed=0, prefix=prefix, anchor=2))
    assert [s.reward for s in trajectory.steps if s.role is Role.ASSISTANT] == pytest.approx(
        [1 / 3, 0.0, 1 / 3]
    )
    assert trajectory.reward == pytest.approx(2 / 3)


def test_prefix_requests_batch_with_fresh_ones_on_a_tiny_model(hf: HFBackend) -> None:
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=0)
    engine = RolloutEngine(hf, hf.tokenizer, params, max_seq_len=1024)
    prefixed, fresh = run(
        engine,
        EpisodeRequest(make_env("guess", max_turns=4), seed=0, prefix=guess_expert(), anchor=2),
        EpisodeRequest(make_env("guess", max_turns=4), seed=0),
    )
    for trajectory in (prefixed, fresh):
        view = token_view(trajectory)
        turns = trajectory.extra["roll"]["turns"]
        assert num_chunks(view.policy_mask) == turns
    assert prefixed.extra["roll"]["turns"] <= 4 and prefixed.extra["roll"]["anchor"] == 2
    mask = prefix_token_mask(prefixed)
    view = token_view(prefixed)
    assert any(mask) and all(lp is None for lp, m in zip(view.logprobs, mask, strict=True) if m)
    assert not any(prefix_token_mask(fresh))


def test_replay_mismatches_are_errors(tokenizer: Any) -> None:
    engine = RolloutEngine(
        Scripted(tokenizer, bisect), tokenizer, SamplingParams(max_new_tokens=8), max_seq_len=1024
    )
    with pytest.raises(RollError, match=r"at turn 1 .*'higher'.*'lower'"):
        run(
            engine,
            EpisodeRequest(make_env("guess"), seed=0, prefix=guess_expert("lower"), anchor=2),
        )
    with pytest.raises(RollError, match="turn 0"):
        run(
            engine, EpisodeRequest(make_env("guess", n=20), seed=0, prefix=guess_expert(), anchor=1)
        )
    five = next(s for s in range(100) if (env := GuessEnv()).reset(s) and env.secret == 5)
    with pytest.raises(RollError, match="ended the episode at turn 1"):
        run(engine, EpisodeRequest(make_env("guess"), seed=five, prefix=guess_expert(), anchor=2))
    for anchor in (-1, 3):
        with pytest.raises(ConfigError, match="outside"):
            run(
                engine,
                EpisodeRequest(make_env("guess"), seed=0, prefix=guess_expert(), anchor=anchor),
            )
    # anchor 0 replays nothing but still checks the opening, and the episode is the policy's
    (trajectory,) = run(
        engine, EpisodeRequest(make_env("guess"), seed=0, prefix=guess_expert(), anchor=0)
    )
    assert not any(prefix_token_mask(trajectory))


def test_sequential_rollback() -> None:
    schedule = SequentialRollback(4)
    assert schedule.current == 3
    assert schedule.update([0.0, 0.0, 1.0, 0.0]) == 3  # a quarter succeeded: stay
    assert schedule.update([1.0, 1.0, 0.0, 0.0]) == 2  # half did: one chunk back
    assert schedule.update([0.5]) == 1
    assert schedule.update([1.0]) == 0
    assert schedule.update([1.0]) == 0 and schedule.current == 0
    strict = SequentialRollback(2, threshold=1.0)
    assert strict.update([1.0, 0.0]) == 1 and strict.update([1.0, 1.0]) == 0
    assert SequentialRollback(1).current == 0
    restored = SequentialRollback(5)
    restored.current = 2
    assert restored.update([1.0]) == 1
    with pytest.raises(ConfigError):
        restored.current = 5
    with pytest.raises(ConfigError):
        SequentialRollback(0)
    with pytest.raises(ConfigError):
        SequentialRollback(3, threshold=0.0)
    with pytest.raises(RollError):
        SequentialRollback(3).update([])


def test_parallel_anchors() -> None:
    assert ParallelAnchors(5, 3).anchors == (0, 2, 4)
    assert ParallelAnchors(10, 4).anchors == (0, 3, 6, 9)
    assert ParallelAnchors(4, 3).anchors == (0, 2, 3)  # 1.5 rounds up
    assert ParallelAnchors(7, 2).anchors == (0, 6)
    assert ParallelAnchors(7, 1).anchors == (6,)
    assert ParallelAnchors(3, 5).anchors == (0, 1, 2)  # distinct: at most K
    assert ParallelAnchors(1, 3).anchors == (0,)
    for k in range(1, 12):
        for count in range(1, 14):
            anchors = ParallelAnchors(k, count).anchors
            assert len(anchors) == min(count, k) and list(anchors) == sorted(set(anchors))
            assert anchors[-1] == k - 1 and (count == 1 or anchors[0] == 0)
    with pytest.raises(ConfigError):
        ParallelAnchors(3, 0)


def test_needs_imitation() -> None:
    assert needs_imitation([0.0, 0.0, -1.0])
    assert not needs_imitation([0.0, 0.25])
    assert needs_imitation([])


def test_needs_imitation_with_a_share_takes_groups_with_few_positives() -> None:
    """`resample.imitation_share`: a group whose share of positive episodes is at most the
    share gets the term too (0.25 with groups of 4: at most one success); 0 is the paper's
    rule, a group with no positive."""
    one_of_four = [1.0, 0.0, 0.0, 0.0]
    assert not needs_imitation(one_of_four)
    assert needs_imitation(one_of_four, share=0.25)
    assert not needs_imitation([1.0, 1.0, 0.0, 0.0], share=0.25)
    assert needs_imitation([0.0, 0.0, 0.0, 0.0], share=0.25)
    assert needs_imitation([1.0, 1.0, 0.0, 0.0], share=0.5)
    assert not needs_imitation([0.0, 0.25], share=0.0)
    groups = {"none": [0.0] * 4, "one": one_of_four, "two": [1.0, 1.0, 0.0, 0.0]}
    assert imitated_groups(groups, ResampleConfig()) == {"none"}
    assert imitated_groups(groups, ResampleConfig(imitation_share=0.25)) == {"none", "one"}


def test_self_sampling_takes_a_first_success_of_a_task_without_an_expert(tmp_path: Path) -> None:
    """`resample.self_experts` with tasks: the policy's first successful trajectory of a task
    that has no expert becomes that task's expert (its groups then start from its turns);
    failures, and tasks that have one, change nothing. Misused, one sentence each."""
    from pydantic import ValidationError

    from roll.config import TrainConfig
    from roll.resample import Experts

    base = {"model": {"path": str(tmp_path)}, "tasks": {"dataset": str(tmp_path)}}
    resample = {"self_experts": True, "mode": "parallel", "anchors": 3}
    config = TrainConfig.model_validate({**base, "resample": resample})
    experts = Experts(config)
    assert experts.trajectories == [] and experts.start("t1", 0) is None

    def episode(task: str, reward: float, turns: int) -> Trajectory:
        steps = [Step(role=Role.USER, content="do it")]
        steps += [Step(role=Role.ASSISTANT, content=f"turn {i}") for i in range(turns)]
        return Trajectory(agent=AgentInfo(name="iflow"), task_id=task, steps=steps, reward=reward)

    taken = experts.learn_from(
        [episode("t1", 0.0, 3), episode("t1", 1.0, 4), episode("t1", 1.0, 2)]
    )
    assert taken == 1 and experts.learn_from([episode("t2", 0.0, 3)]) == 0
    assert experts.by_task == {"t1": 0} and len(experts.trajectories[0].steps) == 5
    assert [experts.start("t1", n) for n in range(3)] == [(0, 0), (0, 2), (0, 3)]
    for bad, words in (
        ({"resample": {}}, "resample: needs experts:"),
        ({"env": {"name": "guess"}, "resample": {"self_experts": True}}, "is for tasks:"),
    ):
        with pytest.raises(ValidationError, match=words):
            TrainConfig.model_validate({"model": {"path": str(tmp_path)}, **bad})
    off = TrainConfig.model_validate({**base, "resample": {"experts": str(tmp_path / "e.jsonl")}})
    (tmp_path / "e.jsonl").write_text(episode("t1", 1.0, 2).model_dump_json() + "\n")
    assert Experts(off).learn_from([episode("t2", 1.0, 2)]) == 0  # self-sampling is off


def test_a_group_from_the_start_without_a_success_imitates_its_whole_expert(
    tmp_path: Path, tokenizer: Any
) -> None:
    """`resample.mode: start` with tasks: groups run from the beginning (anchor 0); one that
    gets no positive episode imitates the expert's whole trajectory, rendered as the agent
    sees the task (the episode's own prompt, then the expert's turns as targets), in a group
    of its own with no RL token; a group that succeeded, or whose rendering opens with
    another prompt, gets none. Misused (environments), one sentence."""
    from pydantic import ValidationError

    from roll.config import TrainConfig
    from roll.resample import Experts, whole_expert_samples
    from roll.train import expert_renderer

    def trajectory(task: str, command: str, reward: float, group: str) -> Trajectory:
        return Trajectory(
            agent=AgentInfo(name="iflow"),
            task_id=task,
            trajectory_id=f"{task}-{group}-{command}",
            group_id=group,
            reward=reward,
            steps=[
                Step(role=Role.SYSTEM, content="You are iflow (working directory /app)."),
                Step(role=Role.USER, content=f"Task {task}: sort the lines."),
                Step(role=Role.ASSISTANT, content=command),
            ],
        )

    expert = trajectory("t1", "sort in.txt > out.txt", 1.0, "expert")
    (tmp_path / "experts.jsonl").write_text(expert.model_dump_json() + "\n")
    base = {"model": {"path": str(tmp_path)}, "tasks": {"dataset": str(tmp_path)}}
    config = TrainConfig.model_validate(
        {**base, "resample": {"experts": str(tmp_path / "experts.jsonl"), "mode": "start"}}
    )
    experts = Experts(config)
    assert [experts.start("t1", n) for n in range(3)] == [(0, 0)] * 3  # always the beginning
    render = expert_renderer(config, tokenizer)
    assert render is not None

    def episode(command: str, reward: float, group: str) -> Any:
        shown = render(trajectory("t1", command, reward, group))  # as the policy sampled it
        assert shown is not None
        shown.rl_mask, shown.expert_mask = shown.expert_mask, [False] * len(shown)
        shown.reward, shown.group = reward, group
        return shown

    failed = [episode("sort -u in.txt", 0.0, "g-fail"), episode("uniq in.txt", 0.0, "g-fail")]
    solved = [episode("sort in.txt", 1.0, "g-ok"), episode("head in.txt", 0.0, "g-ok")]
    for group in ("g-fail", "g-ok", "g-other"):
        experts.group_expert[group] = 0
    other = episode("sort -u in.txt", 0.0, "g-other")
    other.input_ids = [other.input_ids[0] + 1, *other.input_ids[1:]]  # another prompt
    imitate = {"g-fail", "g-other"}
    added, unmatched = whole_expert_samples([*failed, *solved, other], imitate, experts, render)
    assert unmatched == 1 and len(added) == 1 and imitate == {"g-fail", "g-other", "g-fail/expert"}
    whole = added[0]
    assert whole.group == "g-fail/expert" and whole.reward == 0.0 and not any(whole.rl_mask)
    opening = whole.expert_mask.index(True)
    assert whole.input_ids[:opening] == failed[0].input_ids[:opening]
    targets = [t for t, m in zip(whole.input_ids, whole.expert_mask, strict=True) if m]
    assert "sort in.txt > out.txt" in tokenizer.decode(targets)
    with pytest.raises(ValidationError, match=r"resample.mode: start .* needs tasks:"):
        TrainConfig.model_validate(
            {"model": {"path": str(tmp_path)}, "env": {"name": "guess"},
             "resample": {"experts": str(tmp_path / "experts.jsonl"), "mode": "start"}}
        )  # fmt: skip
