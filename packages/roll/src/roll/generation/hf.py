"""The HF transformers backend: a hand-written batched decode loop over a causal LM.

It samples with its own loop rather than ``model.generate`` so that the log-prob it reports for
each sampled token is exactly the one the token was drawn from: ``log_softmax`` of the logits
divided by the temperature, restricted to the top-p nucleus and renormalised there (greedy,
temperature 0, reports the untempered ``log_softmax``). A full forward pass over
prompt + completion recomputes the same numbers, which is what the trainer's π_old is.

Prompts are left-padded into sub-batches bounded by ``max_batch_size`` rows and
``max_batch_tokens`` (rows x (longest prompt + ``max_new_tokens``), the KV cache's length), the
longest first so rows of a sub-batch have similar lengths. The prompts of a sub-batch that
begin with the same tokens (an agent's system prompt and tool descriptions: most of a first
turn's prompt) have that prefix's keys and values computed once, at batch size one, and
shared by every row (the last prefix is kept for the next call, per policy version); on a CPU
the prompt's forward pass is most of a turn's cost. One ``torch.Generator`` on the
model's device, seeded from ``SamplingParams.seed``, draws every sample of a call, so the same
seed, prompts and weights give the same samples, and the global random state is never touched.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.errors import ConfigError, GenerationError, first_line
from roll.generation.base import Generation, SamplingParams

if TYPE_CHECKING:
    import torch


SHARED_PREFIX_MIN = 16
"""Fewest tokens common to a sub-batch's prompts worth a forward pass of their own."""


