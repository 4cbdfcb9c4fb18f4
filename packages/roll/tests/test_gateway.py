"""The policy gateway on loopback, spoken to by real clients (the openai SDK, iflow's
OpenAIModel, httpx): token-exact recording, segments, and every refusal."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import torch
from policy_fakes import SCRIPT, ScriptedBackend
from transformers import AutoModelForCausalLM, AutoTokenizer

from ale.chunking import split_segments, token_view
from ale.trajectory import AgentInfo, Role, Trajectory
from iflow.models.openai_http import OpenAIModel
from iflow.models.tiny import build_tiny_model
from iflow.runner import build_agent
from iflow.settings import load_settings
from iflow.workspace.local import LocalWorkspace
from roll.gateway import Gateway, GatewayEpisodes
from roll.generation import HFBackend
from roll.generation.base import Generation, SamplingParams
from roll.generation.queue import GenerationQueue
from roll.policy import PolicyModel


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


@pytest.fixture(scope="module")
def tokenizer(tiny: Path) -> Any:
    return AutoTokenizer.from_pretrained(tiny)


async def _iflow(tmp: Path, model: Any, key: str) -> Trajectory:
    """The iflow agent's episode ``key`` with ``model``, in a scratch directory."""
    tmp.mkdir(parents=True, exist_ok=True)
    settings = load_settings(cwd=tmp, env={}, flags={"approval_mode": "yolo"})
    agent, _ = build_agent(
        settings,
        LocalWorkspace(tmp),
        cwd=tmp,
        home=tmp,
        headless=True,
        model=model,
        memory=False,
    )
    try:
        await agent.run(f"This is episode {key}. Write out.txt.")
    finally:
        await agent.aclose()
    return agent.trajectory


def _recorded(steps: list[Any]) -> Trajectory:
    return Trajectory(agent=AgentInfo(name="gateway"), steps=steps, reward=1.0)


@pytest.mark.parametrize(
    ("in_process", "over_http"),
    [("brief", "brief"), ("text", "text"), ("auto", "native")],
    ids=["brief", "text-markup", "native-tools"],
)
async def test_iflow_over_http_records_the_token_view_of_the_in_process_path(
    tmp_path: Path, tokenizer: Any, in_process: str, over_http: str
) -> None:
    """The same scripted policy, once as iflow's in-process model and once behind the gateway
    with iflow's OpenAI client (streaming): the same tokens, masks and log-probs."""
    backend = ScriptedBackend(tokenizer, {"a": list(SCRIPT), "b": list(SCRIPT)})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200)) as queue:
        local = PolicyModel(queue, tokenizer, context_limit=100_000, tool_format=in_process)
        direct = await _iflow(tmp_path, local, "a")
        (tmp_path / "out.txt").unlink()  # the same directory: the same system prompt
        episodes = GatewayEpisodes(queue, tokenizer, context_limit=100_000, tool_format=in_process)
        gateway = Gateway(episodes)
        await gateway.start()
        try:
            key = episodes.open("b")
            async with OpenAIModel(
                "policy", base_url=gateway.url, api_key=key, tool_format=over_http
            ) as remote:
                await _iflow(tmp_path, remote, "b")
        finally:
            await gateway.stop()
    record = episodes.close(key)
    assert (tmp_path / "out.txt").read_text() == "done\n"
    assert record.calls == len(SCRIPT) and record.segments == 1
    ours, theirs = token_view(direct), token_view(_recorded(record.steps))
    text = tokenizer.decode(ours.token_ids).replace("episode a", "episode b")
    assert tokenizer.decode(theirs.token_ids) == text
    assert theirs.policy_mask == ours.policy_mask
    assert theirs.logprobs == ours.logprobs
    answers = [s for s in record.steps if s.role is Role.ASSISTANT]
    assert [s.policy_version for s in answers] == [3, 3, 3]


