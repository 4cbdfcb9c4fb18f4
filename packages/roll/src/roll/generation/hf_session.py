"""The HF backend's decode session: the rows of a running batch, sampled one token a step,
joining and leaving between steps (continuous batching), and the tensor helpers of the loop.

It meets its backend (:class:`~roll.generation.hf.HFBackend`) through :class:`DecodeHost`,
what a session needs of the backend that holds the model, so the backend can open sessions
without the two modules importing each other.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from roll.errors import GenerationError
from roll.generation.base import Generation, SamplingParams
from roll.generation.prefix_cache import Layers, PrefixCache

if TYPE_CHECKING:
    import torch


class DecodeHost(Protocol):
    """What a decode session uses of its backend (:class:`~roll.generation.hf.HFBackend`)."""

    max_batch_size: int
    max_batch_tokens: int | None
    policy_version: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    prefix_cache: PrefixCache | None
    _keep_last_logits: bool

    def _live_model(self) -> Any: ...

    def _device_of(self, model: Any) -> Any: ...

    def _check_prompts(self, prompts: list[list[int]]) -> None: ...

    def _starts(self, prompts: list[list[int]]) -> list[tuple[Layers | None, int]]: ...

    def _batch_cache(self, starts: list[tuple[Layers | None, int]], width: int) -> Any: ...


@dataclass
class _Row:
    key: int
    budget: int
    prompt: list[int]
    version: int
    """The policy version the row began under."""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class HFDecodeSession:
    """Rows that decode together, joining and leaving between decode steps.

    :meth:`admit` runs the new prompts' forward pass (their shared prefix once, as
    :meth:`HFBackend.generate` does) and adds them to the running rows: the key/value caches
    are left-padded to one length and stacked, the attention mask marking the padding, and
    every row keeps its own positions. :meth:`step` samples one token for every row, retires
    the rows that stopped or spent their budget (their caches dropped, and cache columns no
    row needs any more trimmed), and runs one forward pass for the rest. So a request that
    arrives while others decode starts at the next step instead of waiting for the whole
    batch, and a finished row stops costing compute: what vLLM calls continuous batching.

    Joining a running batch needs plain growing caches (transformers' ``DynamicLayer``); a
    model with other cache layers (a sliding window) admits only into an empty session
    (:attr:`joinable`). Not thread-safe: one caller at a time (the generation queue's worker).
    """

    def __init__(
        self,
        backend: DecodeHost,
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> None:
        import torch

        self.backend = backend
        self.params = params
        model = backend._live_model()
        device = backend._device_of(model)
        self._on_cuda = torch.device(device).type == "cuda"
        self._generator = generator or _generator(device, params.seed)
        stops = sorted({*backend.eos_token_ids, *params.stop_token_ids})
        self._stops = torch.tensor(stops, dtype=torch.long, device=device)
        self._rows: list[_Row] = []
        self._keys = itertools.count()
        self._cache: Any = None
        self._mask: torch.Tensor | None = None
        """Which cached positions of each row are real (1) or padding (0)."""
        self._next_pos: torch.Tensor | None = None
        self._logits: torch.Tensor | None = None
        """Each row's next-token logits."""
        self._plain = True
        """Every cache layer a plain growing one, so rows can be stacked and trimmed."""

    @property
    def rows(self) -> int:
        """How many rows are decoding."""
        return len(self._rows)

    @property
    def joinable(self) -> bool:
        """Whether :meth:`admit` may add rows now."""
        return not self._rows or self._plain

    def fits(self, lengths: list[int], budgets: list[int]) -> bool:
        """Whether rows of these prompt lengths and budgets may join now, together, within
        the backend's bounds (``max_batch_size`` rows, ``max_batch_tokens``); one row alone
        always fits an empty session, as it does a sub-batch of :meth:`HFBackend.generate`."""
        backend = self.backend
        rows = len(self._rows) + len(lengths)
        if not self.joinable or rows > backend.max_batch_size:
            return False
        if backend.max_batch_tokens is None or rows == 1:
            return True
        width = max([*lengths, int(self._mask.shape[1]) if self._mask is not None else 0])
        left = max([*budgets, *(r.budget - len(r.tokens) for r in self._rows)])
        return rows * (width + left) <= backend.max_batch_tokens

    def admit(self, prompts: list[list[int]], budgets: list[int]) -> list[int]:
        """Add ``prompts`` (each with its most new tokens); returns their keys for :meth:`step`."""
        import torch

        backend = self.backend
        backend._check_prompts(prompts)
        if not prompts:
            return []
        if not self.joinable:
            raise GenerationError(
                "this model's cache cannot take rows while others decode; admit into an "
                "empty session."
            )
        with self._running() as model:
            device = self._stops.device
            n = len(prompts)
            starts = backend._starts(prompts)
            kept = max(start for _, start in starts)
            cache = backend._batch_cache(starts, kept) if kept else None
            suffixes = [p[start:] for p, (_, start) in zip(prompts, starts, strict=True)]
            width = max(len(p) for p in suffixes)
            input_ids = torch.full((n, width), backend.pad_token_id, dtype=torch.long)
            mask = torch.zeros((n, kept + width), dtype=torch.long)
            for r, (suffix, (_, start)) in enumerate(zip(suffixes, starts, strict=True)):
                input_ids[r, width - len(suffix) :] = torch.tensor(suffix, dtype=torch.long)
                mask[r, kept - start : kept] = 1  # the kept part, left-padded to one width
                mask[r, kept + width - len(suffix) :] = 1
            input_ids, mask = input_ids.to(device), mask.to(device)
            begin = torch.tensor([start for _, start in starts], device=device)[:, None]
            positions = (mask[:, kept:].cumsum(-1) - 1).clamp(min=0) + begin
            extra = {"logits_to_keep": 1} if backend._keep_last_logits else {}
            out = model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                **({"cache": cache} if cache is not None else {}),
                **extra,
            )
            self._stack(out.cache, mask, positions[:, -1] + 1, out.logits[:, -1, :])
            if self._plain:
                _roomy(self._cache)
        keys = [next(self._keys) for _ in prompts]
        version = backend.policy_version
        self._rows += [
            _Row(k, max(b, 1), p, version) for k, b, p in zip(keys, budgets, prompts, strict=True)
        ]
        return keys

    def step(self) -> list[tuple[int, Generation]]:
        """Sample one token for every row; returns the rows that finished, by key."""
        import torch

        if not self._rows:
            return []
        assert self._logits is not None and self._mask is not None
        assert self._next_pos is not None
        with self._running() as model:
            token, logprob = _sample(self._logits, self.params, self._generator)
            stopped = torch.isin(token, self._stops).tolist()
            finished: list[tuple[int, Generation]] = []
            keep: list[int] = []
            for i, (row, t, lp) in enumerate(
                zip(self._rows, token.tolist(), logprob.tolist(), strict=True)
            ):
                row.tokens.append(t)
                row.logprobs.append(lp)
                if stopped[i] or len(row.tokens) >= row.budget:
                    self._keep_row(i)
                    reason: Literal["stop", "length"] = "stop" if stopped[i] else "length"
                    finished.append((row.key, Generation(
                        token_ids=row.tokens, logprobs=row.logprobs, finish_reason=reason
                    )))  # fmt: skip
                else:
                    keep.append(i)
            if not keep:
                self._rows, self._cache = [], None
                self._mask = self._next_pos = self._logits = None
                return finished
            if len(keep) < len(self._rows):
                self._select(keep)
                token = token[keep]
            mask = self._mask
            mask = torch.cat(
                [mask, torch.ones((len(keep), 1), dtype=mask.dtype, device=mask.device)], -1
            )
            out = model(
                input_ids=token[:, None],
                attention_mask=mask,
                position_ids=self._next_pos[:, None],
                cache=self._cache,  # transformers 5's name (past_key_values is deprecated)
                use_cache=True,
            )
            self._cache, self._mask = out.cache, mask
            self._next_pos = self._next_pos + 1
            self._logits = out.logits[:, -1, :]
        return finished

    # -- the batch's tensors -----------------------------------------------------------------

    @contextlib.contextmanager
    def _running(self) -> Iterator[Any]:
        """The model in eval mode, without autograd (its train/eval mode restored after)."""
        import torch

        model = self.backend._live_model()
        was_training = model.training
        model.eval()
        try:
            with torch.inference_mode(), _decode_attention(self._on_cuda):
                yield model
        finally:
            model.train(was_training)

    def _stack(self, cache: Any, mask: Any, next_pos: Any, logits: Any) -> None:
        """Add new rows' state below the running rows', left-padded to one cache length."""
        import torch
        from transformers.cache_utils import DynamicLayer

        layers = getattr(cache, "layers", None)
        self._plain = self._plain and bool(layers) and all(
            type(layer) is DynamicLayer and layer.is_initialized for layer in layers or []
        )  # fmt: skip
        if self._cache is None:
            self._cache, self._mask, self._next_pos, self._logits = cache, mask, next_pos, logits
            return
        assert self._mask is not None and self._next_pos is not None
        assert self._logits is not None and layers is not None
        width = max(int(self._mask.shape[1]), int(mask.shape[1]))
        for old, new in zip(self._cache.layers, layers, strict=True):
            old.keys = torch.cat([_pad_left(old.keys, width), _pad_left(new.keys, width)])
            old.values = torch.cat([_pad_left(old.values, width), _pad_left(new.values, width)])
        self._mask = torch.cat([_pad_left(self._mask, width), _pad_left(mask, width)])
        self._next_pos = torch.cat([self._next_pos, next_pos])
        self._logits = torch.cat([self._logits, logits])

    def _keep_row(self, index: int) -> None:
        """Offer the stopping row's keys and values (its prompt and every sampled token but
        the last, which never went forward) to the backend's prefix cache."""
        row, store = self._rows[index], self.backend.prefix_cache
        if store is None or not self._plain or row.version != self.backend.policy_version:
            return
        assert self._mask is not None
        columns = self._mask[index].nonzero().squeeze(-1)
        ids = row.prompt + row.tokens[:-1]
        if len(columns) != len(ids):
            return
        layers = [
            (layer.keys[index : index + 1, :, columns], layer.values[index : index + 1, :, columns])
            for layer in self._cache.layers
        ]
        store.keep(ids, layers, row.version)

    def _select(self, keep: list[int]) -> None:
        """Keep only the rows at ``keep``; drop cache columns no kept row attends to."""
        import torch

        assert self._mask is not None and self._next_pos is not None
        index = torch.tensor(keep, dtype=torch.long, device=self._mask.device)
        self._rows = [self._rows[i] for i in keep]
        self._cache.batch_select_indices(index)
        self._mask, self._next_pos = self._mask[index], self._next_pos[index]
        if self._plain:
            first = int(self._mask.any(0).nonzero()[0])
            if first:
                self._mask = self._mask[:, first:]
                for layer in self._cache.layers:
                    layer.keys = layer.keys[..., first:, :]
                    layer.values = layer.values[..., first:, :]


_ROOM = 64
"""Token columns a roomy cache layer (:func:`_roomy`) keeps free past its rows' length."""


def _roomy(cache: Any) -> None:
    """Make every plain layer of ``cache`` grow into spare room instead of by concatenation.

    transformers' ``DynamicLayer`` concatenates each step's keys and values onto the whole
    cache, a copy of all of it per layer per step (a fifth of a plain decode step on CPUs, at
    30 rows of 400 tokens). A roomy layer keeps its keys and values as the front of larger
    buffers, with :data:`_ROOM` columns to spare, and writes a step's into the free columns.
    Whatever else replaces its tensors (rows joining or leaving, the front trimmed) is copied
    into new buffers at its next update, once, so the session's other code is unchanged."""
    for layer in getattr(cache, "layers", None) or []:
        if "update" not in vars(layer):  # (a layer made roomy before keeps its buffers)
            layer.update = _RoomyUpdate(layer)


class _RoomyUpdate:
    """A roomy layer's ``update`` (see :func:`_roomy`)."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.buffers: tuple[torch.Tensor, torch.Tensor] | None = None

    def __call__(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.layer
        if not layer.is_initialized:
            layer.lazy_initialization(key_states, value_states)
        keys, values = layer.keys, layer.values
        used, new = int(keys.shape[-2]) if keys.dim() == 4 else 0, int(key_states.shape[-2])
        if not self._fronts(keys, values, used + new):
            rows, heads = key_states.shape[:2]
            room = used + new + _ROOM
            fresh = []
            for old, step in ((keys, key_states), (values, value_states)):
                buffer = step.new_empty((rows, heads, room, step.shape[-1]))
                if used:
                    buffer[:, :, :used] = old
                fresh.append(buffer)
            self.buffers = (fresh[0], fresh[1])
        assert self.buffers is not None
        key_buffer, value_buffer = self.buffers
        key_buffer[:, :, used : used + new] = key_states
        value_buffer[:, :, used : used + new] = value_states
        layer.keys = key_buffer[:, :, : used + new]
        layer.values = value_buffer[:, :, : used + new]
        return layer.keys, layer.values

    def _fronts(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> bool:
        """Whether ``keys`` and ``values`` are still the fronts of this layer's buffers, with
        room for ``length`` columns."""
        if self.buffers is None:
            return False
        for tensor, buffer in zip((keys, values), self.buffers, strict=True):
            if (
                tensor.data_ptr() != buffer.data_ptr()
                or tensor.shape[:2] != buffer.shape[:2]
                or tensor.stride() != buffer.stride()
                or length > buffer.shape[-2]
            ):
                return False
        return True


def _pad_left(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """``tensor`` zero-padded on the left of its sequence axis (the last for a mask, the
    second to last for keys and values) to ``width``."""
    import torch.nn.functional as F

    if tensor.dim() == 2:
        return F.pad(tensor, (width - tensor.shape[1], 0))
    return F.pad(tensor, (0, 0, width - tensor.shape[-2], 0))


def _generator(device: Any, seed: int | None) -> torch.Generator:
    """One generator on ``device`` for a call's samples: seeded, or from fresh entropy."""
    import torch

    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def _decode_attention(on_cuda: bool) -> contextlib.AbstractContextManager[Any]:
    """On CUDA, attention (SDPA) without its cuDNN backend. PyTorch picks cuDNN for bf16, and
    cuDNN builds an execution plan for every new key length: about 2 ms of CPU per layer
    call, which each decode step is (on an H200, bf16 generation ran 10x slower than fp32 for
    it; benchmarks/roll_gpu.py). Flash and memory-efficient attention have no such cost."""
    if not on_cuda:
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    )


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
        token = _draw(logp.exp(), generator)
    return token, logp.gather(-1, token[:, None]).squeeze(-1)


def _draw(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token a row, drawn with its probability by inverting the row's cumulative
    distribution at one uniform draw. ``torch.multinomial`` draws a random number for every
    entry of the vocabulary (12-20 % of a decode step on 2 CPU cores for 49,152 entries); this
    draws one a row. A token of probability 0 is never drawn: the point drawn lies below the
    row's total, so the first cumulative value above it is one the token itself raised."""
    import torch

    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    point = torch.rand(total.shape, generator=generator, device=probs.device) * total
    point = torch.minimum(point, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, point, right=True).squeeze(-1)


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


__all__ = ["DecodeHost", "HFDecodeSession"]
