"""The policy as the iflow agent's model: token continuity, batching, versions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from policy_fakes import SCRIPT, ScriptedBackend
from transformers import AutoTokenizer

from ale.chunking import token_view
from ale.trajectory import Role, Step
from iflow.models.tiny import build_tiny_model
from iflow.runner import build_agent
from iflow.settings import load_settings
from iflow.workspace.local import LocalWorkspace
from roll.generation.base import Generation, SamplingParams
from roll.generation.queue import GenerationQueue
from roll.policy import PolicyModel


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


async def _episode(tmp: Path, tiny: Path, queue: GenerationQueue, key: str) -> Any:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    workspace = LocalWorkspace(tmp)
    settings = load_settings(cwd=tmp, env={}, flags={"approval_mode": "yolo"})
    model = PolicyModel(queue, tokenizer, context_limit=100_000)
    agent, _ = build_agent(
        settings, workspace, cwd=tmp, home=tmp, headless=True, model=model, memory=False
    )
    try:
        await agent.run(f"This is episode {key}. Write out.txt.")
    finally:
        await agent.aclose()
    return agent.trajectory, model


@pytest.mark.parametrize("cut", [None, 12], ids=["eos", "cut-by-length"])
async def test_trajectories_have_one_growing_token_sequence(
    tmp_path: Path, tiny: Path, cut: int | None
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    scripts = {"a": list(SCRIPT)}
    if cut is not None:
        scripts = {"a": [SCRIPT[0], *SCRIPT]}  # the cut first answer has no usable call
    backend = ScriptedBackend(tokenizer, scripts, cut=cut if cut else None)
    if cut:
        backend.cut = None
        original = backend.generate
        calls = {"n": 0}

        def first_cut(prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            calls["n"] += 1
            backend.cut = cut if calls["n"] == 1 else None
            return original(prompts, params)

        backend.generate = first_cut  # type: ignore[method-assign]
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200)) as queue:
        trajectory, model = await _episode(tmp_path, tiny, queue, "a")
    assert (tmp_path / "out.txt").read_text() == "done\n"
    view = token_view(trajectory)  # raises unless every prompt extends the one before
    assistant = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
    assert len(assistant) == len(SCRIPT) + (1 if cut else 0)
    assert view.token_ids == model.tokens
    assert sum(view.policy_mask) == sum(len(s.token_ids or []) for s in assistant)
    assert all(s.policy_version == 3 for s in assistant)
    assert all(lp == -0.25 for lp, m in zip(view.logprobs, view.policy_mask, strict=True) if m)
    if cut is None:
        # every answer ended with the end-of-turn token: the sequence is exactly the chat
        # template's rendering of the conversation the agent had
        text = tokenizer.decode(view.token_ids)
        assert text.count("<|im_start|>user\n<tool_response>") == len(SCRIPT) - 1
        assert text.count("<|im_start|>assistant") == len(SCRIPT)
        assert text.endswith("</tool_call><|im_end|>")


async def test_concurrent_episodes_share_batches(tmp_path: Path, tiny: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    keys = [f"e{i}" for i in range(4)]
    backend = ScriptedBackend(tokenizer, {k: list(SCRIPT) for k in keys})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200), wait_ms=50) as queue:
        results = await asyncio.gather(
            *(_episode(tmp_path / k, tiny, queue, k) for k in keys if not (tmp_path / k).mkdir())
        )
    assert len(results) == 4
    assert max(backend.batches) > 1  # requests of different episodes went out together
    assert sum(backend.batches) == 4 * len(SCRIPT)
    assert queue.stats.requests == 12 and queue.stats.mean_batch > 1


async def test_backend_failure_reaches_every_waiting_episode(tiny: Path) -> None:
    class Broken(ScriptedBackend):
        def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            raise RuntimeError("the engine died")

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    async with GenerationQueue(Broken(tokenizer, {}), SamplingParams()) as queue:
        with pytest.raises(RuntimeError, match="engine died"):
            await queue.generate([1, 2, 3])


async def _until(condition: Any, what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_request_joins_a_running_batch_and_leaves_it_when_done(tiny: Path) -> None:
    """With the HF backend (continuous batching) a request that arrives while another
    decodes starts at the next decode step and returns as soon as its own row is done."""
    from roll.generation.hf import HFBackend

    backend = HFBackend.from_path(tiny, device="cpu")
    params = SamplingParams(max_new_tokens=40, temperature=0.0)
    async with GenerationQueue(backend, params) as queue:
        long = asyncio.create_task(queue.generate([5, 6, 7, 8], 40))
        await _until(lambda: queue.stats.batches >= 3, "the first request to decode")
        short = await queue.generate([9, 10, 11], 2)
        assert not long.done(), "the short request waited for the long one"
        first = await long
    assert len(short.token_ids) == 2 and short.finish_reason == "length"
    assert len(first.token_ids) == 40, "precondition: the long row ran its whole budget"
    (alone,) = backend.generate([[9, 10, 11]], params.model_copy(update={"max_new_tokens": 2}))
    assert short.token_ids == alone.token_ids
    assert queue.stats.requests == 2 and queue.stats.batches < 42  # steps were shared
    assert queue.stats.mean_batch > 1


async def test_a_pause_waits_for_running_rows_and_holds_new_ones(tiny: Path) -> None:
    """A weight update never lands inside a generation: the pause begins when the running
    rows are done, and requests made meanwhile start after it."""
    from roll.generation.hf import HFBackend

    backend = HFBackend.from_path(tiny, device="cpu")
    params = SamplingParams(max_new_tokens=20, temperature=0.0)
    async with GenerationQueue(backend, params) as queue:
        running = asyncio.create_task(queue.generate([5, 6, 7, 8], 20))
        await _until(lambda: queue.stats.batches >= 2, "the first request to decode")
        async with queue.paused():
            assert running.done() and len(running.result().token_ids) == 20
            later = asyncio.create_task(queue.generate([9, 10, 11], 3))
            await asyncio.sleep(0.2)
            assert not later.done(), "a request started during a pause"
            before = backend.policy_version
            backend.sync_weights(backend.model, before + 1)
        assert len((await later).token_ids) == 3
        # each generation records the weights it was sampled with, not those of its queueing
        assert running.result().policy_version == before
        assert (await later).policy_version == before + 1


async def test_a_request_queued_before_a_pause_records_the_version_it_ran_with(
    tiny: Path,
) -> None:
    """The whole-batch path: a request made while the queue is paused runs after the weight
    update, and says so (its episode's staleness and IPA's mismatch mask read this)."""
    backend = ScriptedBackend(AutoTokenizer.from_pretrained(tiny), {"a": ["done"]})
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    prompt = backend.tokenizer.encode("episode a")
    async with GenerationQueue(backend, params) as queue:
        async with queue.paused():
            waiting = asyncio.create_task(queue.generate(prompt, 8))
            await asyncio.sleep(0.1)
            backend.sync_weights(None, 4)
        assert (await waiting).policy_version == 4


class _Server:
    """A backend that batches overlapping calls itself, as an inference server does: a prompt
    starting with 0 is answered only once ``release`` is set."""

    name = "server"
    batches_itself = True

    def __init__(self) -> None:
        import threading

        self.policy_version = 0
        self.release = threading.Event()
        self.calls = 0
        self.running = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.calls += 1
        self.running += 1
        try:
            if prompts[0][0] == 0:
                assert self.release.wait(10), "never released"
            return [Generation(token_ids=[7], logprobs=[-0.5], finish_reason="stop")] * len(prompts)
        finally:
            self.running -= 1

    def sync_weights(self, model: Any, version: int) -> None:
        assert self.running == 0, "weights changed during a generation"
        self.policy_version = version

    def close(self) -> None:
        pass


async def test_a_backend_that_batches_itself_gets_requests_while_others_run() -> None:
    """An inference server batches continuously: a request made while another is running
    goes out at once and returns first; a pause waits for the running calls and holds new
    ones, which then carry the new version."""
    backend = _Server()
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=4)) as queue:
        slow = asyncio.create_task(queue.generate([0, 1], 4))
        await _until(lambda: backend.running == 1, "the first call to start")
        fast = await asyncio.wait_for(queue.generate([1, 2], 4), 5)
        assert fast.token_ids == [7] and not slow.done()
        pausing = asyncio.create_task(backend_update(queue, backend, 1))
        await asyncio.sleep(0.1)
        assert not pausing.done(), "the pause began while a call was running"
        later = asyncio.create_task(queue.generate([2, 3], 4))
        await asyncio.sleep(0.1)
        assert not later.done() and backend.calls == 2, "a request went out during the pause"
        backend.release.set()
        await asyncio.wait_for(pausing, 5)
        assert (await slow).policy_version == 0 and (await later).policy_version == 1
    assert queue.stats.requests == 3 and queue.stats.busy_seconds > 0


async def backend_update(queue: GenerationQueue, backend: _Server, version: int) -> None:
    async with queue.paused():
        backend.sync_weights(None, version)


class _ScriptedSession:
    """A decode session at its seam: every row finishes in one step, or the step fails."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.keys: list[int] = []

    @property
    def rows(self) -> int:
        return len(self.keys)

    def fits(self, lengths: list[int], budgets: list[int]) -> bool:
        return True

    def admit(self, prompts: list[list[int]], budgets: list[int]) -> list[int]:
        new = list(range(len(self.keys), len(self.keys) + len(prompts)))
        self.keys += new
        return new

    def step(self) -> list[tuple[int, Generation]]:
        if self.fail:
            raise RuntimeError("the device fell over")
        done = [
            (k, Generation(token_ids=[1], logprobs=[-0.1], finish_reason="stop")) for k in self.keys
        ]
        self.keys = []
        return done


