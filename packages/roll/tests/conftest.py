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


@pytest.fixture(scope="session")
def vllm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny chat model (head dim 64, which vLLM's CPU attention takes) vLLM serves."""
    from iflow.models.tiny import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("vllm-model") / "m", hidden_size=128, layers=2, heads=2
    )


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
