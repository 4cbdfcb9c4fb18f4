"""VLLMBackend at its seam: a fake ``vllm`` module shaped like vLLM's offline API.

The last test runs the real engine where vllm and a CUDA GPU are present.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from roll.errors import GenerationError
from roll.generation import GenerationBackend, SamplingParams, VLLMBackend

EOS = 2


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True


class FakeSamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@dataclass
class FakeModel:
    loaded: list[list[tuple[str, Any]]] = field(default_factory=list)

    def load_weights(self, weights: Any) -> set[str]:
        self.loaded.append(list(weights))
        return {name for name, _ in weights}


class FakeLLM:
    """Answers each prompt ``p`` with ``p[-1] + 1, p[-1] + 2, ...``; a prompt ending in 7
    stops on EOS after two tokens, the others run to ``max_tokens``."""

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.model_path = model
        self.kwargs = kwargs
        self.model = FakeModel()
        self.generate_calls: list[tuple[list[Any], list[FakeSamplingParams], bool]] = []
        self.events: list[str] = []
        self.finish_reason: str | None = None

    def generate(
        self, prompts: list[Any], sampling_params: Any = None, *, use_tqdm: bool = True
    ) -> list[RequestOutput]:
        self.generate_calls.append((prompts, sampling_params, use_tqdm))
        outputs = []
        for index, (prompt, sampling) in enumerate(zip(prompts, sampling_params, strict=True)):
            ids = prompt["prompt_token_ids"]
            if ids[-1] == 7:
                tokens, reason = [8, EOS], "stop"
            else:
                tokens, reason = (
                    [ids[-1] + k for k in range(1, sampling.kwargs["max_tokens"] + 1)],
                    "length",
                )
            steps = [
                {token: Logprob(-0.1 * (k + 1), rank=2), 99: Logprob(-0.01, rank=1)}
                for k, token in enumerate(tokens)
            ]
            completion = CompletionOutput(0, "", tokens, None, steps, self.finish_reason or reason)
            outputs.append(RequestOutput(str(index), ids, [completion]))
        return outputs

    def apply_model(self, func: Any) -> list[Any]:
        self.events.append("apply_model")
        return [func(self.model)]

    def reset_prefix_cache(self) -> bool:
        self.events.append("reset_prefix_cache")
        return True


class RpcOnlyLLM(FakeLLM):
    """An older engine: no apply_model, weights through collective_rpc to each worker."""

    apply_model = property()  # type: ignore[assignment]  # hasattr(...) is False

    def collective_rpc(self, method: Any, timeout: float | None = None) -> list[Any]:
        self.events.append("collective_rpc")
        runner = types.SimpleNamespace(get_model=lambda: self.model)
        return [method(types.SimpleNamespace(model_runner=runner))]


class NoLogprobsModeLLM(FakeLLM):
    def __init__(self, model: str, **kwargs: Any) -> None:
        if "logprobs_mode" in kwargs:
            raise TypeError(
                "EngineArgs.__init__() got an unexpected keyword argument 'logprobs_mode'"
            )
        super().__init__(model, **kwargs)


def fake_vllm(llm_class: type[FakeLLM] = FakeLLM) -> types.ModuleType:
    module = types.ModuleType("vllm")
    module.LLM = llm_class  # type: ignore[attr-defined]
    module.SamplingParams = FakeSamplingParams  # type: ignore[attr-defined]
    return module


@pytest.fixture
def vllm_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = fake_vllm()
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.delenv("VLLM_ALLOW_INSECURE_SERIALIZATION", raising=False)
    return module


def test_engine_options_reach_vllm_llm(vllm_module: types.ModuleType) -> None:
    import os

    backend = VLLMBackend(
        "/models/tiny",
        dtype="bfloat16",
        gpu_memory_utilization=0.3,
        seed=5,
        enable_prefix_caching=False,
        max_model_len=512,
        engine_kwargs={"enforce_eager": True},
    )
    assert isinstance(backend, GenerationBackend)
    assert backend.name == "vllm"
    assert backend.policy_version == 0
    llm = backend._llm
    assert llm.model_path == "/models/tiny"
    assert llm.kwargs == {
        "dtype": "bfloat16",
        "gpu_memory_utilization": 0.3,
        "seed": 5,
        "enable_prefix_caching": False,
        "logprobs_mode": "processed_logprobs",
        "max_model_len": 512,
        "enforce_eager": True,
    }
    assert os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"


def test_prompts_and_sampling_options_are_passed(vllm_module: types.ModuleType) -> None:
    backend = VLLMBackend("/models/tiny")
    params = SamplingParams(
        max_new_tokens=3, temperature=0.7, top_p=0.9, stop_token_ids=(5, 6), seed=10
    )
    backend.generate([[1, 2, 3], [4], [4]], params)
    ((prompts, sampling, use_tqdm),) = backend._llm.generate_calls
    assert prompts == [
        {"prompt_token_ids": [1, 2, 3]},
        {"prompt_token_ids": [4]},
        {"prompt_token_ids": [4]},
    ]
    assert use_tqdm is False
    assert [s.kwargs["seed"] for s in sampling] == [10, 11, 12]  # repeated prompts differ
    for s in sampling:
        assert s.kwargs | {"seed": None} == {
            "n": 1,
            "temperature": 0.7,
            "top_p": 0.9,
            "max_tokens": 3,
            "stop_token_ids": [5, 6],
            "logprobs": 0,
            "seed": None,
            "detokenize": False,
        }


def test_without_a_seed_vllm_picks(vllm_module: types.ModuleType) -> None:
    backend = VLLMBackend("/models/tiny")
    backend.generate([[1], [1]], SamplingParams(max_new_tokens=1, temperature=0.0))
    ((_, sampling, _),) = backend._llm.generate_calls
    assert [s.kwargs["seed"] for s in sampling] == [None, None]
    assert sampling[0].kwargs["temperature"] == 0.0


def test_outputs_become_generations(vllm_module: types.ModuleType) -> None:
    backend = VLLMBackend("/models/tiny")
    gens = backend.generate([[1, 2, 3], [6, 7]], SamplingParams(max_new_tokens=4))
    assert gens[0].token_ids == [4, 5, 6, 7]
    assert gens[0].logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4])  # the sampled ids'
    assert gens[0].finish_reason == "length"
    assert gens[1].token_ids == [8, EOS]
    assert gens[1].logprobs == pytest.approx([-0.1, -0.2])
    assert gens[1].finish_reason == "stop"
    assert backend.generate([], SamplingParams()) == []


def test_sync_weights_loads_name_tensor_pairs_then_resets_the_prefix_cache(
    vllm_module: types.ModuleType,
) -> None:
    torch = pytest.importorskip("torch")
    trainer = torch.nn.Linear(3, 2)
    backend = VLLMBackend("/models/tiny")
    backend.sync_weights(trainer, 4)
    llm = backend._llm
    assert llm.events == ["apply_model", "reset_prefix_cache"]
    ((names_and_tensors),) = llm.model.loaded
    assert [name for name, _ in names_and_tensors] == ["weight", "bias"]
    assert torch.equal(names_and_tensors[0][1], trainer.weight)
    assert not names_and_tensors[0][1].requires_grad
    assert backend.policy_version == 4


def test_sync_weights_falls_back_to_collective_rpc(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(RpcOnlyLLM))
    backend = VLLMBackend("/models/tiny")
    backend.sync_weights(torch.nn.Linear(3, 2), 1)
    assert backend._llm.events == ["collective_rpc", "reset_prefix_cache"]
    assert [name for name, _ in backend._llm.model.loaded[0]] == ["weight", "bias"]
    assert backend.policy_version == 1


def test_missing_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(GenerationError, match=r"pip install 'roll\[vllm\]'.*CUDA GPU"):
        VLLMBackend("/models/tiny")


def test_an_old_vllm_without_logprobs_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(NoLogprobsModeLLM))
    with pytest.raises(GenerationError, match=r"vllm>=0\.10\.2"):
        VLLMBackend("/models/tiny")


def test_unexpected_outputs_are_errors(vllm_module: types.ModuleType) -> None:
    backend = VLLMBackend("/models/tiny")
    with pytest.raises(GenerationError, match="prompt 0 is empty"):
        backend.generate([[], [1]], SamplingParams())
    backend._llm.finish_reason = "abort"
    with pytest.raises(GenerationError, match="finish reason 'abort'"):
        backend.generate([[1]], SamplingParams(max_new_tokens=2))
    backend.close()
    with pytest.raises(GenerationError, match="closed"):
        backend.generate([[1]], SamplingParams())


# -- the real engine -------------------------------------------------------------------------


def test_real_vllm_logprobs_match_an_hf_forward_pass(tmp_path: Path) -> None:
    pytest.importorskip("vllm", reason="vllm is not installed (GPU machines only)")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vllm needs a CUDA GPU and none is visible")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from iflow.models.tiny import build_tiny_model

    path = build_tiny_model(tmp_path / "model", hidden_size=128, heads=2)  # head dim 64
    tokenizer = AutoTokenizer.from_pretrained(path)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).cuda().eval()
    prompts = [tokenizer.encode(text) for text in ("hello world", "ls -la && cd src", "x")]
    backend = VLLMBackend(path, dtype="float16", gpu_memory_utilization=0.3, seed=0)
    try:
        for temperature in (0.0, 0.7):
            params = SamplingParams(max_new_tokens=8, temperature=temperature, seed=1)
            for prompt, gen in zip(prompts, backend.generate(prompts, params), strict=True):
                ids = torch.tensor([prompt + gen.token_ids], device="cuda")
                with torch.no_grad():
                    logits = reference(ids).logits[0, len(prompt) - 1 : -1].float()
                scale = temperature or 1.0
                expected = torch.log_softmax(logits / scale, -1)
                picked = expected.gather(-1, torch.tensor(gen.token_ids, device="cuda")[:, None])
                assert gen.logprobs == pytest.approx(picked.squeeze(-1).tolist(), abs=2e-2)
        generator = torch.Generator(device="cuda").manual_seed(0)
        with torch.no_grad():
            for param in reference.parameters():
                param.add_(torch.randn(param.shape, generator=generator, device="cuda") * 0.5)
        backend.sync_weights(reference, 1)
        params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=2)
        for prompt, gen in zip(prompts, backend.generate(prompts, params), strict=True):
            ids = torch.tensor([prompt + gen.token_ids], device="cuda")
            with torch.no_grad():
                logits = reference(ids).logits[0, len(prompt) - 1 : -1].float()
            picked = torch.log_softmax(logits, -1).gather(
                -1, torch.tensor(gen.token_ids, device="cuda")[:, None]
            )
            assert gen.logprobs == pytest.approx(picked.squeeze(-1).tolist(), abs=2e-2)
    finally:
        backend.close()