class _FirstSessionFails:
    name = "scripted-sessions"
    policy_version = 0

    def __init__(self) -> None:
        self.opened = 0

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        raise AssertionError("a continuous backend is served through sessions")

    def sync_weights(self, model: Any, version: int) -> None:
        pass

    def close(self) -> None:
        pass

    def open_session(self, params: SamplingParams) -> _ScriptedSession:
        self.opened += 1
        return _ScriptedSession(fail=self.opened == 1)


async def test_a_failed_decode_step_reaches_its_requests_and_the_next_gets_a_new_session() -> None:
    backend = _FirstSessionFails()
    async with GenerationQueue(backend, SamplingParams()) as queue:
        with pytest.raises(RuntimeError, match="fell over"):
            await queue.generate([1, 2, 3])
        after = await queue.generate([4, 5])
    assert after.token_ids == [1] and backend.opened == 2


def test_a_task_dataset_that_is_not_one_is_one_sentence(tmp_path: Path) -> None:
    from roll.agentic.collector import load_tasks
    from roll.errors import ConfigError

    with pytest.raises(ConfigError, match=r"tasks\.dataset: .* is not a directory"):
        load_tasks(tmp_path / "missing")
    (tmp_path / "empty" / "tasks").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds no tasks"):
        load_tasks(tmp_path / "empty")
    repo = Path(__file__).resolve().parents[3]
    tasks = load_tasks(repo / "datasets" / "synth-mini")
    assert len(tasks) == 200 and [t.id for t in tasks] == sorted(t.id for t in tasks)


