"""Training configurations: validated models, read from YAML with ``key=value`` overrides.

Every section forbids unknown keys; a mistyped key is one sentence naming it and the
closest valid key (``algorithm.clip_hgh: did you mean 'clip_high'?``). ``algorithm.name``
picks a preset (GRPO, Dr. GRPO, RLOO, REINFORCE++, GSPO, IPA); any field set explicitly
overrides the preset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ale.configs import explain
from roll.errors import ConfigError

C = TypeVar("C", bound=BaseModel)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class TinyModel(_Section):
    """A tiny model built from nothing at ``model.path`` when nothing is there yet."""

    vocab_size: int = Field(default=512, ge=263)
    """Size of the BPE vocabulary (at least 263: the 256 bytes and 7 added tokens)."""
    hidden_size: int = Field(default=64, ge=8)
    """Width of the hidden states (a multiple of ``heads``; the MLP is twice as wide)."""
    layers: int = Field(default=2, ge=1)
    """Decoder layers (a Llama architecture)."""
    heads: int = Field(default=4, ge=1)
    """Attention heads per layer."""
    seed: int = 0
    """Seed of the random weights."""
    corpus: list[str] = Field(default_factory=list)
    """Datasets (directories with ``trajectories.jsonl``, or JSONL files of trajectories)
    whose texts, with the iflow agent's prompts, train the tokenizer too: what the model
    will mostly read and write takes fewer tokens."""


_LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoraConfig(_Section):
    """LoRA adapters (through peft): only the adapters train; checkpoints hold only them."""

    r: int = Field(default=16, ge=1)
    """Rank of each adapter."""
    alpha: float = Field(default=32.0, gt=0)
    """Scale numerator: the adapter's output is multiplied by ``alpha / r``."""
    dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the adapters' input while training; 0: none."""
    target_modules: list[str] = Field(default_factory=lambda: list(_LLAMA_LINEAR))
    """Names of the linear layers to adapt (a module matches when its name ends with one)."""


class ModelConfig(_Section):
    """The policy."""

    path: str
    """A directory written by ``save_pretrained`` (any transformers causal LM)."""
    tiny: TinyModel | None = None
    """Build a tiny model at ``path`` first when ``path`` holds no model."""
    device: str = "auto"
    """``auto`` (a GPU when there is one), ``cpu``, ``cuda``, ``cuda:1``..."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """``auto``: bfloat16 on a GPU that supports it, float32 otherwise."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass instead of keeping them: less memory,
    slower steps."""
    lora: LoraConfig | None = None
    """Train LoRA adapters instead of every weight (``{}`` for the defaults); the run's final
    ``model/`` is the base with the adapters merged in, ready to serve."""


class OptimConfig(_Section):
    """AdamW and its schedule."""

    lr: float = Field(default=1e-5, gt=0)
    """The peak learning rate (reached after ``warmup_steps``)."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW's decoupled weight decay; 0: none."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW's decay rates of the first and second moment estimates."""
    eps: float = Field(default=1e-8, gt=0)
    """AdamW's term added to the denominator for stability."""
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    """The learning rate after warm-up: ``constant``, or decaying to 0 by the run's last step
    (``linear`` or ``cosine``)."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps over which the learning rate rises linearly to ``lr``; 0: no warm-up."""
    max_grad_norm: float | None = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this; ``null`` to not clip (the norm is still logged)."""


class RunConfig(_Section):
    """What both trainers share: the loop, checkpoints and logs."""

    steps: int = Field(default=10, ge=1)
    """Optimiser updates (SFT) or rollout batches (RL) to run."""
    micro_batch_tokens: int = Field(default=8192, ge=16)
    """Token budget of one forward/backward (rows x longest row): larger batches are
    processed in micro-batches whose gradients add up to the whole batch's."""
    share_prefix: bool = True
    """Run the prompt the episodes of a group share once per micro-batch, not once per
    episode (same gradients; not under FSDP)."""
    checkpoint_every: int = Field(default=10, ge=1)
    """Save a checkpoint every this many steps (and after the last step)."""
    keep_checkpoints: int = Field(default=2, ge=1)
    """How many of the newest checkpoints to keep; older ones are deleted."""
    max_bad_steps: int = Field(default=5, ge=1)
    """Stop after this many steps whose loss or gradient was NaN/inf (each is skipped)."""
    log_every: int = Field(default=1, ge=1)
    """Record the metrics every this many steps (the progress bar moves every step)."""
    tensorboard: bool | None = None
    """Write TensorBoard events too; ``null``: when tensorboard is installed."""
    progress: bool = True
    """Show a progress bar (only on a terminal)."""
    parallel: Literal["ddp", "fsdp"] = "ddp"
    """How several processes (torchrun, more than one) train together; ignored in a single
    process. ``ddp``: every process holds the whole model and optimiser and the gradients are
    averaged. ``fsdp``: parameters, gradients and optimiser state are sharded between the
    processes (FSDP2, ``fully_shard`` per decoder layer), for models that do not fit one GPU
    with DDP; meant for GPUs, works on CPU with gloo. With the HF rollout backend each process
    then also keeps a full copy of the policy to generate with."""


