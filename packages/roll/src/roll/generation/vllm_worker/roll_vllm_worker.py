"""roll's extension of vLLM's worker, loaded in the vLLM server's own environment.

:class:`roll.generation.vllm_server.VLLMServer` starts vLLM with ``--worker-extension-cls
roll_vllm_worker.RollWorkerExtension`` and this directory on ``PYTHONPATH``; that environment
has no roll, so this file imports nothing of it. The extension adds one method, called through
``POST /collective_rpc``: vLLM's own in-place reload (``reload_weights``), then the tied LM
head prepared again. vLLM's layer-wise reload finds no weights of its own for a head tied to
the input embeddings (the checkpoint holds them once, under the embeddings' name) and keeps
what it had; on a CPU that is a GEMM kernel prepacked from the old weights, so without this
the server would go on sampling from the old output layer (SmolLM2 ties its embeddings).
"""

from typing import Any


class RollWorkerExtension:
    """Mixed into vLLM's worker class (``self`` is the worker)."""

    model_runner: Any
    model_config: Any

    def roll_reload_weights(self, weights_path: str) -> None:
        """Reload every weight from the safetensors in ``weights_path``, tied head included."""
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            ParallelLMHead,
            VocabParallelEmbedding,
        )

        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        if not getattr(self.model_config.hf_text_config, "tie_word_embeddings", False):
            return
        model = self.model_runner.get_model()
        modules = list(model.modules())
        embeds = [
            m
            for m in modules
            if isinstance(m, VocabParallelEmbedding) and not isinstance(m, ParallelLMHead)
        ]
        for head in (m for m in modules if isinstance(m, ParallelLMHead)):
            if len(embeds) == 1 and head.weight is not embeds[0].weight:
                head.weight = embeds[0].weight
            head.quant_method.process_weights_after_loading(head)