async def test_the_openai_sdk_gets_models_chat_tool_calls_and_text_completions(
    tokenizer: Any,
) -> None:
    backend = ScriptedBackend(tokenizer, {"c": [SCRIPT[0], SCRIPT[0], "hello there"]})
    tools = [
        {
            "type": "function",
            "function": {
                "name": "run_shell_command",
                "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        }
    ]
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=200)) as queue:
        episodes = GatewayEpisodes(queue, tokenizer)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("c")
        client = openai.AsyncOpenAI(base_url=gateway.url, api_key=key, max_retries=0)
        try:
            assert [m.id async for m in client.models.list()] == ["policy"]
            messages: list[Any] = [{"role": "user", "content": "episode c: list the files"}]
            whole = await client.chat.completions.create(
                model="anything", messages=messages, tools=tools, logprobs=True
            )
            choice = whole.choices[0]
            assert choice.finish_reason == "tool_calls" and choice.message.content == "Let me look."
            call = choice.message.tool_calls[0]
            assert call.function.name == "run_shell_command"
            assert json.loads(call.function.arguments) == {"command": "ls"}
            assert [c.logprob for c in choice.logprobs.content] == [-0.25] * len(
                choice.logprobs.content
            )
            # streamed, without tools: the text as the model wrote it, markup included
            stream = await client.chat.completions.create(
                model="policy",
                messages=[{"role": "user", "content": "episode c again"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            pieces, usage = [], None
            async for chunk in stream:
                pieces += [c.delta.content or "" for c in chunk.choices]
                usage = chunk.usage or usage
            assert "".join(pieces) == SCRIPT[0] and usage is not None
            text = await client.completions.create(model="policy", prompt="episode c: say hi")
            assert text.choices[0].text == "hello there"
        finally:
            await client.close()
            await gateway.stop()
    record = episodes.close(key)
    assert record.calls == 3 and record.segments == 3  # three unrelated histories


async def test_a_fork_and_a_rewritten_history_are_segments_of_their_own(tokenizer: Any) -> None:
    class Slow(ScriptedBackend):
        def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            import time

            time.sleep(0.3)  # both calls of the fork are in flight together
            return super().generate(prompts, params)

    backend = Slow(tokenizer, {"f": ["one", "two", "three", "four"]})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=50), wait_ms=1) as queue:
        episodes = GatewayEpisodes(queue, tokenizer)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("f")
        client = openai.AsyncOpenAI(base_url=gateway.url, api_key=key, max_retries=0)
        history: list[Any] = [
            {"role": "system", "content": "episode f"},
            {"role": "user", "content": "count"},
        ]
        try:
            forked = await asyncio.gather(
                *(client.chat.completions.create(model="p", messages=history) for _ in range(2))
            )
            said = forked[0].choices[0].message.content
            follow = [*history, {"role": "assistant", "content": said}]
            follow.append({"role": "user", "content": "go on"})
            await client.chat.completions.create(model="p", messages=follow)  # continues
            rewritten = [history[0], {"role": "user", "content": "count (summarised)"}, *follow[2:]]
            await client.chat.completions.create(model="p", messages=rewritten)
        finally:
            await client.close()
            await gateway.stop()
    record = episodes.close(key)
    assert record.calls == 4 and record.segments == 3
    parts = split_segments(_recorded(record.steps))
    assert len(parts) == 3
    lengths = sorted(sum(s.token_ids is not None for s in p.steps) for p in parts)
    assert lengths == [1, 1, 2]
    for part in parts:  # each part is one growing token sequence, never two mixed
        token_view(part)


async def test_refusals_are_openai_errors_with_one_sentence(tokenizer: Any) -> None:
    backend = ScriptedBackend(tokenizer, {"r": ["fine", "fine"]})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=20)) as queue:
        episodes = GatewayEpisodes(queue, tokenizer, context_limit=40)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("r")
        body = {"model": "p", "messages": [{"role": "user", "content": "episode r"}]}
        try:
            async with httpx.AsyncClient(base_url=gateway.url) as http:
                missing = await http.post("/chat/completions", json=body)
                unknown = await http.post(
                    "/chat/completions", json=body, headers={"Authorization": "Bearer nope"}
                )
                auth = {"Authorization": f"Bearer {key}"}
                bad = {"model": "p", "messages": [{"role": "robot", "content": "hi"}]}
                malformed = await http.post("/chat/completions", json=bad, headers=auth)
                no_messages = await http.post("/chat/completions", json={}, headers=auth)
                long = {"model": "p", "messages": [{"role": "user", "content": "word " * 80}]}
                too_long = await http.post("/chat/completions", json=long, headers=auth)
                served = await http.post("/chat/completions", json=body, headers=auth)
                episodes.close(key)
                finished = await http.post("/chat/completions", json=body, headers=auth)
        finally:
            await gateway.stop()
    assert missing.status_code == unknown.status_code == 401
    assert "no open episode" in unknown.json()["error"]["message"]
    assert malformed.status_code == 422
    assert malformed.json()["error"]["param"] == "messages.0.role"
    assert no_messages.status_code == 422 and no_messages.json()["error"]["param"] == "messages"
    assert too_long.status_code == 400
    assert too_long.json()["error"]["code"] == "context_length_exceeded"
    assert served.status_code == 200
    assert finished.status_code == 409 and "has finished" in finished.json()["error"]["message"]
    for response in (missing, unknown, malformed, too_long, finished):
        assert "Traceback" not in response.text
        assert response.json()["error"]["message"].count(". ") == 0  # one sentence


