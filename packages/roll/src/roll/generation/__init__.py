"""Generation backends: HF transformers (every test and the demo), vLLM in-process (optional,
GPU) and an external inference server (vLLM or SGLang, asked for token ids)."""

from roll.generation.base import Generation, GenerationBackend, SamplingParams
from roll.generation.hf import HFBackend
from roll.generation.server import ServerBackend
from roll.generation.vllm import VLLMBackend

__all__ = [
    "Generation",
    "GenerationBackend",
    "HFBackend",
    "SamplingParams",
    "ServerBackend",
    "VLLMBackend",
]