def _tagged(task_id: str, *tags: str) -> Any:
    from ale.task.models import Task, TaskMetadata

    return Task(
        id=task_id,
        source_format="tb2",
        path=Path(task_id),
        instruction="do it",
        test_script=Path("tests/test.sh"),
        metadata=TaskMetadata(tags=list(tags)),
    )


def test_a_balanced_draw_gives_every_kind_its_turn_and_every_task_before_a_repeat() -> None:
    from roll.agentic.collector import TaskDraw

    many = [_tagged(f"upper-{i}", "text-transform", "upper") for i in range(7)]
    few = [
        _tagged("first-0", "text-transform", "first"),
        _tagged("first-1", "first", "text-transform"),
    ]
    lone = [_tagged("untagged")]
    draw = TaskDraw(many + few + lone, "balanced", seed=3)
    assert len(draw.kinds) == 3  # tags in any order are one kind; an untagged task its own
    drawn = [draw().id for _ in range(30)]
    for turn in range(10):  # each round of three draws visits each kind once
        round_ = drawn[3 * turn : 3 * turn + 3]
        assert sorted(t.split("-")[0] for t in round_) == ["first", "untagged", "upper"]
    uppers = [t for t in drawn if t.startswith("upper")]
    assert sorted(uppers[:7]) == sorted(t.id for t in many)  # no repeat before all were drawn
    again, other = (TaskDraw(many + few + lone, "balanced", seed=s) for s in (3, 4))
    assert [again().id for _ in range(30)] == drawn  # reproducible from the seed
    assert [other().id for _ in range(30)] != drawn
    uniform = TaskDraw(many + few + lone, "random", seed=3)
    assert sum(uniform().id.startswith("upper") for _ in range(300)) > 150  # by task, not kind


