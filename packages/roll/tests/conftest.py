"""roll's tests: their helper modules importable by name, and the one real vLLM server the
session's tests share (started at most once: a start costs tens of seconds on 2 cores)."""

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # helper modules such as policy_fakes

from vllm_helpers import VLLM_CONTEXT


def pytest_configure(config: pytest.Config) -> None:
    # registered by pytest-xdist when it is installed; here too, for runs without it
    config.addinivalue_line("markers", "xdist_group(name): run the group on one xdist worker")


def _mini_swe_agent_prompts() -> list[str]:
    """mini-swe-agent's own prompt templates (read, not imported: its import prints)."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("minisweagent")
    assert spec is not None and spec.origin is not None
    texts = []
    for config in sorted((Path(spec.origin).parent / "config").glob("mini*.yaml")):
        agent = yaml.safe_load(config.read_text()).get("agent", {})
        texts += [agent.get("system_template", ""), agent.get("instance_template", "")]
    return texts


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model vLLM serves (head dim 64); its tokenizer learned mini-swe-agent's
    prompts too, so they fit the server's window (2,000 tokens with the plain one, 840)."""
    from iflow.models.tiny import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("vllm-model") / "m", hidden_size=128, layers=2, heads=2,
        vocab_size=1024, corpus=_mini_swe_agent_prompts(),
    )  # fmt: skip


@pytest.fixture(scope="session")
def vllm_server(vllm_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real vLLM CPU server (from ``.venv-vllm``: ``make vllm``) serving :func:`vllm_model`
    in float32; tests that change its weights put the originals back."""
    from roll.generation.vllm_server import VLLMServer

    log = tmp_path_factory.mktemp("vllm-log") / "server.log"
    with VLLMServer.launch(
        vllm_model,
        dtype="float32",
        max_model_len=VLLM_CONTEXT,
        max_num_seqs=8,
        kv_cache_gib=0.25,
        log_path=log,
        start_timeout=300,
    ) as server:
        yield server
