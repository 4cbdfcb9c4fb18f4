"""The update with a real tiny model: exact zero gradients, micro-batch invariance, NaN guard."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import pytest
import torch

from ale.chunking import chunk_ids
from iflow.models.tiny import build_tiny_model
from roll.algo.batch import Sample, assign_advantages, collate, set_sft_weights, set_weights
from roll.algo.losses import LossSpec
from roll.config import OptimConfig
from roll.errors import TrainingAborted
from roll.models import load_policy, scored_logprobs
from roll.prefix import pack_groups, shared_cost
from roll.update import Updater, carries_gradient


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), hidden_size=32, layers=1, heads=2)


def _samples() -> list[Sample]:
    gen = torch.Generator().manual_seed(0)
    out = []
    # prompt (env) tokens, then policy chunks separated by observations
    layouts = [
        [0] * 5 + [1] * 4 + [0] * 3 + [1] * 6,
        [0] * 7 + [1] * 3,
        [0] * 4 + [1] * 2 + [0] * 2 + [1] * 2 + [0] * 1 + [1] * 5,
        [0] * 6 + [1] * 8,
    ]
    for i, layout in enumerate(layouts):
        ids = torch.randint(10, 300, (len(layout),), generator=gen).tolist()
        mask = [bool(x) for x in layout]
        mu = [(-2.0 if m else math.nan) for m in mask]
        out.append(
            Sample(
                input_ids=ids,
                rl_mask=mask,
                chunk_ids=chunk_ids(ids, mask),
                mu=mu,
                reward=float(i % 2),
                group="g0" if i < 2 else "g1",
            )
        )
    return out


def _updater(lm: torch.nn.Module, spec: LossSpec, budget: int) -> Updater:
    return Updater(
        lm,
        OptimConfig(lr=1e-2, max_grad_norm=None),
        total_steps=10,
        spec=spec,
        pad_id=0,
        micro_batch_tokens=budget,
        max_bad_steps=2,
    )


SPECS = [
    LossSpec(),
    LossSpec(loss="ipa", ratio_level="chunk", mismatch_threshold=2.0),
    LossSpec(ratio_level="sequence", clip_low=3e-4, clip_high=4e-4, entropy_coef=0.01),
]


@pytest.mark.parametrize("spec", SPECS, ids=["ppo", "ipa", "gspo"])
def test_micro_batches_and_accumulation_give_the_whole_batch_gradient(
    tiny: Path, spec: LossSpec
) -> None:
    grads = []
    for budget in (10_000, 40, 18):  # one micro-batch, a few, one sample each
        lm, _ = load_policy(tiny, device="cpu", dtype="float32")
        samples = _samples()
        assign_advantages(samples, "ipa" if spec.loss == "ipa" else "grpo", gamma=0.9)
        set_weights(samples, "seq_mean_token_mean")
        updater = _updater(lm, spec, budget)
        result = updater.step(samples)
        assert not result.skipped
        grads.append(torch.cat([p.grad.flatten() for p in lm.parameters() if p.grad is not None]))
    assert grads[0].abs().sum() > 0
    for other in grads[1:]:
        torch.testing.assert_close(other, grads[0], rtol=1e-5, atol=1e-7)


def test_environment_tokens_and_masked_chunks_get_exactly_zero_gradient(tiny: Path) -> None:
    lm, _ = load_policy(tiny, device="cpu", dtype="float32")
    samples = _samples()
    # chunk 1 of sample 2 fails the mismatch test: old - mu = -2 - (-50) per token, exp(48) > H
    spans = [i for i, c in enumerate(samples[2].chunk_ids) if c == 1]
    for i in spans:
        samples[2].mu[i] = -50.0
    assign_advantages(samples, "ipa", gamma=0.9, baseline="group_mean")  # no zero advantage
    set_weights(samples, "token_mean")
    for s in samples:  # pi_old = mu except in the marked chunk
        s.old = [(-2.0 if m else 0.0) for m in s.rl_mask]
    for i in spans:
        samples[2].old[i] = -2.0  # type: ignore[index]
    col = collate(samples, pad_id=0)
    captured: dict[str, torch.Tensor] = {}
    body = lm.get_decoder()

    def keep(_module: object, _inputs: object, output: object) -> None:
        hidden = output.last_hidden_state  # type: ignore[attr-defined]
        hidden.retain_grad()
        captured["hidden"] = hidden

    handle = body.register_forward_hook(keep)
    logp, _ = scored_logprobs(lm, col)
    handle.remove()
    from roll.algo.losses import policy_loss

    spec = LossSpec(loss="ipa", ratio_level="chunk", mismatch_threshold=2.0)
    loss, stats = policy_loss(logp, col.tokens, spec)
    loss.backward()
    grad = captured["hidden"].grad
    assert grad is not None
    assert stats["masked_tokens"].item() == len(spans)
    # the hidden state at p predicts token p + 1: zero exactly unless p + 1 carries a loss
    for row, sample in enumerate(samples):
        for position in range(len(sample) - 1):
            target = position + 1
            norm = grad[row, position].abs().sum().item()
            trained = sample.rl_mask[target] and not (row == 2 and target in spans)
            if trained:
                assert norm > 0, (row, target)
            else:
                assert norm == 0.0, (row, target)
        assert grad[row, len(sample) - 1 :].abs().sum().item() == 0.0  # last token, padding


def test_sft_turn_masks_and_normalisation(tiny: Path) -> None:
    lm, _ = load_policy(tiny, device="cpu", dtype="float32")
    a = Sample(
        input_ids=list(range(20, 30)),
        rl_mask=[False] * 10,
        chunk_ids=[-1] * 10,
        expert_mask=[False, False, True, True, False, False, True, True, True, False],
    )
    b = Sample(input_ids=list(range(40, 46)), rl_mask=[False] * 6, chunk_ids=[-1] * 6,
               expert_mask=[False, True, True, False, False, False])  # fmt: skip
    set_sft_weights([a, b])
    assert a.imitation[2] == pytest.approx(1 / 7)
    col = collate([a, b], pad_id=0)
    logp, _ = scored_logprobs(lm, col)
    from roll.algo.losses import policy_loss

    loss, _ = policy_loss(logp, col.tokens, LossSpec())
    assert loss.item() == pytest.approx(-logp.mean().item(), rel=1e-6)  # mean NLL of 7 tokens
    assert len(logp) == 7


def test_non_finite_steps_are_skipped_counted_and_bounded(
    tiny: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lm, _ = load_policy(tiny, device="cpu", dtype="float32")
    updater = _updater(lm, LossSpec(), 10_000)
    import roll.update as update

    real = update.policy_loss
    calls = {"n": 0}

    def sometimes_nan(*args: object, **kwargs: object) -> object:
        loss, stats = real(*args, **kwargs)  # type: ignore[arg-type]
        calls["n"] += 1
        if calls["n"] in (2, 4):
            loss = loss * float("nan")
        return loss, stats

    monkeypatch.setattr(update, "policy_loss", sometimes_nan)
    before = [p.detach().clone() for p in lm.parameters()]
    samples = _samples()
    assign_advantages(samples, "grpo")
    set_weights(samples, "token_mean")
    first = updater.step(samples)
    assert not first.skipped
    after_first = [p.detach().clone() for p in lm.parameters()]
    assert any(not torch.equal(x, y) for x, y in zip(before, after_first, strict=True))
    second = updater.step(samples)
    assert second.skipped and second.metrics["train/skipped_steps"] == 1
    for x, y in zip(after_first, lm.parameters(), strict=True):
        assert torch.equal(x, y.detach())  # nothing applied
    assert not updater.step(samples).skipped
    with pytest.raises(TrainingAborted, match="max_bad_steps=2"):
        updater.step(samples)


def _grouped_samples() -> list[Sample]:
    """Two groups of three whose members share a 24-token prompt, then diverge."""
    gen = torch.Generator().manual_seed(1)
    out = []
    for group, reward_of in (("a", (1.0, 0.0, 0.0)), ("b", (0.0, 1.0, 1.0))):
        prompt = torch.randint(10, 300, (24,), generator=gen).tolist()
        for k, reward in enumerate(reward_of):
            layout = [1] * (5 + 3 * k) + [0] * 4 + [1] * 6
            ids = prompt + torch.randint(10, 300, (len(layout),), generator=gen).tolist()
            mask = [False] * 24 + [bool(x) for x in layout]
            out.append(
                Sample(
                    input_ids=ids,
                    rl_mask=mask,
                    chunk_ids=chunk_ids(ids, mask),
                    mu=[(-3.0 if m else math.nan) for m in mask],
                    reward=reward,
                    group=group,
                )
            )
    return out


@pytest.mark.parametrize("spec", SPECS, ids=["ppo", "ipa", "gspo"])
def test_shared_prefix_forward_gives_the_same_gradient(tiny: Path, spec: LossSpec) -> None:
    grads, stats = [], []
    for share, budget in ((False, 10_000), (True, 10_000), (True, 90)):
        lm, _ = load_policy(tiny, device="cpu", dtype="float32")
        samples = _grouped_samples()
        assign_advantages(samples, "ipa" if spec.loss == "ipa" else "grpo", gamma=0.9)
        set_weights(samples, "token_mean")
        updater = Updater(
            lm,
            OptimConfig(lr=1e-2, max_grad_norm=None),
            total_steps=10,
            spec=spec,
            pad_id=0,
            micro_batch_tokens=budget,
            max_bad_steps=2,
            share_prefix=share,
        )
        assert updater.share_prefix is share
        result = updater.step(samples)
        grads.append(torch.cat([p.grad.flatten() for p in lm.parameters() if p.grad is not None]))
        stats.append(result.metrics)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(grads[2], grads[0], rtol=1e-4, atol=1e-6)
    assert stats[1]["train/loss"] == pytest.approx(stats[0]["train/loss"], rel=1e-5)
    # the shared prompt ran once per group, not once per episode that ran (IPA's failed
    # episodes carry no gradient and do not run)
    ran = Counter(s.group for s in samples if carries_gradient(s, spec))
    saved = sum((n - 1) * 24 for n in ran.values() if n > 1)
    assert saved and stats[0]["train/tokens"] - stats[1]["train/tokens"] == saved


def test_a_group_too_large_for_a_micro_batch_is_split_to_fit_and_keeps_sharing() -> None:
    """A group whose rows with their shared prompt exceed the budget runs as several pieces,
    each sharing the prompt within the budget, not as one oversized micro-batch."""
    prompt = list(range(100, 140))
    group = [
        Sample(input_ids=prompt + [k + 1] * (10 + k), rl_mask=[False] * 40 + [True] * (10 + k),
               chunk_ids=[-1] * (50 + k), group="g")
        for k in range(8)
    ]  # fmt: skip
    assert pack_groups([group], 10_000) == [[group]]
    batches = pack_groups([group], 40 + 3 * 18)  # the prompt and three of the longest suffixes
    pieces = [piece for batch in batches for piece in batch]
    assert sorted(len(s) for p in pieces for s in p) == [len(s) for s in group]
    assert sorted(len(p) for p in pieces) == [2, 3, 3]
    for batch in batches:
        longest_prefix = max(shared_cost(p)[0] for p in batch)
        longest_suffix = max(shared_cost(p)[1] for p in batch)
        assert longest_prefix * len(batch) + longest_suffix * sum(map(len, batch)) <= 94
        assert all(shared_cost(p)[0] >= 40 for p in batch if len(p) > 1)


@pytest.mark.parametrize("spec", SPECS[:2], ids=["ppo", "ipa"])
def test_samples_without_gradient_are_not_run_and_the_gradient_is_the_same(
    tiny: Path, spec: LossSpec
) -> None:
    """Failed IPA episodes (return 0) and a GRPO group whose rewards are all equal carry no
    gradient: the updater leaves them out, and its gradient is the whole loss's, computed
    over every sample by hand."""
    from roll.algo.losses import policy_loss

    samples = _samples()
    samples[0].reward = samples[1].reward = 1.0  # group g0 all solved: GRPO advantage 0
    assign_advantages(samples, "ipa" if spec.loss == "ipa" else "grpo", gamma=0.9)
    set_weights(samples, "token_mean")
    for s in samples:
        s.old = [(-2.0 if m else 0.0) for m in s.rl_mask]
    idle = {0, 2} if spec.loss == "ipa" else {0, 1}  # IPA: the failed ones (rewards 0)
    if spec.loss == "ipa":
        samples[0].reward = 0.0
        assign_advantages(samples, "ipa", gamma=0.9)
        set_weights(samples, "token_mean")
    lm, _ = load_policy(tiny, device="cpu", dtype="float32")
    reference, _ = load_policy(tiny, device="cpu", dtype="float32")
    result = _updater(lm, spec, 10_000).step(samples)
    assert result.metrics["train/zero_gradient_samples"] == len(idle)
    col = collate(samples, pad_id=0)
    logp, _ = scored_logprobs(reference, col)
    loss, _ = policy_loss(logp, col.tokens, spec)
    loss.backward()
    mine = torch.cat([p.grad.flatten() for p in lm.parameters() if p.grad is not None])
    whole = torch.cat([p.grad.flatten() for p in reference.parameters() if p.grad is not None])
    assert whole.abs().sum() > 0
    torch.testing.assert_close(mine, whole, rtol=1e-5, atol=1e-7)