def test_an_unsolved_draw_favours_the_kinds_whose_recent_groups_failed() -> None:
    from roll.agentic.collector import UNSOLVED_FLOOR, TaskDraw

    solved = [_tagged(f"upper-{i}", "upper") for i in range(3)]
    failing = [_tagged(f"sort-{i}", "sort") for i in range(3)]
    fresh = [_tagged("tail-0", "tail")]
    draw = TaskDraw(solved + failing + fresh, "unsolved", seed=5)
    assert draw.weights() == [0.5, 0.5, 0.5]  # no group has finished: the kinds alike
    for i in range(6):  # more groups than the window: the oldest are forgotten
        draw.record(f"upper-{i % 3}", [1.0, 1.0, 1.0, 1.0])
        draw.record(f"sort-{i % 3}", [0.0, 0.0, 1.0, 0.0] if i < 2 else [0.0] * 4)
    draw.record("not-in-the-dataset", [0.0])  # ignored
    assert draw.weights() == [UNSOLVED_FLOOR, 1.0, 0.5]
    drawn = [draw().id.split("-")[0] for _ in range(400)]  # expected 250, 125 and 25
    assert drawn.count("sort") > 1.5 * drawn.count("tail") > 3 * drawn.count("upper") > 0
    draw.record("sort-0", [2.0, -1.0])  # rewards outside [0, 1] count as 1 and 0
    assert draw.weights()[1] == 1.0 - (0.5 / 4)
    again = TaskDraw(solved + failing + fresh, "unsolved", seed=5)
    for i in range(6):
        again.record(f"upper-{i % 3}", [1.0, 1.0, 1.0, 1.0])
        again.record(f"sort-{i % 3}", [0.0, 0.0, 1.0, 0.0] if i < 2 else [0.0] * 4)
    repeated = [again().id.split("-")[0] for _ in range(400)]
    assert repeated == drawn  # the same outcomes: the same draws


async def test_a_rewritten_history_starts_a_segment_the_trainer_samples_apart(tiny: Path) -> None:
    from ale.chunking import TokenViewError, split_segments
    from ale.trajectory import Step, Trajectory
    from roll.algo.batch import sample_from_trajectory

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    backend = ScriptedBackend(tokenizer, {"r": [SCRIPT[0], SCRIPT[0], SCRIPT[1]]})
    system = Step(role=Role.SYSTEM, content="You are in episode r.")
    user = Step(role=Role.USER, content="Write out.txt.")
    steps: list[Step] = [system, user]

    async def turn(model: PolicyModel, history: list[Step]) -> Step:
        answer = await model.complete(history, [])
        return Step(
            role=Role.ASSISTANT,
            content=answer.content,
            tool_calls=answer.tool_calls,
            prompt_token_ids=answer.prompt_token_ids,
            token_ids=answer.token_ids,
            logprobs=answer.logprobs,
            extra=answer.extra,
        )

    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200)) as queue:
        model = PolicyModel(queue, tokenizer, context_limit=100_000)
        steps.append(await turn(model, steps))
        steps.append(Step(role=Role.USER, content="a.txt b.txt"))
        assert model.extends(steps)
        steps.append(await turn(model, steps))
        # the agent shortens an earlier observation and keeps the message count: a rewrite
        steps.append(Step(role=Role.USER, content="[output elided]"))
        edited = [*steps[:3], Step(role=Role.USER, content="a.txt"), *steps[4:]]
        assert not model.extends(edited)
        steps = [*steps, await turn(model, edited)]
    assert steps[-1].extra == {"roll": {"rewritten": True}}
    trajectory = Trajectory(agent={"name": "iflow"}, task_id="t", steps=steps, reward=1.0)
    with pytest.raises(TokenViewError):
        token_view(trajectory)
    parts = split_segments(trajectory)
    assert [p.extra["segment"] for p in parts] == [0, 1]
    assert [sum(s.role is Role.ASSISTANT for s in p.steps) for p in parts] == [2, 1]
    assert parts[1].steps[0].content == "[output elided]"  # the observations open the part
    samples = [sample_from_trajectory(p) for p in parts]
    assert all(s.reward == 1.0 and s.group == trajectory.trajectory_id for s in samples)
    assert split_segments(parts[0]) == [parts[0]]


