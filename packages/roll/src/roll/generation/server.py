"""An external inference server as the generation backend: vLLM or SGLang, asked for tokens.

The policy can sample in a server of its own instead of in the trainer: ``rollout.backend:
server`` with ``rollout.server.url`` (a server started by hand: ``vllm serve DIR --logprobs-mode
processed_logprobs`` or ``python -m sglang.launch_server --model-path DIR``), or with
``rollout.server.launch`` (a vLLM server roll starts and stops itself,
:mod:`roll.generation.vllm_server`). Each prompt is one request to the server's
OpenAI-compatible ``/v1/completions``, as token ids, asking for the sampled token ids
(``return_token_ids``) and each one's log-probability (``logprobs``); a batch's requests go
out together and the server batches them. A seeded batch seeds prompt ``i`` with ``seed + i``,
so the repeated prompts of a GRPO group are not sampled alike. Nothing is re-tokenised and
IPA's mismatch mask compares the trainer's log-probs with the server's, which must be those
of the distribution it sampled from, after temperature and top-p (vLLM: ``--logprobs-mode
processed_logprobs``).

After each update the new weights are written to ``rollout.server.weights_dir`` (into a
temporary directory renamed into place, so a reader never sees half of them) and the server
loads them: ``reload: vllm`` pauses the engine keeping its requests (``/pause?mode=keep``),
has each worker reload from that directory (``/collective_rpc``: ``roll_reload_weights`` in a
server roll launched, which reloads a tied LM head too, vLLM's ``reload_weights`` in one it
did not), drops
the prefix cache and the running requests' keys and values computed with the old weights
(``/reset_prefix_cache?reset_running_requests=true``) and resumes; ``reload: sglang`` calls
``/update_weights_from_disk``; ``reload: none`` leaves the server as it is.

Every :class:`~roll.generation.base.Generation` records the policy version at the moment its
request was sent: a request in flight across an update finishes with the new weights but
keeps the old version, so the trainer counts it off-policy (``rollout/stale_episodes``),
never as a sample of the new policy. A server that does not answer, refuses, or answers
without token ids is a :class:`~roll.errors.GenerationError` of one sentence; a managed
server that died is an :class:`~roll.errors.EngineError` quoting its log.
"""

from __future__ import annotations

import copy
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import httpx

from roll.errors import GenerationError, PromptTooLong
from roll.generation.base import Generation, SamplingParams
from roll.generation.vllm_server import require_dev_routes

if TYPE_CHECKING:
    from roll.generation.vllm_server import VLLMServer

Reload = Literal["none", "sglang", "vllm"]


