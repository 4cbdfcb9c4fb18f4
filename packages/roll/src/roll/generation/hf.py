"""The HF transformers backend: a hand-written batched decode loop over a causal LM.

It samples with its own loop rather than ``model.generate`` so that the log-prob it reports for
each sampled token is exactly the one the token was drawn from: ``log_softmax`` of the logits
divided by the temperature, restricted to the top-p nucleus and renormalised there (greedy,
temperature 0, reports the untempered ``log_softmax``). A full forward pass over
prompt + completion recomputes the same numbers, which is what the trainer's π_old is.

Prompts are left-padded into sub-batches bounded by ``max_batch_size`` rows and
``max_batch_tokens`` (rows x (longest prompt + ``max_new_tokens``), the KV cache's length), the
longest first so rows of a sub-batch have similar lengths. Prompts reuse the keys and values of
sequences already run (:class:`~roll.generation.prefix_cache.PrefixCache`): a turn's prompt
extends the previous turn's prompt and answer, kept when that row stopped, and the prompts of
one call that begin with the same tokens (an agent's system prompt and tool descriptions)
have that common prefix computed once, at batch size one; only the rest goes forward. On a
CPU the prompt's forward pass is most of a turn's cost. A row leaves the batch as soon as it
stops, and :meth:`HFBackend.open_session` lets rows join a running batch between decode
steps (:class:`HFDecodeSession`, continuous batching: the generation queue serves concurrent
episodes so). One ``torch.Generator`` on the
model's device, seeded from ``SamplingParams.seed``, draws every sample of a call, so the same
seed, prompts, weights and prefix cache give the same samples (a prompt computed from kept keys
and values may differ from one computed whole in a log-prob's last bits), and the global random
state is never touched.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roll.errors import ConfigError, GenerationError, first_line
from roll.generation.base import Generation, SamplingParams
from roll.generation.hf_session import HFDecodeSession, _generator, _pad_left
from roll.generation.prefix_cache import Layers, PrefixCache

if TYPE_CHECKING:
    import torch


SHARED_PREFIX_MIN = 16
"""Fewest tokens common to a call's prompts worth a forward pass of their own."""

CACHED_TOKENS = 32768
"""Most tokens whose keys and values the backend keeps for later prompts (by default)."""


