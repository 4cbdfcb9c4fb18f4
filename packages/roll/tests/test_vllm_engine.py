"""The managed vLLM engine against a real vLLM CPU server (``.venv-vllm``, ``make vllm``).

One server, started once for the session (``vllm_server`` in conftest.py), serves the tiny
model in float32; what it samples is checked against a torch forward pass of the same weights:
log-probs within ``TOL`` (float32 on both sides; vLLM's CPU kernels and torch's differ by
about 1e-5), greedy ids the argmax up to ``TOL``. Every way a start can fail is checked for its
reason and that nothing is left running; those starts never get as far as serving, except
the one test that kills a server mid-generation, which starts its own.
"""

from __future__ import annotations

import copy
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from policy_bench import recorded_calls, run_policy
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm_helpers import VLLM, VLLM_CONTEXT, group_processes

from roll.errors import EngineError, EngineFailure, PromptTooLong
from roll.generation import SamplingParams, ServerBackend
from roll.generation.vllm_server import VLLMServer

pytestmark = VLLM

TOL = 2e-3
"""Largest difference allowed between a server log-prob and the torch forward pass's."""

TEXTS = ("hello world", "ls -la && cd src", "The tests pass now.")


def reference(model_dir: Path) -> torch.nn.Module:
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def forward(model: torch.nn.Module, prompt: list[int], ids: list[int]) -> torch.Tensor:
    """Logits (float64) at each sampled position of ``prompt + ids``."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    return logits.double()


def assert_sampled_by(
    model: torch.nn.Module, prompt: list[int], ids: list[int], logprobs: list[float], temp: float
) -> None:
    """``ids`` and their ``logprobs`` are what ``model`` gives at temperature ``temp``."""
    logits = forward(model, prompt, ids)
    expected = torch.log_softmax(logits / (temp or 1.0), -1)
    picked = expected.gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)
    assert logprobs == pytest.approx(picked.tolist(), abs=TOL)
    if temp == 0:  # greedy: each id is the argmax (ties within TOL allowed)
        assert (picked >= expected.max(-1).values - TOL).all()


@pytest.fixture
def backend(vllm_server: VLLMServer, tmp_path: Path) -> Iterator[ServerBackend]:
    backend = ServerBackend(
        vllm_server.url, reload="vllm", weights_dir=tmp_path / "weights", server=vllm_server
    )
    yield backend
    backend.close()


@pytest.fixture
def restore(vllm_server: VLLMServer, vllm_model: Path, tmp_path: Path) -> Iterator[None]:
    """Put the tiny model's own weights back into the shared server after the test."""
    yield
    original = ServerBackend(
        vllm_server.url, reload="vllm", weights_dir=tmp_path / "orig", server=vllm_server
    )
    original.sync_weights(reference(vllm_model), 0)
    original.close()


def test_greedy_and_sampled_requests_match_a_torch_forward_pass(
    backend: ServerBackend, vllm_model: Path
) -> None:
    model = reference(vllm_model)
    tokenizer = AutoTokenizer.from_pretrained(vllm_model)
    prompts = [tokenizer.encode(text) for text in TEXTS]
    assert backend.max_model_len == VLLM_CONTEXT  # read from /v1/models
    for temp in (0.0, 0.7):
        params = SamplingParams(max_new_tokens=12, temperature=temp, seed=5)
        out = backend.generate(prompts, params)
        for prompt, gen in zip(prompts, out, strict=True):
            assert gen.token_ids and gen.policy_version == 0
            assert_sampled_by(model, prompt, gen.token_ids, gen.logprobs, temp)
    seeded = SamplingParams(max_new_tokens=12, temperature=1.0, seed=7)
    group = backend.generate([prompts[0]] * 2, seeded)
    assert group[0].token_ids != group[1].token_ids  # a GRPO group's samples differ
    assert backend.generate([prompts[0]] * 2, seeded) == group  # and the seed repeats them


