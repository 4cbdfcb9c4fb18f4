"""The inference-server backend against a server on loopback that speaks vLLM's token-id
completions and SGLang's weight reload, sampling with a real (tiny) model through the HF
backend; and against a real server: the session's managed vLLM CPU server, or the vLLM or
SGLang server ``ROLL_INFERENCE_SERVER`` names."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import uvicorn
from fastapi import FastAPI
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm_helpers import VLLM

from iflow.models.tiny import build_tiny_model
from roll.errors import GenerationError
from roll.generation import HFBackend, SamplingParams, ServerBackend


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", hidden_size=32, layers=1, heads=2
    )


class _Quiet(uvicorn.Server):
    def install_signal_handlers(self) -> None:
        pass


def _serve(app: FastAPI) -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = _Quiet(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


def token_server(model_dir: Path, *, token_ids: bool = True) -> FastAPI:
    """vLLM's ``/v1/completions`` with token-id prompts and ``return_token_ids``, SGLang's
    ``/update_weights_from_disk``; samples with the HF backend over a real model. FastAPI runs
    these routes on a thread pool and the HF backend is not thread-safe (its prefix cache is one
    dict), so one request at a time uses it, as an engine's scheduler would."""
    state: dict[str, Any] = {"backend": HFBackend.from_path(model_dir, device="cpu"), "loads": []}
    one_at_a_time = threading.Lock()
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"data": [{"id": "served-policy"}]}

    @app.post("/v1/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        assert body["model"] == "served-policy" and body["logprobs"] == 1
        params = SamplingParams(
            max_new_tokens=body["max_tokens"],
            temperature=body["temperature"],
            top_p=body["top_p"],
            seed=body.get("seed"),
        )
        with one_at_a_time:
            out = state["backend"].generate(body["prompt"], params)
        choices = []
        for index, g in reversed(list(enumerate(out))):  # any order: indices say which
            choice: dict[str, Any] = {
                "index": index,
                "text": "",
                "finish_reason": g.finish_reason,
                "logprobs": {"token_logprobs": g.logprobs},
            }
            if token_ids:
                choice["token_ids"] = g.token_ids
            choices.append(choice)
        return {"choices": choices}

    @app.post("/update_weights_from_disk")
    def reload(body: dict[str, Any]) -> dict[str, Any]:
        fresh = AutoModelForCausalLM.from_pretrained(body["model_path"])
        with one_at_a_time:
            state["backend"].sync_weights(fresh, len(state["loads"]) + 1)
        state["loads"].append(body["model_path"])
        return {"success": True}

    app.state.fake = state
    return app


@pytest.fixture
def server(tiny: Path) -> Iterator[tuple[str, FastAPI]]:
    app = token_server(tiny)
    for url in _serve(app):
        yield url, app


def test_it_samples_what_the_server_samples_token_for_token(
    server: tuple[str, FastAPI], tiny: Path
) -> None:
    url, _ = server
    backend = ServerBackend(url)
    assert backend.model == "served-policy"  # the first model the server lists
    local = HFBackend.from_path(tiny, device="cpu")
    tokenizer = local.tokenizer
    prompts = [tokenizer.encode(t) for t in ("hello world", "ls -la", "x")]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    remote = backend.generate(prompts, greedy)
    assert [g.token_ids for g in remote] == [g.token_ids for g in local.generate(prompts, greedy)]
    assert all(len(g.logprobs) == len(g.token_ids) for g in remote)
    sampled = backend.generate(prompts, SamplingParams(max_new_tokens=6, seed=3))
    assert sampled == backend.generate(prompts, SamplingParams(max_new_tokens=6, seed=3))
    backend.close()


def test_after_an_update_the_server_loads_the_new_weights(
    server: tuple[str, FastAPI], tiny: Path, tmp_path: Path
) -> None:
    url, app = server
    backend = ServerBackend(url, reload="sglang", weights_dir=tmp_path / "weights")
    trainer = AutoModelForCausalLM.from_pretrained(tiny)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    prompt = [tokenizer.encode("hello world")]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = backend.generate(prompt, greedy)[0]
    with torch.no_grad():
        for p in trainer.parameters():
            p.add_(torch.randn_like(p) * 0.5)  # an update that changes what it says
    backend.sync_weights(trainer, 1)
    after = backend.generate(prompt, greedy)[0]
    assert backend.policy_version == 1 and app.state.fake["loads"] == [
        str(tmp_path / "weights" / "v1")
    ]
    assert after.token_ids != before.token_ids
    expected = HFBackend(trainer, tokenizer).generate(prompt, greedy)[0]
    assert after.token_ids == expected.token_ids  # the server holds the trainer's weights
    backend.sync_weights(trainer, 2)
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v2"]  # old ones go


class _ClosedOnReuse(httpx.HTTPTransport):
    """The first completion request meets a kept-alive connection the server has just
    closed (past its keep-alive time): no response, ``RemoteProtocolError``."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions") and not self.dropped:
            self.dropped += 1
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return super().handle_request(request)


def test_a_connection_the_server_closed_as_it_was_reused_is_sent_again(
    server: tuple[str, FastAPI],
) -> None:
    url, _ = server
    transport = _ClosedOnReuse()
    backend = ServerBackend(url, client=httpx.Client(transport=transport, timeout=60))
    (out,) = backend.generate([[1, 2, 3]], SamplingParams(max_new_tokens=3, temperature=0.0))
    assert transport.dropped == 1 and len(out.token_ids) == 3
    backend.close()


def test_server_faults_are_one_sentence(tiny: Path, tmp_path: Path) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with pytest.raises(GenerationError, match="lists no model at /v1/models"):
        ServerBackend(f"http://127.0.0.1:{port}/v1")
    down = ServerBackend(f"http://127.0.0.1:{port}/v1", model="m")
    with pytest.raises(GenerationError, match=r"did not answer .*check that it runs"):
        down.generate([[1, 2]], SamplingParams())
    with pytest.raises(GenerationError, match=r"needs rollout\.server\.weights_dir"):
        ServerBackend(f"http://127.0.0.1:{port}/v1", model="m", reload="sglang")
    for url in _serve(token_server(tiny, token_ids=False)):
        with pytest.raises(GenerationError, match="without the sampled token ids"):
            ServerBackend(url).generate([[1, 2]], SamplingParams(max_new_tokens=2))


def test_roll_train_samples_through_the_server(
    server: tuple[str, FastAPI], tiny: Path, tmp_path: Path
) -> None:
    from roll.config import TrainConfig, load_config
    from roll.metrics import read_metrics
    from roll.train import run_train

    url, app = server
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"model.path={tiny}",
            "env.name=guess",
            "rollout.backend=server",
            f"rollout.server={{url: '{url}', reload: sglang, weights_dir: '{tmp_path / 'w'}'}}",
            "rollout.groups_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            "run.steps=2",
            "run.progress=false",
            "run.tensorboard=false",
        ],
    )
    run_train(config, log=lambda _m: None)
    records = read_metrics(tmp_path / "run")
    assert len(records) == 2
    assert records[-1]["train/tokens"] > 0 or records[-1]["train/zero_gradient_samples"] > 0
    assert len(app.state.fake["loads"]) == 3  # the start, then after each of the 2 updates


def test_a_backend_server_without_its_url_is_a_config_error(tiny: Path) -> None:
    from roll.config import TrainConfig, load_config
    from roll.errors import ConfigError

    with pytest.raises(ConfigError, match=r"rollout\.backend: server needs rollout\.server\.url"):
        load_config(TrainConfig, None, [f"model.path={tiny}", "rollout.backend=server"])


@VLLM
def test_a_real_inference_server_gives_token_ids_and_log_probs(
    request: pytest.FixtureRequest,
) -> None:
    """The managed vLLM CPU server of the session (conftest.py), or the server that
    ``ROLL_INFERENCE_SERVER`` names (a vLLM started with ``--logprobs-mode processed_logprobs``
    or an SGLang server's ``/v1`` URL, e.g. on a GPU machine)."""
    url = os.environ.get("ROLL_INFERENCE_SERVER") or request.getfixturevalue("vllm_server").url
    backend = ServerBackend(url)
    out = backend.generate([[1, 2, 3, 4]], SamplingParams(max_new_tokens=8, seed=0))[0]
    assert out.token_ids and len(out.logprobs) == len(out.token_ids)
    assert all(lp <= 0 for lp in out.logprobs)
    assert out.policy_version == 0
    backend.close()
