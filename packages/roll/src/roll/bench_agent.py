"""The ``ale.agents`` entry point ``roll-policy``: the iflow agent with its model served by
roll's batched generation, so a harness evaluates a policy exactly as ``roll train`` ran it.

``rock bench run --agent iflow --agent-kwarg provider=local`` gives every trial a model of its
own: loaded again for each trial and decoding alone. With ``--agent roll-policy`` every trial
of a run shares one copy of the model behind one
:class:`~roll.generation.queue.GenerationQueue` (one per model, sampling setting and event
loop), so the turns of concurrent trials are decoded in batches; and each episode is rendered
and sampled by :class:`~roll.policy.PolicyModel`, as in training (same prompt tokens,
same sampler). On the 2-core CPU of the README that made held-out evaluation 1.78x as fast
as a model per trial (``benchmarks/bench_policy_agent.py``, 32 trials in flight).

Arguments (``--agent-kwarg key=value``): ``model_path`` (required; or ``--model``), sampling
``temperature`` (default 0: greedy), ``top_p``, ``max_output_tokens``, ``context_limit``,
``tool_format``, ``device``/``dtype`` (``auto``), ``seed``, ``max_batch``; ``server_url``: a
vLLM (or SGLang) server already serving ``model_path``, sampled instead of roll's HF backend
in this process (its ``/v1`` URL; ``model_path`` then gives the tokenizer); everything else (``prompt_profile``,
``max_turns``...) is an iflow setting, as for ``--agent iflow``.
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ale.agents import AgentConfigError
from ale.sandbox import SandboxVerbs
from ale.trajectory import Trajectory
from iflow.bench import IflowAgent
from iflow.errors import ConfigError as IflowConfigError
from iflow.models.directory import check_model_directory
from roll.errors import RollError, first_line
from roll.generation.base import GenerationBackend, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.queue import GenerationQueue
from roll.generation.server import ServerBackend
from roll.generation.vllm_server import VLLMServer
from roll.policy import PolicyModel


@dataclass(frozen=True)
class ServedModel:
    """What identifies one shared queue: the model and how it is sampled."""

    path: str
    device: str
    dtype: str
    temperature: float
    top_p: float
    max_new_tokens: int
    seed: int
    max_batch: int
    server_url: str | None = None


@dataclass
class _Served:
    queue: GenerationQueue
    tokenizer: Any


_LOADING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)
_SERVED: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ServedModel, _Served]] = (
    weakref.WeakKeyDictionary()
)
"""The queues of each running event loop (a harness run is one loop; a queue's worker task
belongs to its loop, so a later run never inherits one)."""


async def served(key: ServedModel) -> _Served:
    """The shared queue for ``key`` in this event loop, loading the model the first time."""
    loop = asyncio.get_running_loop()
    lock = _LOADING.setdefault(loop, asyncio.Lock())
    async with lock:
        queues = _SERVED.setdefault(loop, {})
        if key not in queues:
            backend, tokenizer = await asyncio.to_thread(_backend, key)
            params = SamplingParams(
                max_new_tokens=key.max_new_tokens, temperature=key.temperature, top_p=key.top_p
            )
            queue = GenerationQueue(backend, params, max_batch=key.max_batch, seed=key.seed)
            queues[key] = _Served(queue, tokenizer)
        return queues[key]


def _backend(key: ServedModel) -> tuple[GenerationBackend, Any]:
    """The generation backend and the tokenizer for ``key``: roll's HF backend here, or the
    inference server at ``server_url``."""
    if key.server_url is None:
        hf = HFBackend.from_path(
            key.path, device=key.device, dtype=key.dtype, max_batch_size=key.max_batch
        )
        return hf, hf.tokenizer
    from transformers import AutoTokenizer

    server = VLLMServer.attach(key.server_url)
    return ServerBackend(server.url), AutoTokenizer.from_pretrained(key.path)


def _model_directory(path: str | None) -> str:
    """``path`` when it is a model directory; otherwise the agent's one-sentence error."""
    if not path:
        raise AgentConfigError(
            "the roll-policy agent needs a model directory: add --agent-kwarg "
            "model_path=DIR (a save_pretrained directory, e.g. a roll run's model/)."
        )
    try:
        check_model_directory(path)
    except IflowConfigError as exc:
        raise AgentConfigError(str(exc)) from None
    return path


class PolicyAgent:
    """The iflow agent whose model is a shared, batched policy (see the module docstring)."""

    name = "roll-policy"

    def __init__(
        self,
        model: str | None = None,
        *,
        model_path: str | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_output_tokens: int = 256,
        context_limit: int = 4096,
        tool_format: str = "auto",
        device: str = "auto",
        dtype: str = "auto",
        seed: int = 0,
        max_batch: int = 64,
        server_url: str | None = None,
        **settings: Any,
    ) -> None:
        path = _model_directory(model_path or model)
        try:
            self.key = ServedModel(
                path=str(Path(path).resolve()),
                device=str(device),
                dtype=str(dtype),
                temperature=float(temperature),
                top_p=float(top_p),
                max_new_tokens=int(max_output_tokens),
                seed=int(seed),
                max_batch=int(max_batch),
                server_url=str(server_url) if server_url is not None else None,
            )
            SamplingParams(
                max_new_tokens=self.key.max_new_tokens,
                temperature=self.key.temperature,
                top_p=self.key.top_p,
            )
        except (TypeError, ValueError) as exc:
            raise AgentConfigError(
                f"the roll-policy agent's sampling arguments are invalid ({first_line(exc)}); "
                "give temperature >= 0, 0 < top_p <= 1 and max_output_tokens >= 1."
            ) from None
        if server_url is not None and not str(server_url).startswith(("http://", "https://")):
            raise AgentConfigError(
                f"the roll-policy agent's server_url must be an http(s) URL ending in /v1, "
                f"not {server_url!r}."
            )
        if self.key.max_batch < 1:
            raise AgentConfigError(f"max_batch must be at least 1, not {self.key.max_batch}.")
        self.context_limit = int(context_limit)
        self.tool_format = str(tool_format)
        try:  # the iflow settings are checked now, before any trial starts
            IflowAgent.settings_for(tool_format=tool_format, **settings)
        except IflowConfigError as exc:
            raise AgentConfigError(f"the roll-policy agent's iflow settings: {exc}") from None
        self.settings = settings

    async def run(
        self,
        instruction: str,
        sandbox: SandboxVerbs,
        *,
        logs_dir: Path | None = None,
        timeout_sec: float | None = None,
    ) -> Trajectory:
        try:
            shared = await served(self.key)
        except RollError as exc:
            raise AgentConfigError(str(exc)) from None
        policy = PolicyModel(
            shared.queue,
            shared.tokenizer,
            name=Path(self.key.path).name,
            context_limit=self.context_limit,
            max_new_tokens=self.key.max_new_tokens,
            tool_format=self.tool_format,
        )
        agent = IflowAgent(model_obj=policy, tool_format=self.tool_format, **self.settings)
        return await agent.run(instruction, sandbox, logs_dir=logs_dir, timeout_sec=timeout_sec)


__all__ = ["PolicyAgent", "ServedModel", "served"]
