"""Which engine samples a model faster on this machine: roll's HF backend or the vLLM server.

Neither wins everywhere. On a GPU vLLM is the engine every RL framework samples from; on a
small CPU roll's HF backend (continuous batching, its prefix cache) comes close to vLLM's
CPU build, and below a few cores or without the CPU's vector extensions it can win. So
``make demo --engine auto`` does not guess: before its RL stage it measures both on the
policy it will sample from (:func:`compare_engines`) and samples from vLLM only where vLLM
came out faster by :data:`MARGIN`, which pays for the server's start-ups and for the share
of a rollout that is not generation. Sampling alone is not the whole stage: on 2 cores the
demo on vLLM was slower although vLLM sampled 1.31x as fast (docs/vllm.md), so the demo's
default stays the HF backend.

The measurement is the sampling workload of ``benchmarks/vllm_engine.py`` made small: a
batch of ``batch`` completions of ``new_tokens`` tokens after one ``prompt_tokens``-token
prompt at temperature 1, seeded, one warm-up round and then ``rounds``, in the same
dtype on both sides. A vLLM that cannot start (no ``.venv-vllm``, a model it cannot load)
is an answer too: HF, with the reason in one sentence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from roll.errors import EngineError
from roll.generation.base import Generation, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.server import ServerBackend
from roll.generation.vllm_server import VLLMServer

MARGIN = 1.1
"""vLLM samples the rollouts only where its tokens per second are at least this many times
the HF backend's: generation is about three quarters of a rollout step, and each stage pays
a server start (about 25 s on 2 cores)."""

TEXT = "Run the tests, read the failures and fix the code until every test passes. "


@dataclass(frozen=True)
class EngineComparison:
    """The two engines' sampling rates (tokens per second) on one model, and the choice."""

    hf_tokens_per_s: float
    vllm_tokens_per_s: float | None
    """None when vLLM could not be measured: :attr:`why_not` says why."""
    vllm_start_s: float | None = None
    why_not: str | None = None

    @property
    def ratio(self) -> float | None:
        if self.vllm_tokens_per_s is None or self.hf_tokens_per_s <= 0:
            return None
        return self.vllm_tokens_per_s / self.hf_tokens_per_s

    @property
    def engine(self) -> str:
        """``vllm`` where it was at least :data:`MARGIN` times as fast, else ``hf``."""
        return "vllm" if (self.ratio or 0.0) >= MARGIN else "hf"

    def describe(self) -> str:
        if self.ratio is None:
            return (
                f"HF backend {self.hf_tokens_per_s:.0f} tokens/s; vLLM not measured: {self.why_not}"
            )
        started = f", started in {self.vllm_start_s:.0f} s" if self.vllm_start_s else ""
        return (
            f"vLLM {self.vllm_tokens_per_s:.0f} tokens/s vs HF backend "
            f"{self.hf_tokens_per_s:.0f} tokens/s = {self.ratio:.2f}x{started}; "
            f"{self.engine} samples (vLLM needs {MARGIN}x)"
        )


def _rate(generate: Callable[[], list[Generation]], rounds: int) -> float:
    """Completion tokens per second of ``generate`` over ``rounds`` rounds, after a warm-up
    round (kernels, caches); a completion that stopped early counts its own tokens."""
    generate()
    tokens, seconds = 0, 0.0
    for _ in range(rounds):
        began = time.perf_counter()
        tokens += sum(len(g.token_ids) for g in generate())
        seconds += time.perf_counter() - began
    return tokens / seconds


def compare_engines(
    model_dir: str | Path,
    *,
    dtype: str = "bfloat16",
    batch: int = 16,
    prompt_tokens: int = 231,
    new_tokens: int = 48,
    rounds: int = 2,
    max_model_len: int = 1024,
    log_path: str | Path | None = None,
    python: str | Path | None = None,
    server: VLLMServer | None = None,
) -> EngineComparison:
    """Measure both engines on ``model_dir`` (see the module docstring): on ``server`` when
    one serving it runs already, else on a vLLM server launched for the measurement from
    ``python``'s environment (default ``.venv-vllm``), its log at ``log_path``, then
    stopped."""
    hf = HFBackend.from_path(model_dir, device="cpu", dtype=dtype)
    prompt = hf.tokenizer.encode(TEXT * 40)[:prompt_tokens]
    prompts = [prompt] * batch
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=0)
    hf_rate = _rate(partial(hf.generate, prompts, params), rounds)
    del hf  # its memory back before vLLM starts
    began = time.perf_counter()
    try:
        launched = server is None
        if server is None:
            server = VLLMServer.launch(
                model_dir, python=python, dtype=dtype, max_model_len=max_model_len,
                log_path=log_path,
            )  # fmt: skip
    except EngineError as exc:
        return EngineComparison(hf_rate, None, why_not=str(exc))
    start_s = time.perf_counter() - began if launched else None
    backend = ServerBackend(server.url, server=server)
    try:
        vllm_rate = _rate(partial(backend.generate, prompts, params), rounds)
    finally:
        backend.close()
        if launched:
            server.close()
    return EngineComparison(hf_rate, vllm_rate, vllm_start_s=start_s)