async def test_a_prompt_past_the_server_s_window_is_the_agent_s_context_limit(
    tmp_path: Path, tiny: Path
) -> None:
    """An inference server whose window is smaller than ``context_limit`` refuses the prompt
    (``PromptTooLong``): the agent sees its own ``ContextTooLong``, which it handles (it
    compacts, or the episode ends as context overflow), not a failed model."""
    from iflow.errors import ContextTooLong
    from roll.errors import PromptTooLong

    class SmallWindow(ScriptedBackend):
        def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            raise PromptTooLong(
                "the prompt leaves no room in the inference server's context window",
                tokens=len(prompts[0]),
                limit=8,
            )

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    async with GenerationQueue(SmallWindow(tokenizer, {}), SamplingParams()) as queue:
        model = PolicyModel(queue, tokenizer, context_limit=100_000)
        with pytest.raises(ContextTooLong, match="inference server's context window"):
            await model.complete([Step(role=Role.USER, content="hello")], [])


async def test_an_episode_continues_from_an_expert_prefix_marked_for_imitation(
    tmp_path: Path, tiny: Path
) -> None:
    """Chunk-level initialised resampling: the agent continues from an expert's first turn
    (replayed before, so not run again); the policy writes the rest. The expert's turn
    enters the token sequence as the template writes it, marked for the imitation term and
    out of the RL loss; the policy's own turns are sampled as ever."""
    from ale.trajectory import ToolCall, ToolResult, Trajectory
    from roll.algo.batch import sample_from_trajectory

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    backend = ScriptedBackend(tokenizer, {"p": list(SCRIPT[1:])})
    call = ToolCall(id="call_0", name="run_shell_command", arguments={"command": "ls"})
    prefix = [
        Step(role=Role.ASSISTANT, content="Let me look.", tool_calls=[call], prefix=True),
        Step(role=Role.TOOL, tool_results=[ToolResult(call_id="call_0", content="a.txt\n")]),
    ]  # fmt: skip
    workspace = LocalWorkspace(tmp_path)
    settings = load_settings(cwd=tmp_path, env={}, flags={"approval_mode": "yolo"})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200)) as queue:
        model = PolicyModel(queue, tokenizer, context_limit=100_000)
        agent, _ = build_agent(
            settings, workspace, cwd=tmp_path, home=tmp_path, headless=True, model=model,
            memory=False,
        )  # fmt: skip
        agent.continue_from(prefix)
        try:
            await agent.run("This is episode p. Write out.txt.")
        finally:
            await agent.aclose()
    trajectory: Trajectory = agent.trajectory
    assert (tmp_path / "out.txt").read_text() == "done\n"
    assert agent.turn == len(SCRIPT)  # the expert's turn counts
    assert len(backend.batches) == len(SCRIPT) - 1  # and was not asked of the policy
    assistant = [s for s in trajectory.steps if s.role is Role.ASSISTANT]
    assert assistant[0] is prefix[0] and assistant[0].logprobs is None
    view = token_view(trajectory)
    assert view.token_ids == model.tokens
    expert_text = tokenizer.decode(assistant[0].token_ids)
    assert expert_text.startswith("Let me look.") and expert_text.endswith("<|im_end|>")
    assert '"command": "ls"' in expert_text
    sample = sample_from_trajectory(trajectory)
    assert sum(sample.expert_mask) == len(assistant[0].token_ids)
    assert sum(sample.rl_mask) == sum(len(s.token_ids or []) for s in assistant[1:])
    # the whole sequence is the template's rendering of the conversation the agent had
    text = tokenizer.decode(view.token_ids)
    assert text.count("<|im_start|>assistant") == len(SCRIPT)
