"""The vLLM backend: a thin adapter over vLLM's offline ``LLM`` API (GPU only, optional).

Every call into vLLM sits in one of five small methods, the seam the tests replace with a fake
``vllm`` module: :meth:`VLLMBackend._start` (``vllm.LLM``), :meth:`~VLLMBackend._sampling`
(``vllm.SamplingParams``), :meth:`~VLLMBackend._run` (``LLM.generate``),
:meth:`~VLLMBackend._read` (``RequestOutput`` -> :class:`Generation`) and
:meth:`~VLLMBackend._load_weights` (``LLM.apply_model`` / ``LLM.collective_rpc``, then
``LLM.reset_prefix_cache``).

Three choices keep the log-probs the ones IPA needs and the samples independent:

- The engine is built with ``logprobs_mode="processed_logprobs"`` (vLLM >= 0.10.2): vLLM's
  default reports the raw model log-probs, before temperature and top-p, which is not the
  distribution the token was sampled from. Greedy requests get the untempered log-probs, as in
  :class:`~roll.generation.hf.HFBackend`.
- A batch's seed becomes one seed per prompt (``seed + index``): vLLM seeds each request on
  its own, so one seed for all would give identical samples for the repeated prompts of a
  GRPO group.
- Weights travel as ``(name, tensor)`` pairs of the trainer's ``state_dict`` (Hugging Face
  names) into the model's own ``load_weights``, through ``LLM.apply_model`` where vLLM has it
  and ``LLM.collective_rpc`` otherwise; both ship a closure to the workers, which vLLM's V1
  engine only accepts with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1`` (the constructor sets it
  unless already set). The prefix cache is reset after each load: its blocks hold keys and
  values of the old weights.

``vllm`` is imported in the constructor: importing this module is cheap and works without it.
"""

from __future__ import annotations

import gc
import importlib
import os
from typing import Any

from roll.errors import GenerationError
from roll.generation.base import Generation, SamplingParams

INSTALL_HINT = (
    "the vLLM backend needs vllm; install it with pip install 'roll[vllm]' on a machine "
    "with a CUDA GPU, or use the HF backend."
)
"""What to do when vllm cannot be imported."""


class VLLMBackend:
    """Samples with a vLLM engine loaded from a model directory (tensor parallel size 1).

    ``dtype``, ``gpu_memory_utilization``, ``seed``, ``enable_prefix_caching`` and
    ``max_model_len`` go to ``vllm.LLM`` as they are; ``engine_kwargs`` adds any other
    ``vllm.EngineArgs`` field (``enforce_eager``, ``max_num_seqs``...).
    """

    name = "vllm"

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        enable_prefix_caching: bool = True,
        max_model_len: int | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ) -> None:
        try:
            self._vllm = importlib.import_module("vllm")
        except ImportError as exc:
            raise GenerationError(INSTALL_HINT) from exc
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
        options: dict[str, Any] = {
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "seed": seed,
            "enable_prefix_caching": enable_prefix_caching,
            "logprobs_mode": "processed_logprobs",
        }
        if max_model_len is not None:
            options["max_model_len"] = max_model_len
        options.update(engine_kwargs or {})
        self.model_path = str(model_path)
        self.policy_version = 0
        self._llm: Any = self._start(self.model_path, options)

    # -- GenerationBackend -------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One :class:`Generation` per prompt, in order."""
        for index, prompt in enumerate(prompts):
            if not prompt:
                raise GenerationError(
                    f"prompt {index} is empty; every prompt needs at least one token id "
                    "(render it with the chat template first)."
                )
        if not prompts:
            return []
        outputs = self._run(prompts, self._sampling(params, len(prompts)))
        if len(outputs) != len(prompts):
            raise GenerationError(
                f"vLLM answered {len(outputs)} of {len(prompts)} prompts; check the engine log."
            )
        return [self._read(index, output) for index, output in enumerate(outputs)]

    def sync_weights(self, model: Any, version: int) -> None:
        """Load the trainer's ``state_dict`` into the engine and set the version."""
        weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]
        self._load_weights(weights)
        self.policy_version = version

    def close(self) -> None:
        """Drop the engine so its GPU memory can be freed."""
        self._llm = None
        gc.collect()
        try:
            import torch
        except ImportError:
            return
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    # -- the seam: every vLLM call -----------------------------------------------------------

    def _start(self, path: str, options: dict[str, Any]) -> Any:
        try:
            return self._vllm.LLM(model=path, **options)
        except TypeError as exc:
            if "logprobs_mode" in str(exc):
                raise GenerationError(
                    "this vLLM cannot report the log-probs of the sampling distribution "
                    "(no logprobs_mode); upgrade to vllm>=0.10.2."
                ) from exc
            raise

    def _sampling(self, params: SamplingParams, count: int) -> list[Any]:
        """One ``vllm.SamplingParams`` per prompt: only the seed differs."""
        return [
            self._vllm.SamplingParams(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                stop_token_ids=list(params.stop_token_ids),
                logprobs=0,
                seed=None if params.seed is None else params.seed + index,
                detokenize=False,
            )
            for index in range(count)
        ]

    def _run(self, prompts: list[list[int]], sampling: list[Any]) -> list[Any]:
        llm = self._engine()
        requests = [{"prompt_token_ids": list(prompt)} for prompt in prompts]  # TokensPrompt
        return list(llm.generate(requests, sampling_params=sampling, use_tqdm=False))

    @staticmethod
    def _read(index: int, output: Any) -> Generation:
        completion = output.outputs[0]
        token_ids = [int(t) for t in completion.token_ids]
        steps = completion.logprobs
        if steps is None or len(steps) != len(token_ids):
            raise GenerationError(
                f"vLLM returned no per-token log-probs for prompt {index}; the adapter asks for "
                "logprobs=0, so check that the engine honours it."
            )
        logprobs: list[float] = []
        for token, step in zip(token_ids, steps, strict=True):
            entry = step.get(token) if step is not None else None
            if entry is None:
                raise GenerationError(
                    f"vLLM's log-probs for prompt {index} miss the sampled token {token}."
                )
            logprobs.append(float(entry.logprob))
        reason = completion.finish_reason
        if reason not in ("stop", "length"):
            raise GenerationError(
                f"vLLM ended prompt {index} with finish reason {reason!r}; only 'stop' and "
                "'length' are expected (was the request aborted?)."
            )
        return Generation(token_ids=token_ids, logprobs=logprobs, finish_reason=reason)

    def _load_weights(self, weights: list[tuple[str, Any]]) -> None:
        llm = self._engine()
        if hasattr(llm, "apply_model"):

            def load(model: Any) -> None:
                model.load_weights(weights=weights)

            llm.apply_model(load)
        elif hasattr(llm, "collective_rpc"):

            def load_in_worker(worker: Any) -> None:
                runner = worker.model_runner
                model = runner.get_model() if hasattr(runner, "get_model") else runner.model
                model.load_weights(weights=weights)

            llm.collective_rpc(load_in_worker)
        else:
            raise GenerationError(
                "this vLLM has neither LLM.apply_model nor LLM.collective_rpc to load new "
                "weights; upgrade to vllm>=0.10.2."
            )
        if hasattr(llm, "reset_prefix_cache"):
            llm.reset_prefix_cache()

    def _engine(self) -> Any:
        if self._llm is None:
            raise GenerationError("this generation backend is closed; create a new one.")
        return self._llm


__all__ = ["INSTALL_HINT", "VLLMBackend"]