def test_after_a_weight_update_the_next_sample_comes_from_the_new_weights(
    backend: ServerBackend, vllm_model: Path, restore: None
) -> None:
    model = reference(vllm_model)
    prompt = AutoTokenizer.from_pretrained(vllm_model).encode(TEXTS[0])
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    before = backend.generate([prompt], greedy)[0]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.5)
    began = time.perf_counter()
    backend.sync_weights(model, 1)
    print(f"weight update (write + reload) of the tiny model: {time.perf_counter() - began:.2f} s")
    after = backend.generate([prompt], greedy)[0]
    assert after.policy_version == 1 and after.token_ids != before.token_ids
    assert_sampled_by(model, prompt, after.token_ids, after.logprobs, 0.0)
    sampled = backend.generate([prompt], SamplingParams(max_new_tokens=12, seed=1))[0]
    assert_sampled_by(model, prompt, sampled.token_ids, sampled.logprobs, 1.0)
    weights = backend.weights_dir
    assert weights is not None and sorted(p.name for p in weights.iterdir()) == ["v1"]


def test_a_request_in_flight_across_an_update_is_not_counted_on_policy(
    backend: ServerBackend, vllm_model: Path, restore: None
) -> None:
    from ale.trajectory import AgentInfo, Role, Step, Trajectory
    from roll.train import stale

    model = reference(vllm_model)
    prompt = AutoTokenizer.from_pretrained(vllm_model).encode(TEXTS[1])
    long = SamplingParams(max_new_tokens=1024 - len(prompt), temperature=0.0)
    batch = [prompt] * 8  # eight rows decoding together: each step takes longer
    generator = torch.Generator().manual_seed(0)
    backend.generate(batch, long)  # warm
    # a busy machine can finish the requests before the update reaches the server: then
    # they did not span it, and the update (to further weights) is tried again (CI's busy
    # machine missed four times in a row)
    for attempt in range(1, 9):
        sent_under = backend.policy_version
        began = time.perf_counter()
        old = backend.generate(batch, long)[0]  # what the weights served now give
        duration = time.perf_counter() - began
        assert attempt > 1 or old.finish_reason == "length"  # the model's own never stop early
        result: list[Any] = []
        thread = threading.Thread(
            target=lambda out=result: out.append(backend.generate(batch, long))
        )
        thread.start()
        time.sleep(duration / 16)  # the update starts while the requests decode
        before = copy.deepcopy(model)  # the weights served until this update
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=generator) * 0.5)
        backend.sync_weights(model, sent_under + 1)
        thread.join(timeout=60)
        spanned = result[0][0]
        # the log-probs of its last tokens under the new weights and under those before:
        # a run of tokens both are sure of (log-prob about 0, as in CI once) cannot tell
        # which weights sampled it, so the tail must hold a place where the two differ
        tail = range(len(spanned.token_ids) - 16, len(spanned.token_ids))
        new, was = (
            torch.log_softmax(forward(m, prompt, spanned.token_ids), -1)
            .gather(-1, torch.tensor(spanned.token_ids)[:, None])
            .squeeze(-1)
            .tolist()
            for m in (model, before)
        )
        ended_new = all(spanned.logprobs[i] == pytest.approx(new[i], abs=TOL) for i in tail)
        if ended_new and any(abs(new[i] - was[i]) > 10 * TOL for i in tail):
            break
    else:
        pytest.fail(f"in {attempt} tries no request was still decoding when the update came")
    # it was sent under the old weights and ended with the new ones (its last log-probs are
    # what the new weights give there, not the old; on a loaded machine the update may land
    # before its first token, so its first log-probs are not asked to be the old ones)...
    assert any(spanned.logprobs[i] != pytest.approx(was[i], abs=TOL) for i in tail)
    # ...so every row keeps the version it was sent under, older than the policy it would train
    assert {g.policy_version for g in result[0]} == {sent_under}
    assert backend.policy_version == sent_under + 1
    step = Step(role=Role.ASSISTANT, content="", policy_version=spanned.policy_version)
    assert stale(Trajectory(agent=AgentInfo(name="t"), steps=[step]), backend.policy_version)
    after = backend.generate([prompt], SamplingParams(max_new_tokens=8, temperature=0.0))[0]
    assert after.policy_version == sent_under + 1
    assert_sampled_by(model, prompt, after.token_ids, after.logprobs, 0.0)


def test_seeded_requests_with_long_prompts_together_keep_the_engine_alive(
    backend: ServerBackend,
) -> None:
    """Eight seeded samples of distinct 1,500-token prompts at once: more prompt than one
    engine step takes. vLLM's CPU build killed its engine when such a prefill was split
    (``make demo``'s sampled evaluation); roll's servers do not split prefills."""
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(10, 500, (1500,), generator=generator).tolist() for _ in range(8)]
    params = SamplingParams(max_new_tokens=4, temperature=1.0, seed=7)
    out = backend.generate(prompts, params)
    assert [len(g.token_ids) for g in out] == [4] * 8
    assert backend.generate(prompts[:1], params)[0].token_ids == out[0].token_ids  # seeded