class ResampleConfig(_Section):
    """Chunk-level initialised resampling from expert trajectories."""

    experts: str | None = None
    """A JSONL of expert trajectories whose actions are replayed: with ``env:``, one per env
    seed; with ``tasks:``, trajectories whose ``task_id`` names a task of the dataset (a
    synthesis run's expert trajectories), replayed once per group in a sandbox of the task
    that each episode of the group gets a fork of (tasks without one run from the start)."""
    self_experts: bool = False
    """With ``tasks:``: a task without an expert takes the policy's first successful
    trajectory of it as its expert (self-sampling); with no ``experts`` file, every task."""
    mode: Literal["sequential", "parallel"] = "sequential"
    """``sequential``: start from the last expert chunk and roll back as groups succeed;
    ``parallel``: start groups at ``anchors`` evenly spread anchors at once."""
    anchors: int = Field(default=3, ge=1)
    """``parallel``: how many anchors, spread evenly over the expert's chunks (1: the last)."""
    threshold: float = Field(default=0.5, gt=0, le=1)
    """Share of positive episodes at the current anchor that moves it one chunk back."""
    imitation_coef: float = Field(default=0.1, ge=0)
    """Weight of the NLL term on the expert prefix of groups without a positive episode."""


class AlgorithmConfig(_Section):
    """Credit assignment and loss. Unset fields come from the preset ``name``, filled in
    as the config is read (so a run's saved config shows every value it trained with);
    :meth:`resolved` is what training reads: every field set, nothing optional."""

    name: Literal["grpo", "dr_grpo", "rloo", "reinforce_pp", "gspo", "lite_ppo", "ipa"] = "ipa"
    """The preset (:data:`PRESETS`) that fills every field left unset."""
    advantage: Literal["grpo", "rloo", "reinforce_pp", "lite_ppo", "ipa"] | None = None
    """The advantage estimator (:mod:`roll.algo.advantages`)."""
    scale_by_std: bool | None = None
    """GRPO: divide by the group's reward std."""
    gamma: float | None = Field(default=None, gt=0, le=1)
    """IPA: chunk discount."""
    baseline: Literal["none", "group_mean"] | None = None
    """IPA / REINFORCE++: subtract the group mean reward first."""
    loss: Literal["ppo", "ipa"] | None = None
    """``ppo``: the clipped surrogate; ``ipa``: REINFORCE on positive trajectories, clipped
    ratio weights on the others (:mod:`roll.algo.losses`)."""
    ratio_level: Literal["token", "chunk", "sequence"] | None = None
    """The importance ratio per ``token``, per ``chunk`` or per ``sequence`` (GSPO), the latter
    two as the geometric mean over their tokens."""
    aggregation: (
        Literal[
            "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
        ]
        | None
    ) = None
    """How the token losses are averaged over a mini-batch: over all tokens (``token_mean``),
    or per sequence and then over sequences (see :func:`roll.algo.batch.set_weights`)."""
    norm_length: int | None = Field(default=None, ge=1)
    """The constant of ``seq_mean_token_sum_norm`` (default: rollout.max_new_tokens)."""
    clip_low: float | None = Field(default=None, ge=0)
    """PPO clips the ratio from below at ``1 - clip_low``."""
    clip_high: float | None = Field(default=None, ge=0)
    """PPO clips the ratio from above at ``1 + clip_high``."""
    mismatch_threshold: float | None = Field(default=None, gt=1)
    """H: mask a chunk whose exp(mean log(pi_old / mu)) exceeds it; ``null`` to never mask."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Weight of the KL penalty (k3 per token) against the initial policy; 0: none."""
    entropy_coef: float = Field(default=0.0)
    """Weight of the entropy bonus (subtracted from the loss); 0: none."""

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        """The preset's values for the keys the config leaves out (a key given as null stays
        null: ``mismatch_threshold: null`` never masks)."""
        if not isinstance(data, dict):
            return data
        preset = PRESETS.get(data.get("name", "ipa"), {})  # an unknown name: the field says
        return {**_DEFAULTS, **preset, **data}

    def resolved(self, max_new_tokens: int) -> Algorithm:
        """The algorithm as training runs it: every field set (``norm_length`` defaults to
        ``max_new_tokens``), checked once here instead of at each use."""
        values = self.model_dump(exclude={"name"})
        values["norm_length"] = self.norm_length or max_new_tokens
        try:
            return Algorithm(**values)
        except ValidationError as exc:
            key = ".".join(str(part) for part in exc.errors()[0]["loc"])
            raise ConfigError(
                f"algorithm.{key} is null and preset {self.name!r} has no value for it; "
                "give it a value or leave it out"
            ) from None