async def test_a_client_that_goes_away_cancels_its_generation_and_nothing_is_recorded(
    tokenizer: Any,
) -> None:
    started = asyncio.Event()

    class Stalled(ScriptedBackend):
        def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
            import time

            time.sleep(1.5)
            return super().generate(prompts, params)

    backend = Stalled(tokenizer, {"g": ["late", "fresh"]})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=20)) as queue:
        episodes = GatewayEpisodes(queue, tokenizer)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("g")
        body = {"model": "p", "messages": [{"role": "user", "content": "episode g"}]}
        auth = {"Authorization": f"Bearer {key}"}
        try:
            async with httpx.AsyncClient(base_url=gateway.url) as http:

                async def call() -> None:
                    started.set()
                    await http.post("/chat/completions", json=body, headers=auth)

                task = asyncio.create_task(call())
                await started.wait()
                await asyncio.sleep(0.3)
                task.cancel()  # the client hangs up while the policy generates
                with pytest.raises(asyncio.CancelledError):
                    await task
            await asyncio.sleep(2.0)  # the generation it waited for finishes, unwanted
            async with httpx.AsyncClient(base_url=gateway.url) as http:
                again = await http.post("/chat/completions", json=body, headers=auth)
        finally:
            await gateway.stop()
    record = episodes.close(key)
    assert again.json()["choices"][0]["message"]["content"] == "fresh"
    assert record.calls == 1 and record.segments == 1
    assert [s.content for s in record.steps] == ["episode g", "fresh"]


async def test_a_restarted_gateway_loses_its_open_episodes(tokenizer: Any) -> None:
    backend = ScriptedBackend(tokenizer, {"x": ["first"]})
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=20)) as queue:
        episodes = GatewayEpisodes(queue, tokenizer)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("x")
        client = openai.AsyncOpenAI(base_url=gateway.url, api_key=key, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "episode x"}]
        try:
            await client.chat.completions.create(model="p", messages=messages)
            url = gateway.url
            await gateway.restart()
            assert gateway.url == url and gateway.restarts == 1
            with pytest.raises(openai.AuthenticationError):
                await client.chat.completions.create(model="p", messages=messages)
        finally:
            await client.close()
            await gateway.stop()
    record = episodes.close(key)
    assert record.lost and record.calls == 1


async def test_recorded_log_probs_are_those_of_a_forward_pass_of_the_policy(
    tiny: Path, tokenizer: Any
) -> None:
    """A real policy (the HF backend, sampling at temperature 1) behind the gateway: the
    recorded token view's log-probs are what the model gives those tokens."""
    model = AutoModelForCausalLM.from_pretrained(tiny).eval()
    backend = HFBackend(model, tokenizer)
    async with GenerationQueue(backend, SamplingParams(max_new_tokens=12, seed=5)) as queue:
        episodes = GatewayEpisodes(queue, tokenizer)
        gateway = Gateway(episodes)
        await gateway.start()
        key = episodes.open("h")
        client = openai.AsyncOpenAI(base_url=gateway.url, api_key=key, max_retries=0)
        history: list[Any] = [{"role": "user", "content": "say something"}]
        try:
            for turn in range(2):
                out = await client.chat.completions.create(model="p", messages=history)
                history += [
                    {"role": "assistant", "content": out.choices[0].message.content},
                    {"role": "user", "content": f"and again ({turn})"},
                ]
        finally:
            await client.close()
            await gateway.stop()
    record = episodes.close(key)
    assert record.segments == 1
    view = token_view(_recorded(record.steps))
    with torch.no_grad():
        logits = model(torch.tensor([view.token_ids])).logits[0].float()
    scores = torch.log_softmax(logits, -1)
    for i, (sampled, lp) in enumerate(zip(view.policy_mask, view.logprobs, strict=True)):
        if sampled:
            assert abs(float(scores[i - 1, view.token_ids[i]]) - lp) < 1e-4


def test_agent_configs_say_in_one_sentence_what_cannot_run(tiny: Path) -> None:
    from roll.config import TrainConfig, load_config
    from roll.errors import ConfigError

    base = [f"model.path={tiny}", "tasks.dataset=x"]
    config = load_config(TrainConfig, None, [*base, "tasks.agent=mini-swe-agent"])
    assert config.tasks is not None and config.tasks.agent.transport == "gateway"
    assert load_config(TrainConfig, None, base).tasks.agent.transport == "in-process"  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="only iflow runs in-process"):
        load_config(TrainConfig, None, [*base, "tasks.agent={name: x:Y, transport: in-process}"])
    with pytest.raises(ConfigError, match="do not serve the policy gateway yet"):
        load_config(TrainConfig, None, [*base, "tasks.agent=mini-swe-agent", "ray={address: auto}"])