def test_a_prompt_past_the_context_window(backend: ServerBackend) -> None:
    with pytest.raises(PromptTooLong) as caught:
        backend.generate([[5] * (VLLM_CONTEXT + 10)], SamplingParams(max_new_tokens=4))
    assert (caught.value.tokens, caught.value.limit) == (VLLM_CONTEXT + 10, VLLM_CONTEXT)
    assert f"context window ({VLLM_CONTEXT} tokens)" in str(caught.value)
    near = VLLM_CONTEXT - 3  # room for 3 of the 16 new tokens asked for: the server stops there
    (gen,) = backend.generate([[5] * near], SamplingParams(max_new_tokens=16, temperature=0.0))
    assert len(gen.token_ids) <= 3 and (gen.finish_reason == "length") == (len(gen.token_ids) == 3)


def test_a_server_killed_mid_generation_is_one_sentence(vllm_model: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    began = time.perf_counter()
    server = VLLMServer.launch(
        vllm_model, dtype="float32", max_model_len=VLLM_CONTEXT, kv_cache_gib=0.25, log_path=log
    )
    print(f"vLLM server start-up (tiny model, eager): {time.perf_counter() - began:.1f} s")
    try:
        assert group_processes(log)  # the marker finds them
        assert server.scratch is not None and list(server.scratch.glob("vllm_dist_*"))
        backend = ServerBackend(server.url, server=server)
        long = SamplingParams(max_new_tokens=VLLM_CONTEXT - 4, temperature=0.0)
        failure: list[BaseException] = []

        def sample() -> None:
            try:
                backend.generate([[5, 6, 7, 8]], long)
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=sample)
        thread.start()
        time.sleep(0.3)  # decoding (the first request of a server takes seconds)
        assert thread.is_alive()
        assert server.process is not None
        os.killpg(server.process.pid, signal.SIGKILL)
        thread.join(timeout=30)
        (error,) = failure
        assert isinstance(error, EngineError) and error.reason is EngineFailure.DIED
        assert str(error).startswith("the vLLM server exited with code -9 while serving")
        assert "\n" not in str(error) and str(log) in str(error)
        with pytest.raises(EngineError, match="exited with code -9") as again:
            backend.generate([[5]], SamplingParams(max_new_tokens=2))
        assert again.value.reason is EngineFailure.DIED
    finally:
        server.close()
    assert group_processes(log) == []
    assert not server.scratch.exists()  # its temporary files with it


def test_a_server_that_never_becomes_ready_quotes_its_log(vllm_model: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with pytest.raises(EngineError) as caught:
        VLLMServer.launch(vllm_model, log_path=log, start_timeout=3)
    assert caught.value.reason is EngineFailure.NEVER_READY
    message = str(caught.value)
    assert message.startswith("the vLLM server did not answer within 3 s; the last line of its")
    quoted = message.split(f"its log {log}: ", 1)[1].rsplit(" (raise", 1)[0]
    assert quoted and quoted in log.read_text()  # a line of its log, quoted
    assert group_processes(log) == []  # the whole group ended


def test_bad_input_is_one_sentence_and_starts_nothing(vllm_model: Path, tmp_path: Path) -> None:
    import sys

    def reason(**kwargs: Any) -> EngineFailure:
        log = tmp_path / "server.log"
        with pytest.raises(EngineError) as caught:
            VLLMServer.launch(kwargs.pop("model", vllm_model), log_path=log, **kwargs)
        assert "\n" not in str(caught.value)
        assert group_processes(log) == []
        return caught.value.reason

    assert reason(python=tmp_path / "no-env" / "bin" / "python") is EngineFailure.MISSING_ENV
    assert reason(python=sys.executable) is EngineFailure.BROKEN_ENV  # roll's venv: no vllm
    (tmp_path / "empty").mkdir()
    assert reason(model=tmp_path / "empty") is EngineFailure.MODEL_UNLOADABLE
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        assert reason(port=taken.getsockname()[1]) is EngineFailure.PORT_IN_USE
    assert not (tmp_path / "server.log").exists()  # none of them got as far as a log


class _NoDevRoutes(BaseHTTPRequestHandler):
    """A server that lists a model and has none of vLLM's dev-mode routes."""

    def do_GET(self) -> None:
        body = b'{"data": [{"id": "m"}]}' if self.path == "/v1/models" else b"{}"
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_server_without_the_dev_mode_routes_cannot_reload(tmp_path: Path) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _NoDevRoutes)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        attached = VLLMServer.attach(url)
        with pytest.raises(EngineError) as caught:
            ServerBackend(attached.url, reload="vllm", weights_dir=tmp_path / "w")
        assert caught.value.reason is EngineFailure.NO_DEV_ROUTES
        assert "VLLM_SERVER_DEV_MODE=1" in str(caught.value)
        ServerBackend(url, reload="none").close()  # sampling alone does not need them
    finally:
        httpd.shutdown()
    with pytest.raises(EngineError) as gone:
        VLLMServer.attach(url, timeout=1)
    assert gone.value.reason is EngineFailure.NEVER_READY