class Algorithm(BaseModel):
    """An :class:`AlgorithmConfig` with its preset resolved: what training reads, every
    field set (each one's meaning is the config's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    advantage: Literal["grpo", "rloo", "reinforce_pp", "lite_ppo", "ipa"]
    """See :attr:`AlgorithmConfig.advantage`."""
    scale_by_std: bool
    """See :attr:`AlgorithmConfig.scale_by_std`."""
    gamma: float
    """See :attr:`AlgorithmConfig.gamma`."""
    baseline: Literal["none", "group_mean"]
    """See :attr:`AlgorithmConfig.baseline`."""
    loss: Literal["ppo", "ipa"]
    """See :attr:`AlgorithmConfig.loss`."""
    ratio_level: Literal["token", "chunk", "sequence"]
    """See :attr:`AlgorithmConfig.ratio_level`."""
    aggregation: Literal[
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"
    ]
    """See :attr:`AlgorithmConfig.aggregation`."""
    norm_length: int
    """See :attr:`AlgorithmConfig.norm_length` (here: never unset)."""
    clip_low: float
    """See :attr:`AlgorithmConfig.clip_low`."""
    clip_high: float
    """See :attr:`AlgorithmConfig.clip_high`."""
    mismatch_threshold: float | None
    """See :attr:`AlgorithmConfig.mismatch_threshold` (None: never mask)."""
    kl_coef: float
    """See :attr:`AlgorithmConfig.kl_coef`."""
    entropy_coef: float
    """See :attr:`AlgorithmConfig.entropy_coef`."""


PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {"advantage": "grpo", "scale_by_std": True, "loss": "ppo", "ratio_level": "token",
             "aggregation": "seq_mean_token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "dr_grpo": {"advantage": "grpo", "scale_by_std": False, "loss": "ppo", "ratio_level": "token",
                "aggregation": "seq_mean_token_sum_norm", "clip_low": 0.2, "clip_high": 0.2},
    "rloo": {"advantage": "rloo", "loss": "ppo", "ratio_level": "token",
             "aggregation": "token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "reinforce_pp": {"advantage": "reinforce_pp", "baseline": "none", "loss": "ppo",
                     "ratio_level": "token", "aggregation": "token_mean", "clip_low": 0.2,
                     "clip_high": 0.2},
    "gspo": {"advantage": "grpo", "scale_by_std": True, "loss": "ppo", "ratio_level": "sequence",
             "aggregation": "seq_mean_token_mean", "clip_low": 3e-4, "clip_high": 4e-4},
    "lite_ppo": {"advantage": "lite_ppo", "loss": "ppo", "ratio_level": "token",
                 "aggregation": "token_mean", "clip_low": 0.2, "clip_high": 0.2},
    "ipa": {"advantage": "ipa", "gamma": 0.95, "baseline": "none", "loss": "ipa",
            "ratio_level": "chunk", "aggregation": "token_mean", "clip_low": 0.2,
            "clip_high": 0.2, "mismatch_threshold": 2.0},
}  # fmt: skip
"""Each algorithm as a filling of the one abstraction."""

_DEFAULTS = {"scale_by_std": True, "gamma": 1.0, "baseline": "none"}


class EnvConfig(_Section):
    """Where episodes come from (in-process environments; sandboxes arrive with agentic RL)."""

    name: str = "guess"
    """A built-in environment (``roll envs`` lists them) or ``package.module:Class``."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments for the environment's constructor."""
    seed: int = 0
    """First environment seed; group ``i`` of step ``s`` uses a seed drawn from this and (s, i)."""


