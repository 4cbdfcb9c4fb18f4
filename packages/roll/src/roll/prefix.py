"""Shared-prefix forward: a group's common prompt goes through the model once.

The G episodes of a group start from the same prompt (for an agent: the system prompt, the
tool descriptions and the task), often most of each sequence. Instead of running that prefix
G times, the forward runs it once per group with the key/value cache kept (with gradient),
expands the cache to the group's rows, and runs only each row's own suffix on top. The
log-probs and gradients are the same as the plain forward's (a test compares them); the work
on the prefix is divided by G.

Layout of a :class:`SharedCollated` micro-batch: ``prefix_ids`` holds each group's prefix,
*left*-padded so every prefix ends at the same column; ``suffix_ids`` each row's remainder,
right-padded; positions are passed explicitly, so padding in the middle of a row (between a
short prefix and its suffix) is masked out and moves no position. A scored token at position
``c`` of a row is predicted by the hidden state at ``c - 1``, which lies in the shared prefix
(then every row of the group reads the same state, and the gradient of each adds up there)
or in the row's suffix.

:class:`ScoredForward` is the module the trainer differentiates (and wraps in DDP): a plain
micro-batch goes through :func:`roll.models.scored_logprobs`, a shared one through
:func:`shared_scored_logprobs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from roll.algo.batch import Collated, Sample, collate
from roll.models import scored_logprobs, tempered_logprobs

MIN_SHARED = 16
"""Shorter common prefixes are not worth a second forward call."""


def common_prefix(samples: Sequence[Sample]) -> int:
    """Length of the longest token prefix all ``samples`` share (at most len - 1 of each, so
    every row keeps a suffix of at least one token)."""
    first = samples[0].input_ids
    limit = min(len(s) for s in samples) - 1
    length = 0
    while length < limit and all(s.input_ids[length] == first[length] for s in samples):
        length += 1
    return max(length, 0)


def prefix_groups(samples: Sequence[Sample], min_shared: int = MIN_SHARED) -> list[list[Sample]]:
    """``samples`` split into runs of the same group (in order of first appearance); groups
    of one, or whose common prefix is shorter than ``min_shared``, are split into singles."""
    by_group: dict[Any, list[Sample]] = {}
    for sample in samples:
        by_group.setdefault(sample.group, []).append(sample)
    out: list[list[Sample]] = []
    for members in by_group.values():
        if len(members) > 1 and common_prefix(members) >= min_shared:
            out.append(members)
        else:
            out.extend([m] for m in members)
    return out


def shared_cost(group: Sequence[Sample]) -> tuple[int, int]:
    """(prefix tokens, longest suffix) of a group: what it costs in a shared micro-batch."""
    shared = common_prefix(group) if len(group) > 1 else 0
    return shared, max(len(s) for s in group) - shared


def fit_group(group: list[Sample], token_budget: int) -> list[list[Sample]]:
    """``group`` as runs of consecutive rows, each within the budget when it shares its prefix
    (prefix + rows x longest suffix); a group that fits stays whole, and a row too long for
    any company is a run of its own."""
    prefix, suffix = shared_cost(group)
    if len(group) == 1 or prefix + len(group) * suffix <= token_budget:
        return [group]
    rows = max(1, (token_budget - prefix) // max(suffix, 1))
    return [group[i : i + rows] for i in range(0, len(group), rows)]


def pack_groups(groups: list[list[Sample]], token_budget: int) -> list[list[list[Sample]]]:
    """Pack prefix groups into micro-batches whose padded cost (groups x longest prefix +
    rows x longest suffix) stays within the budget; a group too large for it is split first
    (:func:`fit_group`), and what is still oversized goes alone."""
    pieces = [piece for group in groups for piece in fit_group(group, token_budget)]
    ordered = sorted(pieces, key=lambda g: sum(len(s) for s in g), reverse=True)
    batches: list[list[list[Sample]]] = []
    current: list[list[Sample]] = []
    longest_prefix = longest_suffix = rows = 0
    for group in ordered:
        prefix, suffix = shared_cost(group)
        p, q, n = max(longest_prefix, prefix), max(longest_suffix, suffix), rows + len(group)
        cost = p * (len(current) + 1) + q * n
        if current and cost > token_budget:
            batches.append(current)
            current, longest_prefix, longest_suffix, rows = [], 0, 0, 0
            p, q, n = prefix, suffix, len(group)
        current.append(group)
        longest_prefix, longest_suffix, rows = p, q, n
    if current:
        batches.append(current)
    return batches


@dataclass(slots=True)
class SharedCollated:
    """A micro-batch of prefix groups (see the module docstring)."""

    plain: Collated
    """The same rows collated the plain way: its scored tokens, targets and rows/cols."""
    prefix_ids: torch.Tensor
    prefix_mask: torch.Tensor
    prefix_len: torch.Tensor
    """Each group's prefix length (long, groups)."""
    row_group: torch.Tensor
    """The group of each row (long, rows)."""
    suffix_ids: torch.Tensor
    suffix_mask: torch.Tensor

    @property
    def tokens(self) -> Any:
        """The scored tokens (:class:`~roll.algo.losses.ScoredTokens`)."""
        return self.plain.tokens

    @property
    def model_tokens(self) -> int:
        """Positions the model runs on (without padding): prefixes once, suffixes per row."""
        return int(self.prefix_mask.sum().item() + self.suffix_mask.sum().item())


