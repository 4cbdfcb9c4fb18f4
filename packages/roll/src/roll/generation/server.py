"""An external inference server as the generation backend: vLLM or SGLang, asked for tokens.

For GPUs the policy can sample in a server of its own (``vllm serve DIR --logprobs-mode
processed_logprobs`` or ``python -m sglang.launch_server --model-path DIR``) instead of in the
trainer: ``rollout.backend: server`` with ``rollout.server.url``. Each batch is one request to
the server's OpenAI-compatible ``/v1/completions`` with the prompts as token ids, asking for
the sampled token ids (``return_token_ids``) and each one's log-probability (``logprobs``), so
nothing is re-tokenised and IPA's mismatch mask compares the trainer's log-probs with the
server's. The server must report log-probs of the distribution it sampled from, after
temperature and top-p (vLLM: ``--logprobs-mode processed_logprobs``). After each update the
new weights are written to ``rollout.server.weights_dir`` and the server is asked to load
them (``reload: sglang``: ``POST /update_weights_from_disk``; ``reload: none`` leaves the
server as it is, for a server the user reloads by other means). A server that does not
answer, refuses, or answers without token ids is a :class:`~roll.errors.GenerationError` of
one sentence.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from typing import Any, Literal

import httpx

from roll.errors import GenerationError
from roll.generation.base import Generation, SamplingParams


class ServerBackend:
    """Samples through an inference server at ``url`` (see the module docstring)."""

    name = "server"

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        reload: Literal["none", "sglang"] = "none",
        weights_dir: str | Path | None = None,
        timeout: float = 600.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.base = self.url.removesuffix("/v1")
        self.reload = reload
        self.weights_dir = Path(weights_dir) if weights_dir else None
        if reload != "none" and self.weights_dir is None:
            raise GenerationError(
                "rollout.server.reload needs rollout.server.weights_dir: a directory the server "
                "can read, where the new weights are written after each update"
            )
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = client or httpx.Client(timeout=timeout, headers=headers)
        self.policy_version = 0
        self.model = model or self._served_model()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self.client.post(self.base + path, json=body)
        except httpx.HTTPError as exc:
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
        data: dict[str, Any] = response.json()
        return data

    def _served_model(self) -> str:
        try:
            response = self.client.get(self.base + "/v1/models")
            response.raise_for_status()
            return str(response.json()["data"][0]["id"])
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise GenerationError(
                f"the inference server at {self.base} lists no model at /v1/models "
                f"({type(exc).__name__}); check that it runs, or set rollout.server.model"
            ) from exc

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [list(p) for p in prompts],
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop_token_ids:
            body["stop_token_ids"] = list(params.stop_token_ids)
        choices = sorted(self._post("/v1/completions", body).get("choices", []), key=_index)
        if len(choices) != len(prompts):
            raise GenerationError(
                f"the inference server answered {len(choices)} completions for {len(prompts)} "
                "prompts; it must take a batch of token-id prompts (vLLM or SGLang)"
            )
        return [self._read(choice) for choice in choices]

    def _read(self, choice: dict[str, Any]) -> Generation:
        ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or logprobs is None or len(ids) != len(logprobs):
            raise GenerationError(
                "the inference server answered without the sampled token ids and their "
                "log-probs; it must support return_token_ids and logprobs (vLLM 0.10.2 or "
                "newer, SGLang)"
            )
        reason: Literal["stop", "length"] = (
            "length" if choice.get("finish_reason") == "length" else "stop"
        )
        return Generation(
            token_ids=[int(i) for i in ids],
            logprobs=[float(x) for x in logprobs],
            finish_reason=reason,
        )

    def sync_weights(self, model: Any, version: int) -> None:
        """Write the trainer's weights where the server reads them and have it load them."""
        if self.reload != "none":
            assert self.weights_dir is not None
            target = self.weights_dir / f"v{version}"
            staging = self.weights_dir / f".v{version}.partial"
            shutil.rmtree(staging, ignore_errors=True)
            if hasattr(model, "merge_and_unload"):  # LoRA: the server loads merged weights
                model = copy.deepcopy(model).merge_and_unload()
            model.save_pretrained(staging, safe_serialization=True)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
            self._post("/update_weights_from_disk", {"model_path": str(target)})
            for old in self.weights_dir.glob("v*"):
                if old != target:
                    shutil.rmtree(old, ignore_errors=True)
        self.policy_version = version

    def close(self) -> None:
        self.client.close()


def _index(choice: dict[str, Any]) -> int:
    return int(choice.get("index", 0))