class ServerBackend:
    """Samples through an inference server at ``url`` (see the module docstring).

    ``server``: the :class:`~roll.generation.vllm_server.VLLMServer` behind ``url`` when roll
    launched it (its death is then reported with its log); ``weights_dtype``: the dtype the
    weights are written in for ``reload: vllm`` (default: the trainer's).
    """

    name = "server"
    batches_itself = True
    """Overlapping :meth:`generate` calls are fine (from any thread): the server batches
    their requests itself, so a generation queue sends requests as they come
    (:class:`roll.generation.queue.GenerationQueue`)."""

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        reload: Reload = "none",
        weights_dir: str | Path | None = None,
        weights_dtype: str | None = None,
        server: VLLMServer | None = None,
        timeout: float = 600.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.base = self.url.removesuffix("/v1")
        self.reload = reload
        self.weights_dir = Path(weights_dir) if weights_dir else None
        self.weights_dtype = weights_dtype
        self.server = server
        if reload != "none" and self.weights_dir is None:
            raise GenerationError(
                "rollout.server.reload needs rollout.server.weights_dir: a directory the server "
                "can read, where the new weights are written after each update"
            )
        self.api_key = api_key
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(timeout=timeout, headers=headers)
        self.policy_version = 0
        self._lock = threading.Lock()  # the version and the weights change together
        self._pool: ThreadPoolExecutor | None = None
        self.max_model_len: int | None = None
        """The server's context window, where ``/v1/models`` says it (vLLM does)."""
        self.model = self._served_model(model)
        if reload == "vllm":
            require_dev_routes(self.base)

    def _post(self, path: str, body: dict[str, Any] | None = None, **params: str) -> dict[str, Any]:
        try:
            try:
                response = self.client.post(self.base + path, json=body, params=params or None)
            except httpx.RemoteProtocolError:
                # the server closed a kept-alive connection (idle past its keep-alive time) just
                # as it was reused, before reading the request: once more, on a fresh one
                if self.server is not None and self.server.died(grace=0.5) is not None:
                    raise
                response = self.client.post(self.base + path, json=body, params=params or None)
        except httpx.HTTPError as exc:
            died = self.server.died(grace=2.0) if self.server is not None else None
            if died is not None:
                raise died from exc
            raise GenerationError(
                f"the inference server at {self.base} did not answer ({type(exc).__name__}); "
                "check that it runs and that rollout.server.url is right"
            ) from exc
        if response.status_code >= 400:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() else ""
            raise GenerationError(
                f"the inference server at {self.base} answered {response.status_code} to "
                f"{path} ({detail}); check its log"
            )
        if not response.content:
            return {}
        data: dict[str, Any] = response.json()
        return data

    def _served_model(self, name: str | None) -> str:
        try:
            response = self.client.get(self.base + "/v1/models")
            response.raise_for_status()
            cards = response.json()["data"]
            card = next((c for c in cards if c["id"] == name), cards[0])
        except (httpx.HTTPError, KeyError, IndexError, ValueError, TypeError) as exc:
            if name is not None:
                return name
            raise GenerationError(
                f"the inference server at {self.base} lists no model at /v1/models "
                f"({type(exc).__name__}); check that it runs, or set rollout.server.model"
            ) from exc
        limit = card.get("max_model_len")
        self.max_model_len = int(limit) if isinstance(limit, int) else None
        return name or str(card["id"])

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        budgets = [self._budget(prompt, params.max_new_tokens) for prompt in prompts]
        with self._lock:
            version = self.policy_version  # what the weights are when the requests go out
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="roll-server")
            pool = self._pool
        futures = [
            pool.submit(self._complete, prompt, budget, params, index)
            for index, (prompt, budget) in enumerate(zip(prompts, budgets, strict=True))
        ]
        return [f.result().model_copy(update={"policy_version": version}) for f in futures]

    def _budget(self, prompt: list[int], wanted: int) -> int:
        if self.max_model_len is None:
            return wanted
        room = self.max_model_len - len(prompt)
        if room <= 0:
            raise PromptTooLong(
                f"the prompt ({len(prompt)} tokens) leaves no room in the inference server's "
                f"context window ({self.max_model_len} tokens); shorten it, or serve the model "
                "with a larger rollout.server.launch.max_model_len",
                tokens=len(prompt),
                limit=self.max_model_len,
            )
        return min(wanted, room)

    def _complete(
        self, prompt: list[int], budget: int, params: SamplingParams, index: int
    ) -> Generation:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [list(prompt)],
            "max_tokens": budget,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            body["seed"] = params.seed + index
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        choices = self._post("/v1/completions", body).get("choices") or []
        if len(choices) != 1:
            raise GenerationError(
                f"the inference server answered {len(choices)} completions for one prompt; it "
                "must take token-id prompts (vLLM or SGLang)"
            )
        return _read(choices[0])

    def sync_weights(self, model: Any, version: int) -> None:
        """Write the trainer's weights where the server reads them and have it load them."""
        if self.reload == "none":
            with self._lock:
                self.policy_version = version
            return
        assert self.weights_dir is not None
        target = self.weights_dir / f"v{version}"
        if hasattr(model, "merge_and_unload"):  # LoRA: the server loads merged weights
            model = copy.deepcopy(model).merge_and_unload()
        if self.reload == "vllm":
            write_weights(model, target, self.weights_dtype)
            method = self.server.reload_method if self.server is not None else "reload_weights"
            with self._lock:
                self._post("/pause", mode="keep")
                try:
                    self._post(
                        "/collective_rpc",
                        {"method": method, "kwargs": {"weights_path": str(target)}},
                    )
                    reset = self._post("/reset_prefix_cache", reset_running_requests="true")
                    if reset.get("success") is False:
                        raise GenerationError(
                            f"the inference server at {self.base} could not drop its prefix "
                            "cache after loading new weights; check its log"
                        )
                finally:
                    self._post("/resume")
                self.policy_version = version
        else:
            staging = self.weights_dir / f".v{version}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            model.save_pretrained(staging, safe_serialization=True)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
            with self._lock:
                self._post("/update_weights_from_disk", {"model_path": str(target)})
                self.policy_version = version
        for old in self.weights_dir.glob("v*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self.client.close()


def write_weights(model: Any, target: Path, dtype: str | None = None) -> Path:
    """Write ``model``'s weights as one safetensors file with its Hugging Face names into the
    directory ``target``, atomically: into a sibling temporary directory renamed into place.
    ``dtype`` (``bfloat16``...): the dtype to write in (default: each tensor's own); a tensor
    shared by two names (tied embeddings) is written once, under its first name."""
    import torch
    from safetensors.torch import save_file

    cast = getattr(torch, dtype) if dtype not in (None, "auto") else None
    tensors: dict[str, Any] = {}
    seen: set[tuple[int, tuple[int, ...]]] = set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        value = tensor.detach()
        if cast is not None and value.is_floating_point():
            value = value.to(cast)
        tensors[name] = value.contiguous()
    staging = target.parent / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _read(choice: dict[str, Any]) -> Generation:
    ids = choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if ids is None or logprobs is None or len(ids) != len(logprobs):
        raise GenerationError(
            "the inference server answered without the sampled token ids and their "
            "log-probs; it must support return_token_ids and logprobs (vLLM 0.10.2 or "
            "newer, SGLang)"
        )
    finish = choice.get("finish_reason")
    if finish not in ("stop", "length", None):
        raise GenerationError(
            f"the inference server ended a completion with finish reason {finish!r} (aborted "
            "or cut short); only 'stop' and 'length' can be trained on, so check its log"
        )
    reason: Literal["stop", "length"] = "length" if finish == "length" else "stop"
    return Generation(
        token_ids=[int(i) for i in ids],
        logprobs=[float(x) for x in logprobs],
        finish_reason=reason,
    )