class HFBackend:
    """Samples with a transformers causal LM held in this process (CPU or GPU).

    ``model`` may be the trainer's own policy module (then :meth:`sync_weights` only bumps the
    version) or a separate copy (then it copies the state dict, across devices if needed).
    ``device=None`` leaves the model where it is; a device moves it there. Generation runs in
    eval mode under ``torch.inference_mode()`` and restores the module's train/eval mode after.
    """

    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        device: str | torch.device | None = None,
        max_batch_size: int = 64,
        max_batch_tokens: int | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be at least 1, not {max_batch_size}.")
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise ConfigError(f"max_batch_tokens must be at least 1, not {max_batch_tokens}.")
        if device is not None:
            model.to(device)
        self.model: Any = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        """Most prompts decoded together."""
        self.max_batch_tokens = max_batch_tokens
        """Most rows x (longest prompt + max_new_tokens) decoded together; None: no bound."""
        self.policy_version = 0
        self.eos_token_ids: tuple[int, ...] = _eos_ids(model, tokenizer)
        """Ids that always end a continuation (generation config's and tokenizer's EOS)."""
        self.pad_token_id = _pad_id(model, tokenizer, self.eos_token_ids)
        self._vocab_size = int(model.get_input_embeddings().num_embeddings)
        self._keep_last_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._prefix: tuple[tuple[int, tuple[int, ...]], Any] | None = None
        """The last shared prefix's (policy version, ids) and its cache."""

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_batch_size: int = 64,
        max_batch_tokens: int | None = None,
    ) -> HFBackend:
        """Load a ``save_pretrained`` directory (model and tokenizer) into a new backend.

        ``device="auto"`` is CUDA when available, else CPU; ``dtype="auto"`` is bfloat16 on a
        CUDA device that supports it, else float32; otherwise a torch dtype name ("float16").
        """
        import torch

        directory = Path(path)
        if not (directory / "config.json").is_file():
            raise ConfigError(
                f"{directory} is not a model directory (it has no config.json); point the "
                "generation backend at a directory written by save_pretrained."
            )
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        torch_dtype = _resolve_dtype(dtype, torch.device(device))
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from iflow.models.local import quiet_progress

        try:
            with quiet_progress():
                tokenizer = AutoTokenizer.from_pretrained(directory)
                model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch_dtype)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ConfigError(
                f"could not load a causal LM from {directory} ({first_line(exc)}); check that "
                "it holds a complete save_pretrained output."
            ) from exc
        return cls(
            model.eval(),
            tokenizer,
            device=device,
            max_batch_size=max_batch_size,
            max_batch_tokens=max_batch_tokens,
        )

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (and where sampling happens)."""
        return next(self._live_model().parameters()).device

    # -- GenerationBackend -------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One :class:`Generation` per prompt, in order."""
        import torch

        model = self._live_model()
        self._check_prompts(prompts)
        if not prompts:
            return []
        device = self.device
        generator = torch.Generator(device=device)
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        stop_ids = sorted({*self.eos_token_ids, *params.stop_token_ids})
        results: list[Generation | None] = [None] * len(prompts)
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode():
                for rows in self._sub_batches(prompts, params.max_new_tokens):
                    batch = [prompts[i] for i in rows]
                    generations = self._decode(batch, params, stop_ids, generator)
                    for i, generation in zip(rows, generations, strict=True):
                        results[i] = generation
        finally:
            model.train(was_training)
        return [r for r in results if r is not None]

    def sync_weights(self, model: Any, version: int) -> None:
        """Take the trainer's current weights: nothing to copy when it is our own module."""
        own = self._live_model()
        if model is not own:
            try:
                own.load_state_dict(model.state_dict(), strict=True)
            except (RuntimeError, KeyError) as exc:
                raise GenerationError(
                    "the trainer's weights do not fit the generation model "
                    f"({first_line(exc)}); give both the same architecture and checkpoint."
                ) from exc
        self.policy_version = version
        self._prefix = None  # computed with the old weights

    def close(self) -> None:
        """Drop the model reference (the module itself lives on if the trainer holds it)."""
        model, self.model = self.model, None
        if model is not None and getattr(self._device_of(model), "type", "cpu") == "cuda":
            import torch

            del model
            torch.cuda.empty_cache()

    # -- the decode loop ---------------------------------------------------------------------

    def _decode(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        stop_ids: list[int],
        generator: torch.Generator,
    ) -> list[Generation]:
        import torch

        model = self.model
        device = generator.device
        rows = len(prompts)
        extra = {"logits_to_keep": 1} if self._keep_last_logits else {}
        shared = self._shared_length(prompts)
        cache = self._prefix_cache(prompts[0][:shared], rows, device) if shared else None
        suffixes = [p[shared:] for p in prompts]
        width = max(len(p) for p in suffixes)
        input_ids = torch.full((rows, width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((rows, width), dtype=torch.long)
        for r, suffix in enumerate(suffixes):
            input_ids[r, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
            mask[r, width - len(suffix) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0) + shared
        if shared:  # the rows' pads sit between the shared prefix and their own tokens
            mask = torch.cat(
                [torch.ones((rows, shared), dtype=mask.dtype, device=device), mask], -1
            )
        stops = torch.tensor(stop_ids, dtype=torch.long, device=device)

        out = model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **({"cache": cache} if cache is not None else {}),
            **extra,
        )
        next_pos = positions[:, -1] + 1
        tokens: list[torch.Tensor] = []
        logprobs: list[torch.Tensor] = []
        alive = torch.ones(rows, dtype=torch.bool, device=device)
        lengths = torch.zeros(rows, dtype=torch.long, device=device)
        stopped = torch.zeros(rows, dtype=torch.bool, device=device)
        for step in range(params.max_new_tokens):
            token, logprob = _sample(out.logits[:, -1, :], params, generator)
            tokens.append(token)
            logprobs.append(logprob)
            lengths += alive.long()
            hit = alive & torch.isin(token, stops)
            stopped |= hit
            alive &= ~hit
            if step + 1 == params.max_new_tokens or not bool(alive.any()):
                break
            feed = torch.where(alive, token, torch.full_like(token, self.pad_token_id))
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=device)], -1)
            out = model(
                input_ids=feed[:, None],
                attention_mask=mask,
                position_ids=next_pos[:, None],
                cache=out.cache,  # transformers 5's name (past_key_values is deprecated)
                use_cache=True,
            )
            next_pos = next_pos + 1

        all_tokens = torch.stack(tokens, dim=1).tolist()
        all_logprobs = torch.stack(logprobs, dim=1).tolist()
        counts, ended = lengths.tolist(), stopped.tolist()
        return [
            Generation(
                token_ids=all_tokens[r][: counts[r]],
                logprobs=all_logprobs[r][: counts[r]],
                finish_reason="stop" if ended[r] else "length",
            )
            for r in range(rows)
        ]

    def _shared_length(self, prompts: list[list[int]]) -> int:
        """How many leading tokens to compute once for all ``prompts``: the kept prefix when
        every prompt extends it, else what two or more prompts have in common."""
        if self._prefix is not None and self._prefix[0][0] == self.policy_version:
            kept = self._prefix[0][1]
            if all(len(p) > len(kept) and tuple(p[: len(kept)]) == kept for p in prompts):
                return len(kept)
        return _shared_prefix(prompts) if len(prompts) > 1 else 0

    def _prefix_cache(self, prefix: list[int], rows: int, device: Any) -> Any:
        """The keys and values of ``prefix`` for ``rows`` rows (computed once a version)."""
        import torch

        key = (self.policy_version, tuple(prefix))
        if self._prefix is None or self._prefix[0] != key:
            self._prefix = None
            ids = torch.tensor([prefix], dtype=torch.long, device=device)
            extra = {"logits_to_keep": 1} if self._keep_last_logits else {}
            out = self.model(input_ids=ids, use_cache=True, **extra)
            self._prefix = (key, out.cache)
        cache = copy.deepcopy(self._prefix[1])  # the rows' tokens are appended to it
        cache.batch_repeat_interleave(rows)
        return cache

    def _sub_batches(self, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        """Prompt indices grouped longest first, each group within the batch bounds."""
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        groups: list[list[int]] = []
        current: list[int] = []
        for i in order:
            width = len(prompts[current[0]]) if current else len(prompts[i])
            too_many = len(current) >= self.max_batch_size
            too_long = (
                self.max_batch_tokens is not None
                and (len(current) + 1) * (width + max_new_tokens) > self.max_batch_tokens
            )
            if current and (too_many or too_long):
                groups.append(current)
                current = []
            current.append(i)
        if current:
            groups.append(current)
        return groups

    def _check_prompts(self, prompts: list[list[int]]) -> None:
        for index, prompt in enumerate(prompts):
            if not prompt:
                raise GenerationError(
                    f"prompt {index} is empty; every prompt needs at least one token id "
                    "(render it with the chat template first)."
                )
            low, high = min(prompt), max(prompt)
            if low < 0 or high >= self._vocab_size:
                bad = low if low < 0 else high
                raise GenerationError(
                    f"prompt {index} holds token id {bad}, outside the model's vocabulary of "
                    f"{self._vocab_size}; tokenise prompts with this model's tokenizer."
                )

    def _live_model(self) -> Any:
        if self.model is None:
            raise GenerationError("this generation backend is closed; create a new one.")
        return self.model

    @staticmethod
    def _device_of(model: Any) -> Any:
        return next(model.parameters()).device


def _sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row and its log-prob under the distribution it was drawn from."""
    import torch

    logits = logits.float()
    if params.temperature == 0.0:
        logp = torch.log_softmax(logits, dim=-1)
        token = logits.argmax(dim=-1)
    else:
        scaled = logits / params.temperature
        if params.top_p < 1.0:
            scaled = _nucleus(scaled, params.top_p)
        logp = torch.log_softmax(scaled, dim=-1)
        token = torch.multinomial(logp.exp(), 1, generator=generator).squeeze(-1)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def _nucleus(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logits`` with every token outside the smallest set of mass >= ``top_p`` at -inf.

    A token is kept when the mass of the tokens ranked strictly above it is below ``top_p``,
    so the most likely token always is.
    """
    import torch

    ordered, order = logits.sort(dim=-1, descending=True)
    probs = torch.softmax(ordered, dim=-1)
    before = probs.cumsum(dim=-1) - probs
    drop_sorted = before >= top_p
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    found: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (configured, getattr(tokenizer, "eos_token_id", None)):
        for token in value if isinstance(value, list | tuple) else [value]:
            if isinstance(token, int) and token not in found:
                found.append(token)
    return tuple(found)


def _pad_id(model: Any, tokenizer: Any, eos: tuple[int, ...]) -> int:
    for candidate in (
        getattr(tokenizer, "pad_token_id", None),
        getattr(getattr(model, "generation_config", None), "pad_token_id", None),
    ):
        if isinstance(candidate, int):
            return candidate
    return eos[0] if eos else 0


def _resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    import torch

    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ConfigError(
            f"unknown dtype {dtype!r}; use 'auto', 'float32', 'bfloat16' or 'float16'."
        )
    return resolved


def _shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt shares (each keeping one of its own), or 0 when
    fewer than :data:`SHARED_PREFIX_MIN`."""
    first, shortest = prompts[0], min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n if n >= SHARED_PREFIX_MIN else 0


__all__ = ["HFBackend"]