def collate_shared(
    groups: list[list[Sample]], *, pad_id: int, device: Any = "cpu"
) -> SharedCollated:
    """Collate prefix groups: rows in group order, the shared part split off each group."""
    rows = [s for g in groups for s in g]
    plain = collate(rows, pad_id=pad_id, device=device)
    lengths = [common_prefix(g) if len(g) > 1 else 0 for g in groups]
    width = max(max(lengths), 1)
    prefix_ids = torch.full((len(groups), width), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((len(groups), width), dtype=torch.long)
    row_group: list[int] = []
    suffixes: list[list[int]] = []
    for index, (group, length) in enumerate(zip(groups, lengths, strict=True)):
        if length:
            prefix_ids[index, width - length :] = torch.tensor(group[0].input_ids[:length])
            prefix_mask[index, width - length :] = 1
        for sample in group:
            row_group.append(index)
            suffixes.append(sample.input_ids[length:])
    suffix_width = max(len(s) for s in suffixes)
    suffix_ids = torch.full((len(rows), suffix_width), pad_id, dtype=torch.long)
    suffix_mask = torch.zeros((len(rows), suffix_width), dtype=torch.long)
    for r, suffix in enumerate(suffixes):
        suffix_ids[r, : len(suffix)] = torch.tensor(suffix)
        suffix_mask[r, : len(suffix)] = 1
    return SharedCollated(
        plain=plain,
        prefix_ids=prefix_ids.to(device),
        prefix_mask=prefix_mask.to(device),
        prefix_len=torch.tensor(lengths, dtype=torch.long, device=device),
        row_group=torch.tensor(row_group, dtype=torch.long, device=device),
        suffix_ids=suffix_ids.to(device),
        suffix_mask=suffix_mask.to(device),
    )


def shared_hidden(lm: Any, col: SharedCollated) -> torch.Tensor:
    """The last hidden state predicting each scored token of ``col.plain`` (N x hidden)."""
    from transformers import DynamicCache

    body = lm.get_decoder()
    width = col.prefix_ids.shape[1]
    prefix_pos = (col.prefix_mask.cumsum(-1) - 1).clamp(min=0)
    prefix_out = body(
        input_ids=col.prefix_ids,
        attention_mask=col.prefix_mask,
        position_ids=prefix_pos,
        use_cache=True,
    )
    cache = prefix_out.cache  # transformers 5's name (past_key_values is deprecated)
    expanded = DynamicCache()
    for layer_index, layer in enumerate(cache.layers):
        expanded.update(
            layer.keys.index_select(0, col.row_group),
            layer.values.index_select(0, col.row_group),
            layer_index,
        )
    starts = col.prefix_len.index_select(0, col.row_group)
    suffix_width = col.suffix_ids.shape[1]
    suffix_pos = starts[:, None] + torch.arange(suffix_width, device=starts.device)[None, :]
    mask = torch.cat([col.prefix_mask.index_select(0, col.row_group), col.suffix_mask], dim=1)
    suffix_out = body(
        input_ids=col.suffix_ids,
        attention_mask=mask,
        position_ids=suffix_pos,
        cache=expanded,
        use_cache=True,
    )
    rows, cols = col.plain.rows, col.plain.cols
    before = cols - 1  # the position whose state predicts the token
    length = starts.index_select(0, rows)
    in_prefix = before < length
    group = col.row_group.index_select(0, rows)
    prefix_h = prefix_out.last_hidden_state[group, (width - length + before).clamp(max=width - 1)]
    suffix_h = suffix_out.last_hidden_state[rows, (before - length).clamp(min=0)]
    return torch.where(in_prefix[:, None], prefix_h, suffix_h)


def shared_scored_logprobs(
    lm: Any, col: SharedCollated, entropy: bool = False, temperature: float = 1.0
) -> tuple[Any, Any]:
    """Log-probs (and entropies) of ``col.plain``'s scored tokens, prefixes run once."""
    if col.plain.rows.numel() == 0:
        return scored_logprobs(lm, col.plain, entropy=entropy, temperature=temperature)
    head = lm.get_output_embeddings()
    logits = head(shared_hidden(lm, col))
    logps = tempered_logprobs(logits, temperature)
    chosen = logps.gather(-1, col.plain.targets[:, None]).squeeze(-1)
    ent = -(logps.exp() * logps).sum(-1) if entropy else None
    return chosen, ent


class ScoredForward(torch.nn.Module):
    """The policy as the trainer differentiates it: ids in, scored tokens' log-probs out
    (of the policy that samples at ``temperature``, as the rollouts did)."""

    def __init__(self, lm: Any, temperature: float = 1.0) -> None:
        super().__init__()
        self.lm = lm
        self.temperature = temperature

    def forward(
        self, collated: Collated | SharedCollated, entropy: bool = False
    ) -> tuple[Any, Any]:
        """A plain micro-batch, or a shared one whose group prefixes run once."""
        if isinstance(collated, SharedCollated):
            return shared_scored_logprobs(self.lm, collated, entropy, self.temperature)
        return scored_logprobs(self.lm, collated, entropy=entropy, temperature=self.temperature)