def test_roll_train_launches_the_server_reloads_it_and_stops_it(
    vllm_model: Path, tmp_path: Path
) -> None:
    from roll.config import TrainConfig, load_config
    from roll.metrics import read_metrics
    from roll.train import run_train

    run = tmp_path / "run"
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={run}",
            f"model.path={vllm_model}",
            "env.name=guess",
            "rollout.backend=server",
            "rollout.server={launch: {dtype: float32, kv_cache_gib: 0.25}}",
            "rollout.groups_per_step=2",
            "rollout.group_size=2",
            "rollout.max_new_tokens=8",
            f"rollout.max_seq_len={VLLM_CONTEXT}",
            "run.steps=2",
            "run.progress=false",
            "run.tensorboard=false",
            "algorithm.entropy_coef=1e-4",  # every sample runs: the mismatch covers them all
        ],
    )
    run_train(config, log=lambda _m: None)
    records = read_metrics(run)
    assert len(records) == 2 and records[-1]["policy_version"] == 2
    assert records[-1]["rollout/stale_episodes"] == 0
    for record in records:  # the trainer's log-probs are the server's, to float32 kernels
        assert record["train/mismatch/tokens"] > 0
        assert record["train/mismatch/log_ratio_abs_max"] < TOL
        assert record["train/mismatch/masked_share"] == 0.0
    log = run / "vllm-server.log"
    assert "Reloading weights inplace" in log.read_text()  # reloaded, not restarted
    assert sorted(p.name for p in (run / "server-weights").iterdir()) == ["v2"]
    assert group_processes(log) == []  # stopped with the run


@pytest.mark.docker
async def test_rock_bench_s_roll_policy_samples_from_the_server(
    vllm_server: VLLMServer, vllm_model: Path, tmp_path: Path
) -> None:
    """``rock bench --agent roll-policy --agent-kwarg server_url=...``: every trial's model
    calls go to the vLLM server, through one queue, each with its tokens recorded."""
    kwargs = {"model_path": str(vllm_model), "server_url": vllm_server.url}
    kwargs["context_limit"] = VLLM_CONTEXT
    _, shared = await run_policy(tmp_path / "run", kwargs, tasks=2, concurrent=2)
    assert isinstance(shared.queue.backend, ServerBackend)
    assert recorded_calls(tmp_path / "run") == shared.queue.stats.requests > 0
    await shared.queue.close()


def test_iflow_pointed_at_the_server_works_as_with_any_server(
    vllm_server: VLLMServer, tmp_path: Path
) -> None:
    """``iflow -p ... --provider openai --base-url <the server's /v1>``: iflow's chat requests
    are served by vLLM (the tiny model's own chat template), as by any OpenAI server."""
    import json
    import subprocess
    import sys

    import httpx

    name = httpx.get(vllm_server.url + "/models").json()["data"][0]["id"]
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / ".iflow").mkdir(parents=True)  # the compact prompt: the tiny model's window is small
    settings = {"promptProfile": "compact", "toolFormat": "brief", "maxOutputTokens": 32}
    (work / ".iflow" / "settings.json").write_text(json.dumps(settings))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IFLOW_", "OPENAI_"))}
    run = subprocess.run(
        [sys.executable, "-m", "iflow.cli", "-p", "list the files", "--provider", "openai",
         "--base-url", vllm_server.url, "--api-key", "none", "-m", name, "--max-turns", "1",
         "--context-limit", str(VLLM_CONTEXT), "-o", "json", "-y"],
        env={**env, "HOME": str(home)}, cwd=work, capture_output=True, text=True, timeout=300,
        stdin=subprocess.DEVNULL,  # (iflow reads a piped stdin)
    )  # fmt: skip
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    record = json.loads(run.stdout)
    assert record["turns"] == 1  # one model call, answered by the server
    assert record["usage"]["prompt_tokens"] > 0, record