class HFBackend:
    """Samples with a transformers causal LM held in this process (CPU or GPU).

    ``model`` may be the trainer's own policy module (then :meth:`sync_weights` only bumps the
    version) or a separate copy (then it copies the state dict, across devices if needed).
    ``max_cached_tokens`` bounds the prefix cache (0: none); a model whose cache layers are not
    plain growing ones (a sliding window) has none.
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
        max_cached_tokens: int = CACHED_TOKENS,
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
        plain = max_cached_tokens > 0 and _plain_cache(model)
        self.prefix_cache = PrefixCache(max_cached_tokens) if plain else None
        """Keys and values of sequences already run, for prompts that extend them."""

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_batch_size: int = 64,
        max_batch_tokens: int | None = None,
        max_cached_tokens: int = CACHED_TOKENS,
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
            max_cached_tokens=max_cached_tokens,
        )

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (and where sampling happens)."""
        return next(self._live_model().parameters()).device

    # -- GenerationBackend -------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One :class:`Generation` per prompt, in order."""
        model = self._live_model()
        self._check_prompts(prompts)
        if not prompts:
            return []
        generator = _generator(self._device_of(model), params.seed)
        results: list[Generation | None] = [None] * len(prompts)
        for rows in self._sub_batches(prompts, params.max_new_tokens):
            session = self.open_session(params, generator)
            keys = session.admit([prompts[i] for i in rows], [params.max_new_tokens] * len(rows))
            where = dict(zip(keys, rows, strict=True))
            while session.rows:
                for key, generation in session.step():
                    results[where[key]] = generation
        return [r for r in results if r is not None]

    def open_session(
        self, params: SamplingParams, generator: torch.Generator | None = None
    ) -> HFDecodeSession:
        """A decode session: rows join and leave between decode steps (continuous batching)."""
        return HFDecodeSession(self, params, generator)

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
        if self.prefix_cache is not None:
            self.prefix_cache.clear(version)  # computed with the old weights

    def close(self) -> None:
        """Drop the model reference (the module itself lives on if the trainer holds it)."""
        model, self.model = self.model, None
        if model is not None and getattr(self._device_of(model), "type", "cpu") == "cuda":
            import torch

            del model
            torch.cuda.empty_cache()

    # -- the decode loop ---------------------------------------------------------------------

    def _starts(self, prompts: list[list[int]]) -> list[tuple[Layers | None, int]]:
        """For each prompt, the kept keys and values it begins with and how many of its tokens
        they cover (each prompt keeps at least one token to run). Prompts that share more with
        each other than with anything kept get their common prefix computed once first."""
        store = self.prefix_cache
        if store is None:
            return [(None, 0)] * len(prompts)
        starts = [store.match(p, len(p) - 1) for p in prompts]
        starts = [(kept, n) if n >= SHARED_PREFIX_MIN else (None, 0) for kept, n in starts]
        common = _shared_prefix(prompts) if len(prompts) > 1 else 0
        if common and common - min(n for _, n in starts) >= SHARED_PREFIX_MIN:
            layers = self._computed(prompts[0][:common])
            starts = [(layers, common) if n < common else (kept, n) for kept, n in starts]
        return starts

    def _computed(self, ids: list[int]) -> Layers:
        """The keys and values of ``ids`` at batch size one, from what is kept plus a forward
        pass over the rest; kept for later prompts."""
        import torch

        store = self.prefix_cache
        assert store is not None
        kept, start = store.match(ids, len(ids))
        if kept is not None and start == len(ids):
            return [(k[..., :start, :], v[..., :start, :]) for k, v in kept]
        model = self._live_model()
        device = self._device_of(model)
        cache = self._batch_cache([(kept, start)], start) if start else None
        extra = {"logits_to_keep": 1} if self._keep_last_logits else {}
        out = model(
            input_ids=torch.tensor([ids[start:]], dtype=torch.long, device=device),
            position_ids=torch.arange(start, len(ids), device=device)[None],
            use_cache=True,
            **({"cache": cache} if cache is not None else {}),
            **extra,
        )
        layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        store.keep(ids, layers, self.policy_version)
        return layers

    def _batch_cache(self, starts: list[tuple[Layers | None, int]], width: int) -> Any:
        """A cache of ``len(starts)`` rows, each row's kept keys and values left-padded to
        ``width`` positions (a row without any all padding)."""
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        sample = next(kept for kept, n in starts if kept is not None and n)
        cache = DynamicCache(config=self._live_model().config)
        for index, layer in enumerate(cache.layers):
            assert isinstance(layer, DynamicLayer)  # a prefix cache exists for plain ones only
            keys, values = [], []
            for kept, n in starts:
                k, v = kept[index] if kept is not None else sample[index]
                keys.append(_pad_left(k[..., : n if kept is not None else 0, :], width))
                values.append(_pad_left(v[..., : n if kept is not None else 0, :], width))
            key, value = torch.cat(keys), torch.cat(values)
            layer.lazy_initialization(key, value)
            layer.keys, layer.values = key, value
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


def _plain_cache(model: Any) -> bool:
    """Whether the model's cache is plain growing layers (keys and values of every position
    kept, so they can be cut, padded and stacked): not a sliding window's."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    try:
        layers = DynamicCache(config=model.config).layers
    except (AttributeError, TypeError, ValueError):
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


def _shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt shares (each keeping one of its own), or 0 when
    fewer than :data:`SHARED_PREFIX_MIN`."""
    first, shortest = prompts[0], min(len(p) for p in prompts)
    n = 0
    while n < shortest - 1 and all(p[n] == first[n] for p in prompts):
        n += 1
    return n if n >= SHARED_PREFIX_MIN else 0


__all__ = ["HFBackend", "HFDecodeSession"]
