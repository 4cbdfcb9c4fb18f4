"""HFBackend against a tiny model built here: its log-probs are the ones a forward pass gives."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ale.chunking import chunk_ids  # noqa: E402
from iflow.models.tiny import build_tiny_model  # noqa: E402
from roll.algo.batch import Sample  # noqa: E402
from roll.algo.losses import LossSpec  # noqa: E402
from roll.config import OptimConfig  # noqa: E402
from roll.errors import GenerationError  # noqa: E402
from roll.generation import GenerationBackend, HFBackend, SamplingParams  # noqa: E402
from roll.update import Updater  # noqa: E402

TEXTS = [
    "hello world",
    "ls -la && cd src && cat README.md | head -n 20",
    "x",
    "def add(a: int, b: int) -> int:",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="module")
def backend(model_dir: Path) -> HFBackend:
    return HFBackend.from_path(model_dir, device="cpu")


@pytest.fixture(scope="module")
def prompts(backend: HFBackend) -> list[list[int]]:
    return [backend.tokenizer.encode(text) for text in TEXTS]


def reference_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float, top_p: float
) -> list[float]:
    """Log-probs of ``completion`` from one unpadded forward pass, no cache."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    out = []
    for row, token in zip(logits, completion, strict=True):
        if temperature == 0.0:
            assert token == int(row.argmax())
            out.append(float(torch.log_softmax(row, -1)[token]))
            continue
        scaled = row / temperature
        probs = torch.softmax(scaled, -1)
        ranked = probs.argsort(descending=True)
        mass_before = probs[ranked].cumsum(0) - probs[ranked]
        nucleus = ranked[: int((mass_before < top_p).sum())]
        assert token in nucleus.tolist(), "sampled a token outside the nucleus"
        out.append(float(scaled[token] - torch.logsumexp(scaled[nucleus], 0)))
    return out


def greedy(backend: HFBackend, prompts: list[list[int]], n: int = 6) -> list[list[int]]:
    gens = backend.generate(prompts, SamplingParams(max_new_tokens=n, temperature=0.0))
    return [g.token_ids for g in gens]


def count_calls(model: Any) -> tuple[list[tuple[int, int]], Any]:
    """Record the input_ids shape of every forward call."""
    shapes: list[tuple[int, int]] = []

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        shapes.append(tuple(kwargs["input_ids"].shape))

    return shapes, model.register_forward_pre_hook(hook, with_kwargs=True)