@pytest.mark.docker
def test_the_gateway_trains_mini_swe_agent_for_two_steps_on_the_server(
    vllm_server: VLLMServer, vllm_model: Path, restore: None, tmp_path: Path
) -> None:
    """``roll train`` with the PyPI mini-swe-agent in sandboxes, its model calls through the
    policy gateway sampled by the vLLM server, which reloads the weights after each step."""
    import shutil

    from ale.trajectory import Trajectory
    from roll.config import TrainConfig, load_config
    from roll.metrics import read_metrics
    from roll.train import run_train

    tasks = Path(__file__).resolve().parents[3] / "datasets" / "synth-mini" / "tasks"
    dataset = tmp_path / "data" / "tasks"
    for source in sorted(tasks.iterdir())[:2]:
        shutil.copytree(source, dataset / source.name)
    server = f"{{url: {vllm_server.url}, reload: vllm, weights_dir: {tmp_path / 'weights'}}}"
    config = load_config(
        TrainConfig,
        None,
        [
            f"run_dir={tmp_path / 'run'}",
            f"model.path={vllm_model}",
            f"tasks.dataset={tmp_path / 'data'}",
            "tasks.pool_size=2",
            "tasks.max_turns=2",
            "tasks.agent={name: mini-swe-agent, kwargs: {step_limit: 2}}",
            "rollout.backend=server",
            f"rollout.server={server}",
            "rollout.groups_per_step=1",
            "rollout.group_size=2",
            "rollout.max_new_tokens=16",
            f"rollout.max_seq_len={VLLM_CONTEXT}",
            "algorithm.name=ipa",
            "run.steps=2",
            "run.progress=false",
            "run.tensorboard=false",
        ],
    )
    run_train(config, log=lambda _m: None)
    records = read_metrics(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2]
    for record in records:
        assert record["episodes/gateway_calls"] >= 2  # the agent's calls reached the server
        assert record["rollout/episodes"] == 2
    lines = (tmp_path / "run" / "rollouts" / "step-000002.jsonl").read_text().splitlines()
    steps = [s for line in lines for s in Trajectory.model_validate_json(line).steps]
    sampled = [s for s in steps if s.token_ids]
    assert sampled and all(len(s.logprobs or []) == len(s.token_ids or []) for s in sampled)
    assert {s.policy_version for s in sampled} == {1}  # sampled after the server's reload
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["v2"]


def test_the_engine_comparison_measures_both_and_picks_by_its_margin(
    vllm_server: VLLMServer, vllm_model: Path, tmp_path: Path
) -> None:
    """``make demo``'s engine choice: both engines sample the same batch; vLLM is chosen only
    at ``MARGIN`` times the HF backend's rate; a vLLM that cannot start means HF, saying why."""
    from roll.generation.compare import MARGIN, EngineComparison, compare_engines

    kwargs: dict[str, Any] = {"dtype": "float32", "batch": 4, "new_tokens": 8, "rounds": 1}
    measured = compare_engines(vllm_model, server=vllm_server, max_model_len=VLLM_CONTEXT, **kwargs)
    assert measured.hf_tokens_per_s > 0 and (measured.vllm_tokens_per_s or 0) > 0
    assert measured.engine == ("vllm" if (measured.ratio or 0) >= MARGIN else "hf")
    assert f"= {measured.ratio:.2f}x" in measured.describe()
    assert EngineComparison(100.0, MARGIN * 100.0).engine == "vllm"
    assert EngineComparison(100.0, MARGIN * 99.0).engine == "hf"
    missing = compare_engines(vllm_model, python=tmp_path / "no-python", **kwargs)
    assert missing.engine == "hf" and missing.vllm_tokens_per_s is None
    assert missing.why_not and "vLLM not measured: " + missing.why_not in missing.describe()
