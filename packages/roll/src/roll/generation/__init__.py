"""Generation backends: HF transformers (every test and the demo) and vLLM (optional, GPU)."""

from roll.generation.base import Generation, GenerationBackend, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.vllm import VLLMBackend

__all__ = ["Generation", "GenerationBackend", "HFBackend", "SamplingParams", "VLLMBackend"]
