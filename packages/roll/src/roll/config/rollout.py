"""The config sections of sampling: the backend, an inference server, the schedule of a
step's groups, and Ray for scale."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from roll.config.base import _Section


class LaunchConfig(_Section):
    """A vLLM server roll starts for the run and stops with it (``rollout.server.launch``),
    from the environment ``make vllm`` builds; see :mod:`roll.generation.vllm_server`."""

    python: str | None = None
    """The vLLM environment's python (default: ``$ROLL_VLLM_PYTHON``, else the checkout's
    ``.venv-vllm/bin/python``)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = None
    """The served weights' dtype (default: ``rollout.dtype`` when set, else ``model.dtype``);
    the new weights are written in it after each update."""
    threads: int | None = Field(default=None, ge=1)
    """OpenMP threads of the engine (default: every core but one; README)."""
    max_model_len: int | None = Field(default=None, ge=16)
    """The served context window (default: ``rollout.max_seq_len``)."""
    max_num_seqs: int = Field(default=16, ge=1)
    """Most sequences the engine decodes at once."""
    kv_cache_gib: float = Field(default=1.0, gt=0)
    """Memory for the KV cache, in GiB."""
    enforce_eager: bool = True
    """Skip torch.compile and the warm-up pass: a much shorter start-up (README)."""
    chunked_prefill: bool = False
    """Split long prefills across engine steps; off because vLLM's CPU build kills its
    engine on a seeded request whose prefill is split (README); turn it on for a GPU."""
    port: int | None = Field(default=None, ge=1, le=65535)
    """The port on 127.0.0.1 (default: a free one)."""
    start_timeout: float = Field(default=600.0, gt=0)
    """Seconds to wait for the server to answer."""
    extra_args: list[str] = Field(default_factory=list)
    """More arguments for vLLM's server (``--max-num-batched-tokens 2048``...)."""


class ServerConfig(_Section):
    """An inference server that samples for the policy (``rollout.backend: server``): one
    running at ``url``, or one roll launches (``launch``)."""

    url: str | None = None
    """Its OpenAI-compatible base URL, e.g. ``http://127.0.0.1:8000/v1`` (vLLM 0.10.2 or newer
    started with ``--logprobs-mode processed_logprobs``, or SGLang)."""
    launch: LaunchConfig | None = None
    """Start a vLLM server for the policy instead (``{}`` for the defaults)."""
    model: str | None = None
    """The served model's name (default: the first ``/v1/models`` lists)."""
    api_key: str | None = None
    """The key of the server at ``url``, sent as a bearer token; None: none is sent."""
    reload: Literal["none", "sglang", "vllm"] | None = None
    """How the server gets each update's weights: ``vllm`` writes them to ``weights_dir`` and
    has the server reload them in place (its dev-mode routes); ``sglang`` calls
    ``/update_weights_from_disk``; ``none`` leaves the server's weights alone. Default:
    ``vllm`` with ``launch``, ``none`` with ``url``."""
    weights_dir: str | None = None
    """A directory the server can read, for the new weights (default with ``launch``:
    ``RUN_DIR/server-weights``)."""

    @model_validator(mode="after")
    def _check(self) -> ServerConfig:
        if (self.url is None) == (self.launch is None):
            raise ValueError(
                "rollout.server needs exactly one of url (a running server) and launch (a vLLM "
                "server roll starts)"
            )
        return self


class TailBatchingConfig(_Section):
    """``rollout.schedule: tail_batching`` (RollPacker, arXiv 2509.21009): synchronous and
    on-policy, without waiting for stragglers in most steps."""

    eta: float = 1.5
    """A short round launches ``ceil(eta * groups_per_step)`` groups, trains on the first
    ``groups_per_step`` that finish and defers the prompts of the others (at least 1)."""
    long_round_every: int = 4
    """Every this many steps a long round runs all the deferred prompts together (fresh
    ones filling up to ``groups_per_step``) and waits for them all, so it trains more groups
    than a short round (at least 1)."""

    @model_validator(mode="after")
    def _check(self) -> TailBatchingConfig:
        if not self.eta >= 1:
            raise ValueError(
                f"eta is {self.eta:g} but a short round must launch at least the groups it "
                "trains on; set rollout.tail_batching.eta to 1 or more (1.25 to 2 is usual)"
            )
        if self.long_round_every < 1:
            raise ValueError(
                f"long_round_every is {self.long_round_every} but deferred prompts need long "
                "rounds to run in; set rollout.tail_batching.long_round_every to 1 or more"
            )
        return self


