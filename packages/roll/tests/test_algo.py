"""Every formula against a small example computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from roll.algo import advantages as adv
from roll.algo.batch import Sample, assign_advantages, micro_batches, set_weights
from roll.algo.losses import (
    LossSpec,
    ScoredTokens,
    mismatch_log_ratio,
    mismatch_summary,
    policy_loss,
    segment_mean,
)


def _tokens(**kw: object) -> ScoredTokens:
    n = len(kw["advantage"])  # type: ignore[arg-type]
    base: dict[str, object] = {
        "seq": torch.zeros(n, dtype=torch.long),
        "chunk": torch.zeros(n, dtype=torch.long),
        "weight": torch.full((n,), 1.0 / n),
        "rl": torch.ones(n, dtype=torch.bool),
        "positive": torch.zeros(n, dtype=torch.bool),
    }
    for key, value in kw.items():
        base[key] = (
            torch.as_tensor(value, dtype=torch.float32) if isinstance(value, list) else value
        )
    return ScoredTokens(**base)  # type: ignore[arg-type]


def _grad(
    spec: LossSpec, logp_values: list[float], tokens: ScoredTokens
) -> tuple[float, list[float]]:
    logp = torch.tensor(logp_values, dtype=torch.float32, requires_grad=True)
    loss, _ = policy_loss(logp, tokens, spec)
    loss.backward()
    assert logp.grad is not None
    return loss.item(), logp.grad.tolist()


# -- advantages ------------------------------------------------------------------------------


def test_grpo_with_and_without_std() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 2.0, 2.0]
    groups = ["a", "a", "a", "a", "b", "b"]
    std = math.sqrt(4 * 0.25 / 3)  # unbiased: sum of squares 1.0 over G-1 = 3
    out = adv.grpo(rewards, groups)
    assert out[:4] == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std], rel=1e-5)
    assert out[4:] == [0.0, 0.0]  # equal rewards: no signal
    assert adv.grpo(rewards, groups, scale_by_std=False) == [0.5, -0.5, -0.5, 0.5, 0.0, 0.0]


def test_lite_ppo_group_mean_over_the_batch_std() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 2.0, 2.0]
    groups = ["a", "a", "a", "a", "b", "b"]
    # batch mean 1.0; squares 0,1,1,0,1,1 = 4 over n-1 = 5: std sqrt(0.8)
    std = math.sqrt(0.8)
    out = adv.lite_ppo(rewards, groups)
    assert out == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std, 0.0, 0.0], rel=1e-5)
    # a group whose rewards barely differ is scaled by the batch, not blown up by its own std
    tight = adv.lite_ppo([0.50, 0.51, 0.0, 1.0], ["a", "a", "b", "b"])
    assert abs(tight[1] - tight[0]) < 0.05 and abs(adv.grpo([0.50, 0.51], ["a", "a"])[1]) > 0.5
    per_chunk = adv.chunk_advantages("lite_ppo", rewards, groups, [2, 1, 1, 1, 1, 1], [1] * 6)
    assert per_chunk[0] == pytest.approx([0.5 / std, 0.5 / std], rel=1e-5)


def test_rloo_leave_one_out() -> None:
    assert adv.rloo([1.0, 0.0, 0.0], ["g"] * 3) == [1.0, -0.5, -0.5]
    assert adv.rloo([3.0], ["g"]) == [0.0]


def test_reinforce_pp_token_weighted_whitening() -> None:
    # mu = (1*1 + 0*3)/4 = 0.25; var = (1*0.75^2 + 3*0.25^2)/4 = 0.1875
    sigma = math.sqrt(0.1875)
    out = adv.reinforce_pp([1.0, 0.0], [1, 3])
    assert out == pytest.approx([0.75 / sigma, -0.25 / sigma], rel=1e-5)
    # with the group baseline the group means are removed first: both groups centred
    out = adv.reinforce_pp(
        [1.0, 0.0, 5.0, 5.0], [1, 1, 1, 1], ["a", "a", "b", "b"], group_baseline=True
    )
    # values 0.5, -0.5, 0, 0: mu 0, var 0.125
    assert out == pytest.approx([0.5 / math.sqrt(0.125), -0.5 / math.sqrt(0.125), 0, 0], rel=1e-5)


def test_ipa_chunk_returns() -> None:
    assert adv.ipa_returns(1.0, 3, 0.5) == [0.25, 0.5, 1.0]
    assert adv.ipa_returns(2.0, 1, 0.9) == [2.0]
    out = adv.chunk_advantages(
        "ipa", [1.0, 0.0], ["g", "g"], [2, 1], [5, 5], gamma=0.5, baseline="group_mean"
    )
    assert out == [[0.25, 0.5], [-0.5]]


def test_rewards_must_be_finite() -> None:
    with pytest.raises(ValueError, match="finite"):
        adv.grpo([float("nan")], ["g"])


# -- losses ----------------------------------------------------------------------------------


def test_ppo_token_clip_symmetric_and_asymmetric() -> None:
    logp = [math.log(1.5), math.log(0.9), math.log(0.7)]
    tokens = _tokens(advantage=[1.0, 1.0, -1.0], old=[0.0, 0.0, 0.0])
    loss, grad = _grad(LossSpec(), logp, tokens)
    # token 1: min(1.5, 1.2) -> clipped, -1.2; token 2: -0.9, d/dlogp = -r*A = -0.9;
    # token 3: A=-1: min(-0.7, -0.8) = -0.8 -> clipped, +0.8
    assert loss == pytest.approx((-1.2 - 0.9 + 0.8) / 3, rel=1e-6)
    assert grad == pytest.approx([0.0, -0.9 / 3, 0.0], abs=1e-7)
    loss, grad = _grad(LossSpec(clip_low=0.2, clip_high=0.6), logp, tokens)
    assert loss == pytest.approx((-1.5 - 0.9 + 0.8) / 3, rel=1e-6)
    assert grad == pytest.approx([-1.5 / 3, -0.9 / 3, 0.0], abs=1e-7)


def test_chunk_ratio_is_geometric_mean_over_the_chunk() -> None:
    logp = [0.2, -0.4, 0.1]
    tokens = _tokens(
        advantage=[1.0, 1.0, 1.0],
        old=[0.0, 0.0, 0.0],
        chunk=torch.tensor([0, 0, 1]),
        weight=[1.0, 1.0, 1.0],
    )
    spec = LossSpec(ratio_level="chunk", clip_low=0.5, clip_high=0.5)
    loss, grad = _grad(spec, logp, tokens)
    r0 = math.exp(-0.1)
    r1 = math.exp(0.1)
    assert loss == pytest.approx(-(2 * r0 + r1), rel=1e-6)
    # d/dlogp_t of -(r0 + r0) with r0 = exp(mean) = -2 * r0 * 0.5 for each token in chunk 0
    assert grad == pytest.approx([-r0, -r0, -r1], rel=1e-6)


def test_gspo_sequence_ratio_ignores_non_rl_tokens() -> None:
    logp = [0.3, -0.1, 5.0]
    tokens = _tokens(
        advantage=[1.0, 1.0, 0.0],
        old=[0.0, 0.0, 0.0],
        chunk=torch.tensor([0, 1, 2]),
        rl=torch.tensor([True, True, False]),
        weight=[0.5, 0.5, 0.0],
    )
    spec = LossSpec(ratio_level="sequence", clip_low=3e-4, clip_high=4e-4)
    loss, grad = _grad(spec, logp, tokens)
    s = math.exp(0.1)  # mean of 0.3 and -0.1; token 3 is not an RL token
    assert s > 1 + 4e-4  # clipped: the constant 1.0004 is used, no gradient
    assert loss == pytest.approx(-(1 + 4e-4), rel=1e-6)
    assert grad == [0.0, 0.0, 0.0]
    tokens.old = torch.tensor([0.1, 0.1, 0.0])  # ratio exp(0.0) = 1: inside the clip range
    loss, grad = _grad(spec, logp, tokens)
    assert loss == pytest.approx(-1.0, rel=1e-6)
    # loss = -sum_t w_t * s, ds/dlogp_i = s / 2 for each of the two RL tokens: -(0.5 + 0.5) * 1 / 2
    assert grad == pytest.approx([-0.5, -0.5, 0.0], rel=1e-6)


def test_ipa_positive_is_plain_reinforce_and_negative_is_truncated() -> None:
    # seq 0 positive (A = 1, no IS, even with a large ratio); seq 1 non-positive, A = -1,
    # chunk 1 ratio exp(mean(log .5, log .5)) = .5 -> weight .5; chunk 2 ratio 2 -> weight 1
    logp = [math.log(4.0), math.log(0.5), math.log(0.5), math.log(2.0)]
    tokens = _tokens(
        advantage=[1.0, -1.0, -1.0, -1.0],
        old=[0.0, 0.0, 0.0, 0.0],
        seq=torch.tensor([0, 1, 1, 1]),
        chunk=torch.tensor([0, 1, 1, 2]),
        positive=torch.tensor([True, False, False, False]),
        weight=[1.0, 1.0, 1.0, 1.0],
    )
    loss, grad = _grad(LossSpec(loss="ipa"), logp, tokens)
    expected = -1.0 * logp[0] + 0.5 * logp[1] + 0.5 * logp[2] + 1.0 * logp[3]
    assert loss == pytest.approx(expected, rel=1e-6)
    assert grad == pytest.approx([-1.0, 0.5, 0.5, 1.0], rel=1e-6)


def test_mismatch_mask_zeroes_whole_chunks() -> None:
    # chunk 0: mean(old - mu) = mean(1.0, 0.0) = 0.5 -> exp = 1.65 > H = 1.5 -> masked
    # chunk 1: mean(0.2) -> exp 1.22 <= 1.5 -> kept; chunk 2: mu unknown -> kept
    logp = [-1.0, -1.0, -1.0, -1.0]
    tokens = _tokens(
        advantage=[1.0, 1.0, 1.0, 1.0],
        old=[-1.0, -1.0, -1.0, -1.0],
        mu=torch.tensor([-2.0, -1.0, -1.2, float("nan")]),
        chunk=torch.tensor([0, 0, 1, 2]),
        weight=[1.0, 1.0, 1.0, 1.0],
        positive=torch.tensor([False] * 4),
    )
    for spec in (LossSpec(loss="ipa", mismatch_threshold=1.5), LossSpec(mismatch_threshold=1.5)):
        logp_t = torch.tensor(logp, requires_grad=True)
        loss, stats = policy_loss(logp_t, tokens, spec)
        loss.backward()
        assert logp_t.grad is not None
        assert logp_t.grad[:2].tolist() == [0.0, 0.0]
        assert all(g != 0.0 for g in logp_t.grad[2:].tolist())
        assert stats["masked_tokens"].item() == 2
        assert stats["rl_tokens"].item() == 4


def test_mismatch_figures_cover_the_rl_tokens_whose_sampling_logprob_is_known() -> None:
    # old - mu: 1.0, 0.0, 0.2 at the known RL tokens; token 3's mu unknown, token 4 not RL
    tokens = _tokens(
        advantage=[1.0] * 5,
        mu=torch.tensor([-2.0, -1.0, -1.2, float("nan"), -9.0]),
        chunk=torch.tensor([0, 0, 1, 2, 2]),
        rl=torch.tensor([True, True, True, True, False]),
    )
    log_ratio = mismatch_log_ratio(tokens, torch.full((5,), -1.0))
    assert log_ratio.tolist() == pytest.approx([1.0, 0.0, 0.2])
    figures = mismatch_summary(log_ratio, masked_tokens=2.0, rl_tokens=4.0)
    assert figures == pytest.approx({
        "masked_share": 0.5, "tokens": 3.0, "log_ratio_mean": 0.4, "log_ratio_abs_mean": 0.4,
        "log_ratio_abs_p99": 0.984, "log_ratio_abs_max": 1.0,
    })  # fmt: skip
    unknown = mismatch_summary(torch.zeros(0), masked_tokens=0.0, rl_tokens=3.0)
    assert unknown == {"masked_share": 0.0, "tokens": 0.0}  # no spread without any mu
    no_mu = _tokens(advantage=[1.0])
    assert mismatch_log_ratio(no_mu, torch.zeros(1)).numel() == 0


def test_kl_k3_and_entropy_terms() -> None:
    logp = torch.tensor([-1.0, -2.0], requires_grad=True)
    tokens = _tokens(advantage=[0.0, 0.0], old=[-1.0, -2.0], ref=[-1.5, -1.0], weight=[1.0, 1.0])
    entropy = torch.tensor([0.7, 0.3], requires_grad=True)
    loss, stats = policy_loss(
        logp, tokens, LossSpec(kl_coef=0.1, entropy_coef=0.01), entropy=entropy
    )
    d = torch.tensor([-0.5, 1.0])
    k3 = (torch.exp(d) - d - 1).sum().item()
    assert stats["kl"].item() == pytest.approx(k3, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3 - 0.01 * 1.0, rel=1e-6)
    loss.backward()
    assert logp.grad is not None and entropy.grad is not None
    # d k3 / d logp = 1 - exp(ref - logp)
    assert logp.grad.tolist() == pytest.approx((0.1 * (1 - torch.exp(d))).tolist(), rel=1e-5)
    assert entropy.grad.tolist() == pytest.approx([-0.01, -0.01])


def test_imitation_term_is_weighted_nll() -> None:
    logp = torch.tensor([-1.0, -3.0], requires_grad=True)
    tokens = _tokens(
        advantage=[0.0, 0.0],
        rl=torch.tensor([False, False]),
        imitation=[0.25, 0.75],
    )
    loss, _ = policy_loss(logp, tokens, LossSpec())
    assert loss.item() == pytest.approx(0.25 * 1 + 0.75 * 3)
    loss.backward()
    assert logp.grad is not None and logp.grad.tolist() == [-0.25, -0.75]


def test_segment_mean() -> None:
    values = torch.tensor([1.0, 3.0, 10.0, 4.0])
    assert segment_mean(values, torch.tensor([0, 0, 2, 0])).tolist() == pytest.approx(
        [8 / 3, 8 / 3, 10.0, 8 / 3]
    )


# -- aggregation and micro-batches -----------------------------------------------------------


def _sample(n: int, rl: list[bool], reward: float, group: str) -> Sample:
    from ale.chunking import chunk_ids

    ids = list(range(n))
    return Sample(
        input_ids=ids, rl_mask=rl, chunk_ids=chunk_ids(ids, rl), reward=reward, group=group
    )


def test_aggregation_weights() -> None:
    a = _sample(4, [False, True, True, True], 1.0, "g")
    b = _sample(3, [False, True, False], 0.0, "g")
    c = _sample(2, [False, False], 0.0, "g")
    set_weights([a, b, c], "token_mean")
    assert a.weight == [0, 0.25, 0.25, 0.25] and b.weight == [0, 0.25, 0] and c.weight == [0, 0]
    set_weights([a, b, c], "seq_mean_token_mean")
    assert a.weight[1] == pytest.approx(1 / 6) and b.weight[1] == pytest.approx(1 / 2)
    set_weights([a, b, c], "seq_mean_token_sum")
    assert a.weight[1] == 0.5 and b.weight[1] == 0.5
    set_weights([a, b, c], "seq_mean_token_sum_norm", norm_length=10)
    assert a.weight[1] == pytest.approx(1 / 20)


def test_advantages_broadcast_to_chunk_tokens() -> None:
    s = _sample(7, [False, True, True, False, True, False, True], 1.0, "g")
    t = _sample(3, [False, True, True], 0.0, "g")
    assign_advantages([s, t], "ipa", gamma=0.5)
    assert s.advantages == [0.0, 0.25, 0.25, 0.0, 0.5, 0.0, 1.0]
    assert t.advantages == [0.0, 0.0, 0.0]


def test_ipa_positive_follows_the_return_after_the_baseline() -> None:
    samples = [_sample(3, [False, True, True], r, "g") for r in (1.0, 0.5, 0.0)]
    assign_advantages(samples, "ipa")
    assert [s.positive for s in samples] == [True, True, False]
    assign_advantages(samples, "ipa", baseline="group_mean")  # mean 0.5: returns .5, 0, -.5
    assert [s.positive for s in samples] == [True, False, False]


def test_micro_batches_respect_the_budget() -> None:
    samples = [_sample(n, [True] * n, 0.0, "g") for n in (10, 3, 7, 3, 2, 12)]
    batches = micro_batches(samples, 20)
    assert sorted(len(s) for b in batches for s in b) == [2, 3, 3, 7, 10, 12]
    for batch in batches:
        assert len(batch) == 1 or max(len(s) for s in batch) * len(batch) <= 20