def test_it_is_a_generation_backend(backend: HFBackend) -> None:
    assert isinstance(backend, GenerationBackend)
    assert backend.name == "hf"
    assert backend.eos_token_ids == (backend.tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    assert backend.generate([], SamplingParams()) == []


@pytest.mark.parametrize(("temperature", "top_p"), [(1.0, 1.0), (0.7, 1.0), (1.0, 0.9), (0.7, 0.9)])
def test_sampled_logprobs_equal_a_forward_pass(
    backend: HFBackend, prompts: list[list[int]], temperature: float, top_p: float
) -> None:
    params = SamplingParams(max_new_tokens=8, temperature=temperature, top_p=top_p, seed=3)
    gens = backend.generate(prompts, params)
    assert len(gens) == len(prompts)
    for prompt, gen in zip(prompts, gens, strict=True):
        assert len(gen.token_ids) == len(gen.logprobs)
        stopped = gen.token_ids[-1] in backend.eos_token_ids  # (drawn: the tiny model's is flat)
        assert len(gen.token_ids) == 8 or (stopped and gen.finish_reason == "stop")
        expected = reference_logprobs(backend.model, prompt, gen.token_ids, temperature, top_p)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_greedy_batched_equals_one_at_a_time_with_untempered_logprobs(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_new_tokens=6, temperature=0.0, top_p=0.5)
    batched = backend.generate(prompts, params)
    for prompt, gen in zip(prompts, batched, strict=True):
        (single,) = backend.generate([prompt], params)
        assert single.token_ids == gen.token_ids
        assert single.logprobs == pytest.approx(gen.logprobs, abs=1e-5)
        expected = reference_logprobs(backend.model, prompt, gen.token_ids, 0.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_kv_cache_path_equals_recomputation_without_cache(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    (gen,) = backend.generate([prompts[1]], SamplingParams(max_new_tokens=6, temperature=0.0))
    ids = list(prompts[1])
    tokens, logprobs = [], []
    with torch.no_grad():
        for _ in range(6):
            logits = backend.model(torch.tensor([ids]), use_cache=False).logits[0, -1].float()
            token = int(logits.argmax())
            tokens.append(token)
            logprobs.append(float(torch.log_softmax(logits, -1)[token]))
            ids.append(token)
    assert gen.token_ids == tokens
    assert gen.logprobs == pytest.approx(logprobs, abs=1e-5)


def test_seeds_reproduce_without_touching_global_rng(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_new_tokens=8, seed=11)
    state = torch.get_rng_state()
    first = backend.generate(prompts, params)
    assert torch.equal(state, torch.get_rng_state())
    again = backend.generate(prompts, params)
    assert [g.token_ids for g in again] == [g.token_ids for g in first]
    # the log-probs to float32 rounding: a batch's kernels may sum in another order under load
    for one, two in zip(again, first, strict=True):
        assert one.logprobs == pytest.approx(two.logprobs, abs=1e-5)
    other = backend.generate(prompts, params.model_copy(update={"seed": 12}))
    assert [g.token_ids for g in other] != [g.token_ids for g in first]
    group = backend.generate([prompts[0]] * 4, params)
    assert len({tuple(g.token_ids) for g in group}) > 1, "a repeated prompt got one sample"


def test_max_new_tokens_ends_with_length(backend: HFBackend, prompts: list[list[int]]) -> None:
    for gen in backend.generate(prompts, SamplingParams(max_new_tokens=3, seed=0)):
        assert len(gen.token_ids) == 3
        assert gen.finish_reason == "length"


def test_generation_config_eos_stops_and_is_included(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    first = greedy(backend, [prompts[0]], n=1)[0][0]
    model = copy.deepcopy(backend.model)
    model.generation_config.eos_token_id = [backend.eos_token_ids[0], first]
    eos_backend = HFBackend(model, backend.tokenizer)
    assert first in eos_backend.eos_token_ids
    (gen,) = eos_backend.generate([prompts[0]], SamplingParams(temperature=0.0))
    assert gen.token_ids == [first]
    assert len(gen.logprobs) == 1
    assert gen.finish_reason == "stop"


def test_rows_stop_at_their_own_step_and_the_loop_ends_early(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    stop = tuple(range(0, 260))  # about half the vocabulary: rows end after a few tokens
    params = SamplingParams(max_new_tokens=40, temperature=1.0, stop_token_ids=stop, seed=5)
    shapes, handle = count_calls(backend.model)
    try:
        gens = backend.generate(prompts * 2, params)
    finally:
        handle.remove()
    assert len(shapes) < 40, "decoding went on after every row had stopped"
    assert {g.finish_reason for g in gens} == {"stop"}
    assert len({len(g.token_ids) for g in gens}) > 1
    for prompt, gen in zip(prompts * 2, gens, strict=True):
        assert gen.token_ids[-1] in stop
        assert not set(gen.token_ids[:-1]) & set(stop)
        expected = reference_logprobs(backend.model, prompt, gen.token_ids, 1.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_sub_batches_bound_the_kv_cache_and_change_nothing(
    model_dir: Path, backend: HFBackend, prompts: list[list[int]]
) -> None:
    limit = 60
    small = HFBackend(backend.model, backend.tokenizer, max_batch_tokens=limit, max_batch_size=3)
    shapes, handle = count_calls(backend.model)
    try:
        bounded = greedy(small, prompts, n=6)
    finally:
        handle.remove()
    prefills = [(rows, width) for rows, width in shapes if width > 1]
    assert len(prefills) > 1
    for rows, width in prefills:
        assert rows <= 3
        assert rows == 1 or rows * (width + 6) <= limit
    assert bounded == greedy(backend, prompts, n=6)


def test_sync_weights_copies_into_a_separate_module(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    trainer = copy.deepcopy(backend.model)
    copy_backend = HFBackend(copy.deepcopy(trainer), backend.tokenizer)
    before = greedy(copy_backend, prompts)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in trainer.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    assert greedy(copy_backend, prompts) == before
    copy_backend.sync_weights(trainer, 7)
    assert copy_backend.policy_version == 7
    assert copy_backend.model is not trainer
    after = greedy(copy_backend, prompts)
    assert after != before
    shared = HFBackend(trainer, backend.tokenizer)
    assert greedy(shared, prompts) == after
    shared.sync_weights(trainer, 8)
    assert shared.policy_version == 8
    assert shared.model is trainer


def test_sync_weights_rejects_another_architecture(backend: HFBackend, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    other = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path, hidden_size=32))
    copy_backend = HFBackend(copy.deepcopy(backend.model), backend.tokenizer)
    with pytest.raises(GenerationError, match="do not fit"):
        copy_backend.sync_weights(other, 1)
    assert copy_backend.policy_version == 0


def test_generation_restores_train_mode(backend: HFBackend, prompts: list[list[int]]) -> None:
    backend.model.train()
    try:
        backend.generate(prompts[:1], SamplingParams(max_new_tokens=2, seed=0))
        assert backend.model.training
    finally:
        backend.model.eval()


def test_bad_prompts_are_errors_with_one_sentence(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    with pytest.raises(GenerationError, match=r"^prompt 1 is empty; .*\.$"):
        backend.generate([prompts[0], []], SamplingParams())
    with pytest.raises(GenerationError, match="outside the model's vocabulary"):
        backend.generate([[1, 10**6]], SamplingParams())


def test_a_closed_backend_refuses_work(model_dir: Path, prompts: list[list[int]]) -> None:
    closing = HFBackend.from_path(model_dir, device="cpu", dtype="float32")
    closing.close()
    with pytest.raises(GenerationError, match="closed"):
        closing.generate(prompts, SamplingParams())


def test_a_shared_prefix_is_computed_once_and_changes_nothing(backend: HFBackend) -> None:
    """Prompts that begin alike (an agent's system prompt) share one forward pass of that
    prefix: the same samples and log-probs as a plain forward, the prefix kept for the next
    call and computed again after a weight sync."""
    tok = backend.tokenizer
    system = tok.encode("you are an agent; run one command at a time and say done. " * 3)
    assert len(system) >= 16
    shared_prompts = [system + tok.encode(text) for text in TEXTS]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=11)
    shapes, hook = count_calls(backend.model)
    try:
        gens = backend.generate(shared_prompts, params)
        again = backend.generate(shared_prompts, params)
        backend.sync_weights(backend.model, backend.policy_version + 1)
        backend.generate(shared_prompts, params)
    finally:
        hook.remove()
    prefix_passes = [s for s in shapes if s[0] == 1 and s[1] >= len(system)]
    assert len(prefix_passes) == 2  # the first call, and the first after the sync
    assert [g.token_ids for g in again] == [g.token_ids for g in gens]
    for prompt, gen in zip(shared_prompts, gens, strict=True):
        expected = reference_logprobs(backend.model, prompt, gen.token_ids, 1.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_a_lone_prompt_uses_the_kept_prefix(backend: HFBackend) -> None:
    tok = backend.tokenizer
    system = tok.encode("you are an agent; run one command at a time and say done. " * 3)
    backend.generate([system + tok.encode(t) for t in TEXTS[:2]], SamplingParams(max_new_tokens=2))
    lone = system + tok.encode("cat notes.txt")
    shapes, hook = count_calls(backend.model)
    try:
        (gen,) = backend.generate([lone], SamplingParams(max_new_tokens=4, temperature=0.0))
    finally:
        hook.remove()
    assert shapes[0] == (1, len(lone) - len(system))  # only its own tokens went forward
    assert gen.logprobs == pytest.approx(
        reference_logprobs(backend.model, lone, gen.token_ids, 0.0, 1.0), abs=1e-5
    )


def test_a_next_turn_runs_only_its_new_tokens(model_dir: Path) -> None:
    """An agent's second turn (its first prompt, the sampled answer, a tool's output) reuses
    the first turn's keys and values: one token of the answer and the new text go forward,
    and it samples what a plain forward pass gives. Without the cache all of it goes."""
    fresh = HFBackend.from_path(model_dir, device="cpu")
    tok = fresh.tokenizer
    first = tok.encode("you are an agent; run one command at a time and say done. " * 2)
    params = SamplingParams(max_new_tokens=8, temperature=1.0, seed=3)
    (answer,) = fresh.generate([first], params)
    tool = tok.encode(" output: README.md src tests")
    second = first + answer.token_ids + tool
    for backend, runs in (
        (fresh, len(tool) + 1),
        (HFBackend(fresh.model, tok, max_cached_tokens=0), len(second)),
    ):
        shapes, hook = count_calls(backend.model)
        try:
            (gen,) = backend.generate([second], params)
        finally:
            hook.remove()
        assert shapes[0] == (1, runs)
        expected = reference_logprobs(backend.model, second, gen.token_ids, 1.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def test_rows_with_kept_prefixes_of_other_lengths_decode_together(model_dir: Path) -> None:
    """One call mixes a row that extends a long kept sequence, one that extends a short one
    and one with nothing kept: each samples with the log-probs of a plain forward pass."""
    backend = HFBackend.from_path(model_dir, device="cpu")
    tok = backend.tokenizer
    long = tok.encode("cat README.md | head -n 20 && ls -la src && echo done " * 3)
    short = tok.encode("def add(a: int, b: int) -> int: return a + b  # sums")
    greedy(backend, [long], 2)
    greedy(backend, [short], 2)
    assert backend.prefix_cache is not None and len(backend.prefix_cache) == 2
    rows = [long + tok.encode(" next"), tok.encode("x y z"), short + tok.encode(" more please")]
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=9)
    shapes, hook = count_calls(backend.model)
    try:
        gens = backend.generate(rows, params)
    finally:
        hook.remove()
    assert shapes[0][1] < len(short)  # the kept parts did not go forward again
    for prompt, gen in zip(rows, gens, strict=True):
        expected = reference_logprobs(backend.model, prompt, gen.token_ids, 1.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)


def _sliding_window_backend(backend: HFBackend) -> HFBackend:
    """A backend over a one-layer Mistral whose cache keeps a sliding window of 8."""
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        vocab_size=backend._vocab_size, hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2, sliding_window=8,
    )  # fmt: skip
    return HFBackend(MistralForCausalLM(config), backend.tokenizer)


def test_the_prefix_cache_is_off_for_sliding_windows_and_emptied_by_a_sync(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    assert _sliding_window_backend(backend).prefix_cache is None
    greedy(backend, prompts)
    assert backend.prefix_cache is not None and backend.prefix_cache.tokens > 0
    backend.sync_weights(backend.model, backend.policy_version + 1)
    assert backend.prefix_cache.tokens == 0


def count_masks(model: Any) -> tuple[list[tuple[int, int]], Any]:
    """Record the (rows, attention-mask width) of every forward call."""
    shapes: list[tuple[int, int]] = []

    def hook(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        shapes.append(tuple(kwargs["attention_mask"].shape))

    return shapes, model.register_forward_pre_hook(hook, with_kwargs=True)


def drain(session: Any, finished: dict[int, Any], order: list[int]) -> None:
    while session.rows:
        for key, gen in session.step():
            finished[key] = gen
            order.append(key)


def test_rows_join_a_running_session_and_sample_what_a_forward_pass_gives(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    """Continuous batching: rows admitted while others decode (left-padded caches of other
    lengths stacked) sample with exactly the log-probs of a plain forward pass, each with its
    own budget; the late short one finishes first and leaves the batch."""
    session = backend.open_session(SamplingParams(temperature=1.0, seed=4))
    early = session.admit(prompts[:2], [12, 12])
    finished: dict[int, Any] = {}
    order: list[int] = []
    shapes, hook = count_masks(backend.model)
    try:
        for _ in range(3):
            for key, gen in session.step():
                finished[key] = gen
        late = session.admit(prompts[2:], [2, 12])
        assert session.rows == 4 - len(finished)
        drain(session, finished, order)
    finally:
        hook.remove()
    budgets = dict(zip(early + late, [12, 12, 2, 12], strict=True))
    prompt_of = dict(zip(early + late, prompts, strict=True))
    for key, gen in finished.items():
        assert len(gen.token_ids) == budgets[key] or gen.finish_reason == "stop"
        expected = reference_logprobs(backend.model, prompt_of[key], gen.token_ids, 1.0, 1.0)
        assert gen.logprobs == pytest.approx(expected, abs=1e-5)
    assert order.index(late[0]) < min(order.index(k) for k in early if k in order)
    decode_rows = [rows for rows, _ in shapes[1:]]  # after the late rows' prefill
    assert decode_rows[-1] < max(decode_rows), "finished rows kept decoding"


def test_a_session_row_greedy_equals_generating_it_alone(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    params = SamplingParams(max_new_tokens=6, temperature=0.0)
    session = backend.open_session(params)
    keys = session.admit([prompts[1]], [6])
    session.step()
    keys += session.admit([prompts[0], prompts[3]], [6, 6])
    finished: dict[int, Any] = {}
    drain(session, finished, [])
    for key, prompt in zip(keys, [prompts[1], prompts[0], prompts[3]], strict=True):
        (alone,) = backend.generate([prompt], params)
        assert finished[key].token_ids == alone.token_ids
        assert finished[key].logprobs == pytest.approx(alone.logprobs, abs=1e-5)


def test_cache_columns_no_row_needs_are_trimmed(backend: HFBackend) -> None:
    """A long prompt's row leaves: the short row after it attends over its own length, not
    the long one's."""
    tok = backend.tokenizer
    long_prompt = tok.encode("cat README.md | head -n 20 && ls -la src " * 4)
    short_prompt = tok.encode("x")
    session = backend.open_session(SamplingParams(temperature=0.0))
    session.admit([long_prompt, short_prompt], [1, 5])
    shapes, hook = count_masks(backend.model)
    try:
        drain(session, {}, [])
    finally:
        hook.remove()
    assert shapes, "the short row decoded alone"
    assert all(rows == 1 for rows, _ in shapes)
    assert max(width for _, width in shapes) < len(long_prompt)


def test_decode_steps_write_into_the_cache_s_spare_room(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    """A step's keys and values go into free columns of the cache's buffers, not onto a copy
    of the whole cache (transformers' plain layer concatenates: a copy per layer per step);
    a row leaving copies once, then steps go on in the new buffers."""
    session = backend.open_session(SamplingParams(temperature=0.0))
    session.admit(prompts[:3], [12, 12, 3])
    session.step()
    layer = session._cache.layers[0]
    where, length = (layer.keys.data_ptr(), layer.values.data_ptr()), layer.keys.shape[-2]
    session.step()
    assert (layer.keys.data_ptr(), layer.values.data_ptr()) == where
    assert layer.keys.shape[-2] == layer.values.shape[-2] == length + 1
    while session.rows == 3:
        session.step()  # (the step a row leaves copies the two rows left into new buffers)
    where = layer.keys.data_ptr()
    session.step()
    assert layer.keys.data_ptr() == where and layer.keys.shape[0] == 2
    drain(session, {}, [])


def test_a_sliding_window_cache_takes_rows_only_when_empty(
    backend: HFBackend, prompts: list[list[int]]
) -> None:
    sliding = _sliding_window_backend(backend)
    session = sliding.open_session(SamplingParams(temperature=0.0))
    assert session.fits([5], [4])
    session.admit([prompts[0]], [4])
    assert not session.fits([5], [4])
    with pytest.raises(GenerationError, match="empty session"):
        session.admit([prompts[1]], [4])
    drain(session, {}, [])
    assert session.fits([5], [4])


def test_session_fits_the_batch_bounds(backend: HFBackend, prompts: list[list[int]]) -> None:
    small = HFBackend(backend.model, backend.tokenizer, max_batch_size=2, max_batch_tokens=80)
    session = small.open_session(SamplingParams(temperature=0.0))
    assert session.fits([10, 10], [20, 20])  # 2 x (10 + 20) <= 80
    assert not session.fits([10, 10, 10], [1, 1, 1])  # three rows
    assert not session.fits([30, 10], [20, 20])  # 2 x (30 + 20) > 80
    assert session.fits([500], [100])  # alone in an empty session, as in a sub-batch
    session.admit([prompts[0]], [20])
    assert not session.fits([10, 10], [1, 1])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_trainer_scores_the_policy_that_sampled(
    backend: HFBackend, prompts: list[list[int]], temperature: float
) -> None:
    """RL at temperature T trains the tempered policy: the updater's log-probs of the sampled
    tokens are the sampler's (ratio 1 before any update), and T=1 ones would not be."""
    params = SamplingParams(max_new_tokens=8, temperature=temperature, seed=9)
    gens = backend.generate(prompts[:2], params)
    samples = [
        Sample(
            input_ids=list(prompt) + list(gen.token_ids),
            rl_mask=[False] * len(prompt) + [True] * len(gen.token_ids),
            chunk_ids=chunk_ids(
                list(prompt) + list(gen.token_ids),
                [False] * len(prompt) + [True] * len(gen.token_ids),
            ),
        )
        for prompt, gen in zip(prompts[:2], gens, strict=True)
    ]
    lm = copy.deepcopy(backend.model)

    def scored(at: float) -> list[float]:
        updater = Updater(
            lm, OptimConfig(lr=1e-3), total_steps=1, spec=LossSpec(), pad_id=0,
            micro_batch_tokens=4096, max_bad_steps=1, temperature=at,
        )  # fmt: skip
        return [v for s, row in zip(samples, updater.logprobs(samples), strict=True)
                for v, m in zip(row, s.rl_mask, strict=True) if m]  # fmt: skip

    sampled = [v for gen in gens for v in gen.logprobs]
    assert scored(temperature) == pytest.approx(sampled, abs=1e-4)
    if temperature != 1.0:
        assert scored(1.0) != pytest.approx(sampled, abs=1e-3)


def test_the_sampler_draws_each_token_with_its_probability_from_one_uniform_a_row() -> None:
    """Sampling inverts each row's cumulative distribution at one uniform draw: what
    ``torch.multinomial`` did with a random number per vocabulary entry (12-20 % of a decode
    step on CPU for a 49,152-token vocabulary). Tokens outside the nucleus are never drawn."""
    from roll.generation.hf_session import _sample

    probs = torch.tensor([0.5, 0.25, 0.0, 0.125, 0.125])
    logits = probs.clamp_min(1e-30).log().where(probs > 0, torch.tensor(float("-inf")))
    rows = logits.repeat(20_000, 1)
    generator = torch.Generator().manual_seed(0)
    token, logp = _sample(rows, SamplingParams(max_new_tokens=1, temperature=1.0), generator)
    counts = torch.bincount(token, minlength=5).float() / len(token)
    assert counts[2] == 0
    assert torch.allclose(counts, probs, atol=0.01)
    assert torch.allclose(logp, probs.log()[token])
    used = torch.Generator().manual_seed(0)
    torch.rand(len(rows), 1, generator=used)
    assert torch.equal(generator.get_state(), used.get_state())  # one uniform a row
    nucleus = SamplingParams(max_new_tokens=1, temperature=1.0, top_p=0.6)
    token, _ = _sample(rows[:2000], nucleus, torch.Generator().manual_seed(1))
    assert set(token.tolist()) <= {0, 1}