class RolloutConfig(_Section):
    """Sampling."""

    backend: Literal["hf", "vllm", "server"] = "hf"
    """What samples: ``hf`` (transformers, in the trainer), ``vllm`` (a vLLM engine in the
    trainer) or ``server`` (an inference server, see ``server``)."""
    groups_per_step: int = Field(default=4, ge=1)
    """Groups sampled per step (each an environment seed or a task)."""
    group_size: int = Field(default=4, ge=1)
    """Episodes per group (the same seed or task), compared with each other."""
    max_new_tokens: int = Field(default=48, ge=1)
    """Most tokens sampled for one assistant turn."""
    max_seq_len: int = Field(default=1024, ge=16)
    """With ``env:``, an episode ends when its tokens plus ``max_new_tokens`` would pass
    this; also the default context of a launched vLLM server."""
    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature; 0: greedy."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling: sample from the smallest set of tokens with this much probability
    (1: all)."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Sample from a copy of the policy in this dtype, refreshed after every update (``null``:
    from the policy's own float32 weights). ``bfloat16`` samples about twice as fast on a CPU
    with AVX512-BF16 (README); the update still runs on the float32 weights, and IPA's mismatch
    mask covers the difference. With ``backend: hf`` only (vllm and server sample as served)."""
    server: ServerConfig | None = None
    """With ``backend: server``: the inference server (see :class:`ServerConfig`)."""
    drop_uniform_groups: bool = False
    """Leave out groups whose rewards are all equal (no group-relative signal); with
    ``tasks:`` each is replaced by a group of another task (at most 3 per group a step)."""
    schedule: Literal["plain", "tail_batching"] = "plain"
    """How a step's groups are gathered: ``plain`` runs ``groups_per_step`` groups and waits
    for the slowest; ``tail_batching`` launches more in short rounds, keeps the first to
    finish and runs the rest later together in long rounds (see ``tail_batching``). Both
    are on-policy: every sample of a step comes from the policy of that step."""
    tail_batching: TailBatchingConfig = Field(default_factory=TailBatchingConfig)
    """The rounds of ``schedule: tail_batching``."""


class RayConfig(_Section):
    """Ray for scale: environments and agentic episodes in Ray actors (needs ``roll[ray]``).

    Without this section everything runs in the trainer's process. Every node of the cluster
    needs roll installed (the same version), and with ``tasks:`` the dataset directory at the
    same path and a rock daemon it can reach (``tasks.url`` on a cluster of several nodes).
    """

    address: str
    """The cluster: ``auto`` (the one ``ray start`` made on this machine), ``HOST:PORT`` (its
    head node's GCS port) or ``ray://HOST:PORT`` (Ray Client)."""
    env_workers: int = Field(default=2, ge=1)
    """With ``env:``: actors hosting the environments (a step's episodes spread over them);
    generation stays batched in the trainer."""
    rollout_workers: int = Field(default=2, ge=1)
    """With ``tasks:``: actors running agentic episodes (sandbox, agent loop, verifier); their
    generation requests go to one generation actor, batched across episodes."""
    worker_cpus: float = Field(default=1.0, ge=0)
    """CPUs Ray reserves for each env or rollout worker."""
    generation_cpus: float = Field(default=1.0, ge=0)
    """With ``tasks:``: CPUs Ray reserves for the generation actor."""
    generation_gpus: float = Field(default=0.0, ge=0)
    """With ``tasks:``: GPUs for the generation actor (above 0 it samples on CUDA)."""
    start_timeout: float = Field(default=120.0, gt=0)
    """Seconds to wait for the cluster to answer and the workers to start."""