class AgentConfig(_Section):
    """The agent that plays the episodes of ``tasks:``."""

    name: str = "iflow"
    """``iflow``, an agent registered in ``ale.agents`` (what ``rock bench --agent`` takes,
    e.g. ``mini-swe-agent``) or ``package.module:Class``."""
    transport: Literal["auto", "in-process", "gateway"] = "auto"
    """``in-process``: iflow with the policy as its model object (iflow only); ``gateway``: the
    agent calls roll's OpenAI-compatible policy gateway with the base URL and key its episode
    is given (``base_url``, ``api_key`` and ``model`` arguments); ``auto``: in-process for
    iflow, the gateway for any other agent."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """More arguments for the agent (as ``rock bench --agent-kwarg``)."""

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> AgentConfig:
        if self.transport == "auto":
            object.__setattr__(
                self, "transport", "in-process" if self.name == "iflow" else "gateway"
            )
        if self.transport == "in-process" and self.name != "iflow":
            raise ValueError(
                f"only iflow runs in-process; set tasks.agent.transport: gateway for {self.name!r}"
            )
        return self


class TasksConfig(_Section):
    """Agentic RL: episodes of an agent (iflow by default) on tasks in rock sandboxes
    (instead of ``env``)."""

    dataset: str
    """A dataset directory of Terminal-Bench 2.0 tasks (``DIR/tasks/*``), e.g. from ``rock synth``."""
    pool_size: int = Field(default=4, ge=1)
    """Warm sandboxes kept ready."""
    url: str | None = None
    """A running rock daemon to use; default: the one whose address is in ``home``, else a
    private one for the run."""
    home: str | None = None
    """The rock home of that daemon, where ``rock serve`` keeps its address and token
    (``--home``); default: the token from ``$ROCK_TOKEN``, else ``$ROCK_HOME`` or ``~/.rock``."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent (a name alone takes the defaults for the rest)."""
    prompt_profile: Literal["compact", "default"] = "compact"
    """The iflow agent's system prompt and tools: ``compact`` (a short prompt and four tools:
    shell, read, write, finish) or ``default`` (iflow's own)."""
    tool_format: Literal["text", "brief"] = "text"
    """How the policy sees the tools: ``<tool_call>`` markup with the tools' JSON schemas
    (``text``) or described in one line each (``brief``: for tiny models; SFT with
    ``tools: iflow-brief`` renders trajectories the same way)."""
    max_turns: int = Field(default=8, ge=1)
    """Model turns the iflow agent may take in an episode before it stops unfinished."""
    context_limit: int = Field(default=4096, ge=64)
    """Tokens of the policy's context in an episode: a longer prompt fails the call, and a
    turn samples at most what is left."""
    max_attempts: int = Field(default=3, ge=1)
    """Attempts per episode when the infrastructure fails (sandbox, verifier, generation)."""
    daemon_wait: float = Field(default=60.0, gt=0)
    """Seconds an attempt waits for a rock daemon that went away (a restart) to take requests
    again before it fails; episodes its absence broke run again (``infra/daemon_unavailable``)."""
    draw: Literal["random", "balanced"] = "random"
    """How a group's task is drawn: uniformly at random (``random``), or ``balanced`` over
    kinds: tasks with the same ``metadata.tags`` are one kind, the kinds take turns in a
    shuffled order, and within a kind its tasks come in a shuffled order before any repeats,
    so a kind with few tasks is trained as often as a kind with many."""
    max_staleness: int = Field(default=0, ge=0)
    """How many policy versions old a group may be when it is trained on: 0 is synchronous
    (a step's episodes start after the previous update); above 0 the next steps' episodes
    run during the update and older groups are dropped (and counted)."""


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


class TrainConfig(_Section):
    """``roll train``: RL on environment episodes."""

    run_dir: str = "runs/train"
    """Directory of the run: its config, checkpoints, logs and final ``model/``."""
    seed: int = 0
    """Seeds torch, ``random`` and numpy; each step's sampling seeds are drawn from it."""
    model: ModelConfig
    """The policy."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """AdamW and its schedule."""
    run: RunConfig = Field(default_factory=RunConfig)
    """The loop, checkpoints and logs."""
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    """Credit assignment and loss (a preset by name)."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    """The in-process environment episodes come from (unless ``tasks`` is set)."""
    tasks: TasksConfig | None = None
    """Set to train the iflow agent on tasks in sandboxes (``env`` is then not used)."""
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    """Sampling."""
    updates_per_batch: int = Field(default=1, ge=1)
    """Optimiser updates per rollout batch (the batch split in this many mini-batches);
    above 1 the old log-probs come from an extra forward pass before the first update."""
    reference: bool | None = None
    """Keep a frozen copy of the initial policy for the KL term (default: when kl_coef > 0)."""
    resample: ResampleConfig | None = None
    """Start groups from expert trajectories (see :class:`ResampleConfig`); None: from the
    start."""
    ray: RayConfig | None = None
    """Run environments or agentic episodes in Ray actors (see :class:`RayConfig`)."""

    @model_validator(mode="after")
    def _check_server(self) -> TrainConfig:
        if self.rollout.backend == "server" and self.rollout.server is None:
            raise ValueError(
                "rollout.backend: server needs rollout.server.url (the inference server's "
                "OpenAI-compatible base URL) or rollout.server.launch: {} (a vLLM server roll "
                "starts)"
            )
        return self

    @model_validator(mode="after")
    def _check_schedule(self) -> TrainConfig:
        if self.rollout.schedule != "tail_batching":
            return self
        if self.tasks is not None and self.tasks.max_staleness > 0:
            raise ValueError(
                "rollout.schedule: tail_batching is synchronous, it does not mix with "
                "asynchronous rollouts; set tasks.max_staleness: 0 or rollout.schedule: plain"
            )
        if self.resample is not None:
            raise ValueError(
                "rollout.schedule: tail_batching does not start groups from expert prefixes; "
                "remove the resample: section or set rollout.schedule: plain"
            )
        return self

    @model_validator(mode="after")
    def _check_resample(self) -> TrainConfig:
        if self.resample is None:
            return self
        if self.tasks is None and self.resample.self_experts:
            raise ValueError(
                "resample.self_experts is for tasks: (sandboxes that can be forked); "
                "in-process environments replay experts recorded with their seeds"
            )
        if self.resample.experts is None and not (self.resample.self_experts and self.tasks):
            raise ValueError(
                "resample: needs experts: (a JSONL of expert trajectories), or, with tasks:, "
                "self_experts: true (the policy's own successes become the experts)"
            )
        if self.tasks is None:
            return self
        if self.tasks.agent.transport == "gateway":
            raise ValueError(
                "resample: with tasks: continues the in-process iflow agent from an expert's "
                "turns; an agent behind the gateway cannot be given them (set tasks.agent."
                "transport: in-process or remove the resample: section)"
            )
        if self.ray is not None:
            raise ValueError(
                "resample: with tasks: runs its forked groups without Ray rollout workers; "
                "remove the ray: section or the resample: section"
            )
        return self

    @model_validator(mode="after")
    def _check_ray(self) -> TrainConfig:
        if (
            self.ray is not None
            and self.tasks is not None
            and self.tasks.agent.transport == "gateway"
        ):
            raise ValueError(
                "with ray: the episodes run in Ray actors, which do not serve the policy "
                "gateway yet; remove the ray: section or use tasks.agent: iflow in-process"
            )
        if self.ray is not None and self.tasks is not None and self.rollout.backend == "vllm":
            raise ValueError(
                "with ray: and tasks: the policy samples in a Ray actor (rollout.backend: hf) "
                "or in an inference server (rollout.backend: server), not in vLLM inside the "
                "trainer; set rollout.backend: hf or server, or remove the ray: section"
            )
        return self


class SFTConfig(_Section):
    """``roll sft``: supervised fine-tuning on trajectories, per-turn masks applied."""

    run_dir: str = "runs/sft"
    """Directory of the run: its config, checkpoints, logs and final ``model/``."""
    seed: int = 0
    """Seeds torch, ``random`` and numpy, and the order of the data in each epoch."""
    model: ModelConfig
    """The model to fine-tune."""
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    """AdamW and its schedule (learning rate 1e-4 by default)."""
    run: RunConfig = Field(default_factory=RunConfig)
    """The loop, checkpoints and logs."""
    data: list[str]
    """Trajectory JSONL files or dataset directories (every ``*.jsonl`` under ``trajectories/``)."""
    batch_size: int = Field(default=8, ge=1)
    """Trajectories per optimiser step."""
    epochs: float | None = Field(default=None, gt=0)
    """Passes over the data; sets ``run.steps`` when given."""
    max_seq_len: int = Field(default=4096, ge=16)
    """Longer trajectories are cut at an assistant-turn boundary (their tail dropped)."""
    tools: Literal["iflow", "iflow-compact", "iflow-brief", "none"] = "iflow"
    """The tool descriptions in the system prompt: the iflow agent's (as its local model
    renders them); ``iflow-compact``: the compact profile's (its system prompt replaces the
    recorded one), as agentic RL with ``tasks.prompt_profile: compact`` sees them;
    ``iflow-brief``: the compact profile with each tool in one line, as with
    ``tasks.tool_format: brief`` (tiny models); or none."""
    only_successful: bool = True
    """Train only on trajectories with a positive reward (or no reward recorded)."""


def apply_overrides(data: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """``a.b.c=value`` pairs set into ``data`` (values parsed as YAML: numbers, true, null...)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(
                f"override {item!r} is not KEY=VALUE; write it like algorithm.gamma=0.9"
            )
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return data


def load_config(model: type[C], path: str | Path | None, overrides: list[str] | None = None) -> C:
    """Read the YAML at ``path`` (or start empty), apply overrides, validate as ``model``."""
    source = str(path) if path is not None else "the command line"
    data: Any = {}
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"cannot read the config {file} ({exc.strerror or exc}); check the path"
            ) from None
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{file} is not valid YAML ({exc}); fix the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{file} must be a YAML mapping of settings (model:, run:, ...)")
    data = apply_overrides(data, list(overrides or []), source)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(explain(exc, model, source)) from None
