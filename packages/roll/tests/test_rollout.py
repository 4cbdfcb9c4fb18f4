"""The rollout engine: lockstep batching and the token bookkeeping that token_view relies on.

Two backends: roll's HFBackend over a tiny random model built here (real sampling, real
log-probs), and a scripted backend at the GenerationBackend seam that answers each prompt
with a reply computed from its text, so episodes can be steered to each kind of end.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ale.chunking import chunk_spans, num_chunks, token_view
from ale.trajectory import FailureMode, Role, Trajectory
from iflow.models.tiny import build_tiny_model
from roll.envs import make_env
from roll.errors import ConfigError, GenerationError
from roll.generation import Generation, GenerationBackend, HFBackend, SamplingParams
from roll.rollout import EpisodeRequest, RolloutEngine


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> HFBackend:
    path: Path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)
    return HFBackend.from_path(path, device="cpu")


@pytest.fixture(scope="module")
def tokenizer(hf: HFBackend) -> Any:
    return hf.tokenizer


class Scripted:
    """Answers each prompt with ``reply(decoded prompt)``, ended by the EOS (``end="eos"``),
    by another special token (``"pad"``) or by nothing, as if cut off (``"none"``)."""

    name = "scripted"

    def __init__(self, tokenizer: Any, reply: Callable[[str], str], end: str = "eos") -> None:
        self.tokenizer, self.reply, self.end = tokenizer, reply, end
        self.policy_version = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = []
        for prompt in prompts:
            text = self.reply(self.tokenizer.decode(prompt, skip_special_tokens=False))
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            ends = {"eos": [self.tokenizer.eos_token_id], "pad": [self.tokenizer.pad_token_id]}
            ids = (ids + ends.get(self.end, []))[: params.max_new_tokens]
            reason = "length" if self.end == "none" else "stop"
            out.append(Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=reason))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


class Recording:
    """Wraps a backend and keeps every call's prompts, params and generations."""

    def __init__(self, inner: GenerationBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self.policy_version = inner.policy_version
        self.calls: list[tuple[list[list[int]], SamplingParams, list[Generation]]] = []

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        out = self.inner.generate(prompts, params)
        self.calls.append(([list(p) for p in prompts], params, out))
        return out

    def sync_weights(self, model: Any, version: int) -> None:
        self.inner.sync_weights(model, version)

    def close(self) -> None:
        self.inner.close()


def echo_oracle(prompt: str) -> str:
    return re.findall(r"Word \d+ of \d+: (\S+?)<\|im_end\|>", prompt)[-1]


def bisect_oracle(prompt: str) -> str:
    """Binary search over [1, 10] from the guesses and hints in the prompt."""
    guesses = re.findall(r"<\|im_start\|>assistant\n(\d+)<\|im_end\|>", prompt)
    hints = re.findall(r"<\|im_start\|>user\n(higher|lower)<\|im_end\|>", prompt)
    low, high = 1, 10
    for guess, hint in zip(guesses, hints, strict=True):
        low, high = (int(guess) + 1, high) if hint == "higher" else (low, int(guess) - 1)
    return str((low + high) // 2)


def oracle(prompt: str) -> str:
    if "Word" in prompt:
        return echo_oracle(prompt)
    if "What is" in prompt:
        a, op, b = re.search(r"What is (\d+) ([-+*]) (\d+)", prompt).groups()  # type: ignore[union-attr]
        return str(eval(f"{a}{op}{b}"))
    return bisect_oracle(prompt)


def check_tokens(trajectory: Trajectory) -> None:
    """token_view accepts it, one chunk per assistant turn, each chunk the step's sampled ids
    with their log-probs, and no log-prob outside the chunks."""
    view = token_view(trajectory)
    assistant = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
    assert num_chunks(view.policy_mask) == len(assistant) == trajectory.extra["roll"]["turns"]
    for (start, end), step in zip(chunk_spans(view.policy_mask), assistant, strict=True):
        assert view.token_ids[start:end] == step.token_ids
        assert view.logprobs[start:end] == step.logprobs
        assert view.token_ids[:start] == step.prompt_token_ids
    assert all((lp is not None) == m for lp, m in zip(view.logprobs, view.policy_mask, strict=True))


def rendered(tokenizer: Any, trajectory: Trajectory) -> str:
    """The chat template's text of the conversation up to its last assistant turn."""
    last = max(i for i, s in enumerate(trajectory.steps) if s.role is Role.ASSISTANT)
    chat = [{"role": s.role.value, "content": s.content} for s in trajectory.steps[: last + 1]]
    return tokenizer.apply_chat_template(chat, tokenize=False)


def decoded(tokenizer: Any, trajectory: Trajectory) -> str:
    return tokenizer.decode(token_view(trajectory).token_ids, skip_special_tokens=False)


def test_tiny_model_rollouts_keep_sampled_ids_and_batch_in_lockstep(hf: HFBackend) -> None:
    backend = Recording(hf)
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=0)
    engine = RolloutEngine(backend, hf.tokenizer, params, max_seq_len=1024)
    requests = [
        EpisodeRequest(make_env("echo"), seed=0),
        EpisodeRequest(make_env("guess"), seed=0),
        EpisodeRequest(make_env("arithmetic"), seed=0),
        EpisodeRequest(make_env("echo"), seed=1),
        EpisodeRequest(make_env("guess"), seed=1),
    ]
    trajectories = engine.run(requests)
    turns = [t.extra["roll"]["turns"] for t in trajectories]
    assert turns[0] == turns[3] == 3 and turns[2] == 1
    # one generate call per turn, covering every episode still running, in request order
    assert len(backend.calls) == max(turns)
    for j, (prompts, call_params, generations) in enumerate(backend.calls):
        running = [t for t in trajectories if t.extra["roll"]["turns"] > j]
        assert len(prompts) == len(running)
        assert call_params.seed == j  # a fresh seed per call
        for trajectory, prompt, generation in zip(running, prompts, generations, strict=True):
            step = [s for s in trajectory.steps if s.role is Role.ASSISTANT][j]
            assert step.prompt_token_ids == prompt
            assert step.token_ids == generation.token_ids  # kept as sampled
            assert step.logprobs == generation.logprobs
            assert step.policy_version == 0
    for trajectory in trajectories:
        check_tokens(trajectory)
        roll = trajectory.extra["roll"]
        assert len(roll["finish_reasons"]) == roll["turns"]
        steps = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
        for step, after, reason in zip(steps, steps[1:], roll["finish_reasons"], strict=False):
            env_tokens = after.prompt_token_ids[len(step.prompt_token_ids) + len(step.token_ids) :]
            # a reply cut off by max_new_tokens is closed with the template's end of turn
            closes = env_tokens[0] == hf.tokenizer.eos_token_id
            assert closes == (reason == "length")
    assert trajectories[1].failure_mode in (FailureMode.LIMITS_EXCEEDED, None)


def test_decoded_sequence_is_the_template_rendering(tokenizer: Any) -> None:
    engine = RolloutEngine(
        Scripted(tokenizer, oracle), tokenizer, SamplingParams(max_new_tokens=16), max_seq_len=2048
    )
    requests = [
        EpisodeRequest(make_env("echo", rounds=4), seed=5),
        EpisodeRequest(make_env("guess"), seed=0),  # the secret is 7: 5, 8, 6, 7
        EpisodeRequest(make_env("arithmetic", digits=3), seed=1),
    ]
    echo, guess, arithmetic = engine.run(requests)
    for trajectory in (echo, guess, arithmetic):
        check_tokens(trajectory)
        assert trajectory.failure_mode is None
        assert trajectory.reward == pytest.approx(1.0)
        assert set(trajectory.extra["roll"]["finish_reasons"]) == {"stop"}
        assert decoded(tokenizer, trajectory) + "\n" == rendered(tokenizer, trajectory)
    assert [s.content for s in guess.steps if s.role is Role.ASSISTANT] == ["5", "8", "6", "7"]
    assert [s.content for s in guess.steps if s.role is Role.USER][1:] == [
        "higher",
        "lower",
        "higher",
    ]
    assert [s.reward for s in echo.steps if s.role is Role.ASSISTANT] == [pytest.approx(0.25)] * 4


def test_cut_off_and_other_stop_tokens_are_closed_by_the_template(tokenizer: Any) -> None:
    params = SamplingParams(max_new_tokens=16)
    for end in ("none", "pad"):
        engine = RolloutEngine(
            Scripted(tokenizer, echo_oracle, end=end), tokenizer, params, max_seq_len=2048
        )
        (trajectory,) = engine.run([EpisodeRequest(make_env("echo"), seed=0)])
        check_tokens(trajectory)
        assert trajectory.reward == pytest.approx(1.0)
        text = decoded(tokenizer, trajectory)
        if end == "none":
            assert set(trajectory.extra["roll"]["finish_reasons"]) == {"length"}
            assert text + "<|im_end|>\n" == rendered(tokenizer, trajectory)
        else:
            assert text.count("<|endoftext|><|im_end|>\n<|im_start|>user") == 2
            assert text.replace("<|endoftext|>", "") + "<|im_end|>\n" == rendered(
                tokenizer, trajectory
            )


def test_limits_exceeded(tokenizer: Any) -> None:
    engine = RolloutEngine(
        Scripted(tokenizer, lambda _: "1"), tokenizer, SamplingParams(), max_seq_len=2048
    )
    (trajectory,) = engine.run([EpisodeRequest(make_env("guess", max_turns=3), seed=0)])
    assert trajectory.failure_mode is FailureMode.LIMITS_EXCEEDED
    assert trajectory.reward == 0.0 and trajectory.extra["roll"]["turns"] == 3
    roles = [s.role for s in trajectory.steps]
    assert roles == [Role.USER] + [Role.ASSISTANT, Role.USER] * 3  # the last hint is kept
    check_tokens(trajectory)


def test_context_length_exceeded(tokenizer: Any) -> None:
    env = make_env("echo")
    first = tokenizer.apply_chat_template(
        env.reset(0), add_generation_prompt=True, tokenize=True, return_dict=False
    )
    params = SamplingParams(max_new_tokens=8)
    backend = Scripted(tokenizer, echo_oracle)
    # the first turn fits; the second prompt (longer by a reply and an observation) does not
    engine = RolloutEngine(backend, tokenizer, params, max_seq_len=len(first) + 8 + 4)
    (trajectory,) = engine.run([EpisodeRequest(make_env("echo"), seed=0)])
    assert trajectory.failure_mode is FailureMode.CONTEXT_LENGTH_EXCEEDED
    assert trajectory.extra["roll"]["turns"] == 1
    assert trajectory.reward == pytest.approx(1 / 3)  # what the env gave before the cut
    check_tokens(trajectory)
    # a first prompt that does not fit ends the episode before any turn
    engine = RolloutEngine(backend, tokenizer, params, max_seq_len=len(first) + 7)
    (trajectory,) = engine.run([EpisodeRequest(make_env("echo"), seed=0)])
    assert trajectory.failure_mode is FailureMode.CONTEXT_LENGTH_EXCEEDED
    assert trajectory.extra["roll"]["turns"] == 0 and trajectory.reward == 0.0
    assert token_view(trajectory).token_ids == []


def test_one_generate_call_per_turn(tokenizer: Any) -> None:
    backend = Recording(Scripted(tokenizer, oracle))
    engine = RolloutEngine(backend, tokenizer, SamplingParams(max_new_tokens=16), max_seq_len=2048)
    requests = [
        EpisodeRequest(make_env("echo", rounds=1), seed=0),
        EpisodeRequest(make_env("echo", rounds=3), seed=1),
        EpisodeRequest(make_env("echo", rounds=2), seed=2),
        EpisodeRequest(make_env("arithmetic"), seed=3),
    ]
    engine.run(requests)
    assert [len(prompts) for prompts, _, _ in backend.calls] == [4, 2, 1]


def test_trajectory_metadata(tokenizer: Any) -> None:
    backend = Scripted(tokenizer, oracle)
    backend.sync_weights(None, 5)
    engine = RolloutEngine(backend, tokenizer, SamplingParams(max_new_tokens=16), max_seq_len=2048)
    requests = [
        EpisodeRequest(make_env("echo"), seed=0, group_id="g0"),
        EpisodeRequest(make_env("echo"), seed=0, group_id="g0", task_id="echo-task"),
    ]
    first, second = engine.run(requests)
    assert (first.task_id, second.task_id) == ("echo:rounds=3/0", "echo-task")
    assert first.group_id == second.group_id == "g0"
    assert first.episode_id != second.episode_id
    assert first.agent.name == "roll-env" and first.agent.extra == {"env": "echo"}
    assert first.model == "scripted"
    assert {s.policy_version for s in first.steps if s.role is Role.ASSISTANT} == {5}
    assert first.extra["roll"] == {"turns": 3, "finish_reasons": ["stop"] * 3, "env_seed": 0}
    assert first.timings is not None and first.timings.agent_sec is not None
    assert first.usage is not None and first.usage.completion_tokens == sum(
        len(s.token_ids or []) for s in first.steps
    )
    assert Trajectory.model_validate_json(first.model_dump_json()) == first


def test_same_seed_same_rollouts(hf: HFBackend) -> None:
    params = SamplingParams(max_new_tokens=5, temperature=1.0, seed=7)

    def tokens() -> list[list[int]]:
        engine = RolloutEngine(hf, hf.tokenizer, params, max_seq_len=512)
        runs = engine.run([EpisodeRequest(make_env("echo", rounds=2), seed=s) for s in (0, 1)])
        return [token_view(t).token_ids for t in runs]

    assert tokens() == tokens()


def test_engine_errors(tokenizer: Any) -> None:
    backend = Scripted(tokenizer, oracle)
    with pytest.raises(ConfigError, match="max_seq_len"):
        RolloutEngine(backend, tokenizer, SamplingParams(max_new_tokens=64), max_seq_len=64)

    class Short(Scripted):
        def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            return super().generate(prompts, params)[:-1]

    engine = RolloutEngine(Short(tokenizer, oracle), tokenizer, SamplingParams(), max_seq_len=512)
    with pytest.raises(GenerationError, match="1 generations for 2 prompts"):
        engine.run([EpisodeRequest(make_env("echo"), seed=s) for s in (0, 1)])
    env = make_env("echo")
    with pytest.raises(ConfigError, match="share one environment"):
        engine.run([EpisodeRequest(env, seed=0), EpisodeRequest(env, seed=1)])
    with pytest.raises(ConfigError, match="without a prefix"):
        EpisodeRequest(env, seed=0, anchor=2)
