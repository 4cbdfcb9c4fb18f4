"""The policy on Ray for agentic rollouts: one generation actor (:class:`PolicyServer`)
that batches the generation requests of every rollout worker, and the trainer's handle on it
(:class:`RayPolicyBackend`, a :class:`~roll.generation.base.GenerationBackend`).

The actor holds a copy of the policy that the trainer sends its weights after each update,
or, with ``rollout.backend: server``, no model at all: it forwards the requests to the
inference server, which the trainer has reload the weights.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from roll.config import RayConfig
from roll.errors import GenerationError
from roll.generation.base import Generation, GenerationBackend, SamplingParams
from roll.generation.queue import GenerationQueue
from roll.generation.server import ServerBackend
from roll.ray_engine import import_ray, kill_actors, remote_error, wait_started


@dataclass(frozen=True)
class ServerTarget:
    """The inference server a generation actor sends its requests to (no model of its own)."""

    url: str
    model: str | None = None
    api_key: str | None = None


class PolicyServer:
    """The body of the generation actor: the policy behind one generation queue.

    Either a copy of the policy, built from the trainer's model config, which gets its
    weights with the first :meth:`set_weights` (the trainer syncs right after starting it);
    or, with ``server``, a client of the inference server that holds the policy, which only
    learns the version (:meth:`set_version`) once the trainer has had the server reload.
    """

    def __init__(
        self,
        model_config: Any,
        tokenizer: Any,
        *,
        device: str,
        dtype: str,
        server: ServerTarget | None = None,
    ) -> None:
        self.backend: GenerationBackend
        if server is not None:
            self.backend = ServerBackend(server.url, model=server.model, api_key=server.api_key)
        else:
            import torch
            from transformers import AutoModelForCausalLM

            from roll.generation.hf import HFBackend

            model = AutoModelForCausalLM.from_config(model_config)
            model = model.to(device=device, dtype=getattr(torch, dtype))
            self.backend = HFBackend(model.eval().requires_grad_(False), tokenizer)
        self.queue = GenerationQueue(self.backend, SamplingParams())

    async def ready(self) -> bool:
        return True

    async def open(self, params: SamplingParams, seed: int) -> None:
        """Sample with ``params`` from now on, batch seeds counting from ``seed``."""
        await self.queue.close()
        self.queue = GenerationQueue(self.backend, params, seed=seed)

    async def generate(self, prompt: list[int], max_new_tokens: int | None) -> Generation:
        return await self.queue.generate(prompt, max_new_tokens)

    async def generate_batch(
        self, prompts: list[list[int]], params: SamplingParams
    ) -> list[Generation]:
        async with self.queue.paused():
            return await asyncio.to_thread(self.backend.generate, prompts, params)

    async def set_weights(self, state: dict[str, Any], version: int) -> None:
        async with self.queue.paused():  # between two batches
            await asyncio.to_thread(self._load, state)
            self.backend.policy_version = version

    async def set_version(self, version: int) -> None:
        """The server now samples from the weights of ``version`` (the trainer reloaded it):
        requests sent from now on carry it."""
        self.backend.policy_version = version

    def _load(self, state: dict[str, Any]) -> None:
        model = getattr(self.backend, "model", None)
        if model is None:
            raise GenerationError(
                "the generation actor sends its requests to an inference server and holds no "
                "weights; the trainer has the server reload them, so report this."
            )
        try:
            model.load_state_dict(state, strict=True)
        except (RuntimeError, KeyError) as exc:
            raise GenerationError(
                f"the trainer's weights do not fit the generation actor's model ({exc}); "
                "both are built from the same model config, so report this."
            ) from None

    async def stats(self) -> dict[str, float]:
        stats = self.queue.stats
        return {
            "generation/mean_batch": stats.mean_batch,
            "generation/batches": float(stats.batches),
        }


class RayPolicyBackend:
    """The trainer's handle on the generation actor (a ``GenerationBackend``); with
    ``server``, the trainer's client of the inference server the actor sends to, which
    reloads the server's weights after each update."""

    def __init__(self, actor: Any, server: ServerBackend | None = None) -> None:
        self.actor = actor
        self.server = server
        self.name = "server-ray" if server is not None else "hf-ray"
        self.policy_version = 0

    @classmethod
    def start(
        cls, model: Any, tokenizer: Any, config: RayConfig, server: ServerBackend | None = None
    ) -> RayPolicyBackend:
        """Start the generation actor: with a copy of ``model``'s architecture (on CUDA when
        ``ray.generation_gpus`` is above 0), or, with ``server``, as a client of that
        inference server, on this node (a server roll launched answers on loopback)."""
        ray = import_ray()
        dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        device = "cuda" if config.generation_gpus > 0 else "cpu"
        options: dict[str, Any] = {"num_cpus": config.generation_cpus}
        target = None
        if server is None:
            options["num_gpus"] = config.generation_gpus
        else:  # no model here: no GPU; on this node, where a launched server answers
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = ray.get_runtime_context().get_node_id()
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(here, soft=False)
            target = ServerTarget(server.url, model=server.model, api_key=server.api_key)
        actor = (
            ray.remote(PolicyServer)
            .options(**options)
            .remote(model.config, tokenizer, device=device, dtype=dtype, server=target)
        )
        try:
            wait_started([actor], timeout=config.start_timeout, what="generation actor")
        except BaseException:
            kill_actors([actor])
            raise
        return cls(actor, server)

    def _get(self, ref: Any) -> Any:
        ray = import_ray()
        try:
            return ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise remote_error(exc) from None

    def open(self, params: SamplingParams, seed: int) -> None:
        self._get(self.actor.open.remote(params, seed))

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return list(self._get(self.actor.generate_batch.remote(prompts, params)))

    def sync_weights(self, model: Any, version: int) -> None:
        if self.server is not None:  # the server reloads; then the actor's requests say so
            self.server.sync_weights(model, version)
            self._get(self.actor.set_version.remote(version))
        else:
            state = {key: value.detach().to("cpu") for key, value in model.state_dict().items()}
            self._get(self.actor.set_weights.remote(state, version))
        self.policy_version = version

    def stats(self) -> dict[str, float]:
        return dict(self._get(self.actor.stats.remote()))

    def close(self) -> None:
        kill_actors([self.actor])
        if self.server is not None:
            self.server.close()
