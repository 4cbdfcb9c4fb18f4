"""The rollout engine: drive many environments in lockstep and record token-level trajectories.

Each turn, every unfinished episode's prompt goes to the backend in ONE batched
:meth:`~roll.generation.base.GenerationBackend.generate` call; each reply is decoded, given
to its environment, and the observation is appended to the episode's token sequence.

Token bookkeeping. The trainer builds its batch with :func:`ale.chunking.token_view`, which
needs every assistant step's ``prompt_token_ids`` to extend all the tokens before it. So an
episode's sequence only ever grows:

- the first prompt is ``apply_chat_template(messages, add_generation_prompt=True)``;
- the sampled ids are kept exactly as sampled (never decoded and re-tokenised);
- after an action, the environment's tokens are the tokenisation of the *text* the chat
  template adds for the turn: the rest of the template's end-of-turn after the assistant's
  content (all of it, or what follows the stop token the policy sampled when it starts with
  that token), then the template rendered for ``messages + [assistant, observation as a user
  message]`` with the generation prompt minus the template rendered for ``messages +
  [assistant]``. For ChatML that is ``"\\n<|im_start|>user\\n...<|im_end|>\\n
  <|im_start|>assistant\\n"`` after a reply that ended with ``<|im_end|>``, and the whole
  ``"<|im_end|>\\n..."`` after one cut off by ``max_new_tokens``, so the next prompt still
  parses. When every reply ended with the EOS, the decoded sequence is exactly the template's
  rendering of the conversation. Text is tokenised as it is (no control-token escaping, as
``apply_chat_template`` does by default): an observation that contains ``<|im_end|>``
yields that control token.

An episode ends when the environment says ``done``, when ``env.max_turns`` assistant turns
have passed (``limits_exceeded``), or when the next prompt plus ``max_new_tokens`` would pass
``max_seq_len`` (``context_length_exceeded``). Its reward is the sum of the rewards the
environment gave, replayed expert turns included (each step's own reward is on its assistant
step); an episode cut short keeps what it had earned. An observation given with the last
action is recorded as a user step but not tokenised (no prompt follows it).

An :class:`EpisodeRequest` with a ``prefix`` (an expert trajectory) and an ``anchor`` k first
replays the expert's first k actions (see :mod:`roll.resample`), then lets the policy go on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ale.trajectory import AgentInfo, FailureMode, Role, Step, Timings, Trajectory, Usage
from roll.envs.base import Env, EnvStep
from roll.errors import ConfigError, GenerationError, RollError
from roll.generation.base import Generation, GenerationBackend, SamplingParams
from roll.resample import expert_actions, expert_observations, expert_opening

AGENT_NAME = "roll-env"
"""``Trajectory.agent.name`` of every trajectory the engine records."""


@dataclass
class EpisodeRequest:
    """One episode to run."""

    env: Env
    """A fresh environment instance for this episode (episodes must not share one)."""
    seed: int
    """Passed to ``env.reset``."""
    group_id: str | None = None
    """The rollout group, for group-relative advantages."""
    task_id: str | None = None
    """Recorded as the trajectory's task id; default ``"{env.task_id}/{seed}"``."""
    prefix: Trajectory | None = None
    """An expert trajectory of the same task (same env, same seed) to start from."""
    anchor: int = 0
    """With ``prefix``: how many expert actions to replay before the policy takes over."""

    def __post_init__(self) -> None:
        if self.prefix is None and self.anchor != 0:
            raise ConfigError(
                f"anchor {self.anchor} was given without a prefix; an anchor counts the actions "
                "of an expert trajectory, so give that trajectory as prefix."
            )


def _now() -> datetime:
    return datetime.now(UTC)


class _Transcript:
    """One conversation, as chat messages and as the growing token sequence the policy sees."""

    def __init__(self, tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> None:
        self._tokenizer = tokenizer
        self.messages: list[dict[str, str]] = [
            {"role": m["role"], "content": m["content"]} for m in messages
        ]
        ids = tokenizer.apply_chat_template(
            self.messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if isinstance(ids, Mapping):
            ids = ids["input_ids"]
        self.tokens: list[int] = [int(i) for i in ids]
        self._text = self._render(self.messages, generation_prompt=True)
        """The template's rendering of ``messages`` (as of the last prompt or reply)."""
        self._pending = ""
        """Template text after the last reply that no token stands for yet (its end-of-turn)."""

    def _render(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
        return str(
            self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=generation_prompt, tokenize=False
            )
        )

    def _encode(self, text: str) -> list[int]:
        return [int(i) for i in self._tokenizer.encode(text, add_special_tokens=False)]

    def add_assistant(self, content: str, token_ids: list[int] | None) -> list[int]:
        """Append a reply; ``token_ids`` are the sampled ids, or None to tokenise ``content``
        (a replayed expert action: its ids end with the EOS when the template's end-of-turn
        starts with it). Returns the ids recorded for the reply."""
        end_of_turn = self._end_of_turn()
        special = set(self._tokenizer.all_special_ids)
        if token_ids is None:
            token_ids = self._encode(content)
            eos = self._tokenizer.eos_token_id
            if eos is not None and end_of_turn.startswith(self._decode_one(eos)):
                token_ids.append(int(eos))
        covered = 0
        if token_ids and token_ids[-1] in special:
            stop_text = self._decode_one(token_ids[-1])
            if stop_text and end_of_turn.startswith(stop_text):
                covered = len(stop_text)
        self.tokens.extend(token_ids)
        self.messages.append({"role": "assistant", "content": content})
        self._text = self._render(self.messages, generation_prompt=False)
        self._pending = end_of_turn[covered:]
        return token_ids

    def _end_of_turn(self) -> str:
        """The text the template writes after an assistant message's content (ChatML:
        ``"<|im_end|>\\n"``), found by rendering a marker as the content."""
        marker = "\x00roll:end-of-turn\x00"
        text = self._render(
            [*self.messages, {"role": "assistant", "content": marker}], generation_prompt=False
        )
        at = text.rfind(marker)
        if at < 0:
            raise RollError(
                "the chat template dropped the assistant's content, so the end of an assistant "
                "turn cannot be found; use a template that renders assistant messages."
            )
        return text[at + len(marker) :]

    def add_observation(self, observation: str | None) -> list[int]:
        """Append the observation as a user message (none when None) and the next generation
        prompt; returns the environment's new token ids."""
        if observation is not None:
            self.messages.append({"role": "user", "content": observation})
        prompt = self._render(self.messages, generation_prompt=True)
        if not prompt.startswith(self._text):
            raise RollError(
                "the chat template does not render the conversation incrementally (adding an "
                "observation changed the text before it); use a template that renders earlier "
                "turns unchanged."
            )
        ids = self._encode(self._pending + prompt[len(self._text) :])
        self.tokens.extend(ids)
        self._text = prompt
        self._pending = ""
        return ids

    def _decode_one(self, token_id: int) -> str:
        return str(self._tokenizer.decode([token_id], skip_special_tokens=False))


@dataclass
class _Episode:
    request: EpisodeRequest
    transcript: _Transcript
    steps: list[Step]
    episode_id: str
    started_at: datetime
    started: float
    rewards: list[float] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    turns: int = 0
    over: bool = False
    failure: FailureMode | None = None
    finished_at: datetime | None = None
    seconds: float = 0.0

    @property
    def env(self) -> Env:
        return self.request.env

    def end(self, failure: FailureMode | None = None) -> None:
        self.over = True
        self.failure = failure
        self.finished_at = _now()
        self.seconds = time.perf_counter() - self.started


class RolloutEngine:
    """Runs episodes of in-process environments with a generation backend, in lockstep."""

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        params: SamplingParams,
        *,
        max_seq_len: int,
    ) -> None:
        if max_seq_len <= params.max_new_tokens:
            raise ConfigError(
                f"max_seq_len ({max_seq_len}) must exceed max_new_tokens ({params.max_new_tokens}) "
                "to leave room for a prompt; raise max_seq_len or lower max_new_tokens."
            )
        self.backend = backend
        self.tokenizer = tokenizer
        self.params = params
        self.max_seq_len = max_seq_len
        self._calls = 0

    def run(
        self, requests: list[EpisodeRequest], *, keep_groups: int | None = None
    ) -> list[Trajectory]:
        """Run every request to its end; one trajectory per request, in order.

        With ``keep_groups`` the run stops as soon as that many groups (requests sharing a
        ``group_id``) have every episode over, and only their trajectories come back (in
        request order); the other episodes are cut where they are. Groups that end at the
        same turn count in request order (tail batching's short rounds)."""
        if len({id(request.env) for request in requests}) < len(requests):
            raise ConfigError(
                "two episode requests share one environment instance; give each request its "
                "own (make_env returns a new one per call)."
            )
        episodes = [self._start(request) for request in requests]
        groups: dict[str | None, list[_Episode]] = {}
        for episode in episodes:
            groups.setdefault(episode.request.group_id, []).append(episode)
        finished: list[str | None] = []
        while True:
            ready: list[_Episode] = []
            for episode in episodes:
                if episode.over:
                    continue
                if len(episode.transcript.tokens) + self.params.max_new_tokens > self.max_seq_len:
                    episode.end(FailureMode.CONTEXT_LENGTH_EXCEEDED)
                    continue
                ready.append(episode)
            if keep_groups is not None:
                finished += [
                    g for g, members in groups.items()
                    if g not in finished and all(e.over for e in members)
                ]  # fmt: skip
                if len(finished) >= keep_groups:
                    break
            if not ready:
                break
            generations = self._generate([list(e.transcript.tokens) for e in ready])
            for episode, generation in zip(ready, generations, strict=True):
                self._act(episode, generation)
        kept = set(finished[:keep_groups]) if keep_groups is not None else set(groups)
        return [self._trajectory(e) for e in episodes if e.request.group_id in kept]

    # -- one turn ------------------------------------------------------------------------------

    def _generate(self, prompts: list[list[int]]) -> list[Generation]:
        params = self.params
        if params.seed is not None:
            params = params.model_copy(update={"seed": params.seed + self._calls})
        self._calls += 1
        generations = self.backend.generate(prompts, params)
        if len(generations) != len(prompts):
            raise GenerationError(
                f"backend {self.backend.name!r} returned {len(generations)} generations for "
                f"{len(prompts)} prompts; a backend must answer every prompt, in order."
            )
        for generation in generations:
            if len(generation.logprobs) != len(generation.token_ids):
                raise GenerationError(
                    f"backend {self.backend.name!r} returned {len(generation.logprobs)} log-probs "
                    f"for {len(generation.token_ids)} tokens; it must give one per sampled token."
                )
        return generations

    def _act(self, episode: _Episode, generation: Generation) -> None:
        sampled = list(generation.token_ids)
        content = str(self.tokenizer.decode(sampled, skip_special_tokens=True))
        prompt = list(episode.transcript.tokens)
        token_ids = episode.transcript.add_assistant(content, sampled)
        result = episode.env.step(content)
        episode.steps.append(
            _assistant_step(
                content,
                prompt,
                token_ids,
                result,
                logprobs=list(generation.logprobs),
                policy_version=(
                    self.backend.policy_version
                    if generation.policy_version is None
                    else generation.policy_version
                ),
            )
        )
        episode.finish_reasons.append(generation.finish_reason)
        self._after_action(episode, result)

    def _after_action(self, episode: _Episode, result: EnvStep) -> None:
        episode.turns += 1
        episode.rewards.append(result.reward)
        last = result.done or episode.turns >= episode.env.max_turns
        if not last:
            episode.transcript.add_observation(result.observation)
        if result.observation is not None:
            episode.steps.append(Step(role=Role.USER, content=result.observation, timestamp=_now()))
        if result.done:
            episode.end()
        elif last:
            episode.end(FailureMode.LIMITS_EXCEEDED)

    # -- start and replay ----------------------------------------------------------------------

    def _start(self, request: EpisodeRequest) -> _Episode:
        started, started_at = time.perf_counter(), _now()
        messages = request.env.reset(request.seed)
        transcript = _Transcript(self.tokenizer, messages)
        steps = [
            Step(role=Role(m["role"]), content=m["content"], timestamp=started_at) for m in messages
        ]
        prefix = request.prefix
        episode_id = (prefix.episode_id if prefix is not None else None) or uuid.uuid4().hex
        episode = _Episode(request, transcript, steps, episode_id, started_at, started)
        if prefix is not None:
            self._replay(episode, prefix, request.anchor, messages)
        return episode

    def _replay(
        self,
        episode: _Episode,
        prefix: Trajectory,
        anchor: int,
        opening: list[dict[str, str]],
    ) -> None:
        actions = expert_actions(prefix)
        if not 0 <= anchor < len(actions):
            raise ConfigError(
                f"anchor {anchor} is outside [0, {len(actions) - 1}] for expert trajectory "
                f"{prefix.trajectory_id} with {len(actions)} assistant turns."
            )
        expected_opening = expert_opening(prefix)
        given_opening = [{"role": m["role"], "content": m["content"]} for m in opening]
        if expected_opening and expected_opening != given_opening:
            raise RollError(
                f"replaying expert trajectory {prefix.trajectory_id}: at turn 0 the environment's "
                "opening messages differ from the expert's; replay with the expert's env settings "
                "and seed."
            )
        observations = expert_observations(prefix)
        for turn in range(anchor):
            if episode.over:
                break
            action = actions[turn]
            prompt = list(episode.transcript.tokens)
            token_ids = episode.transcript.add_assistant(action, None)
            result = episode.env.step(action)
            expected = observations[turn]
            if result.done:
                raise RollError(
                    f"replaying expert trajectory {prefix.trajectory_id}: the environment ended "
                    f"the episode at turn {turn + 1}, before anchor {anchor}; the environment is "
                    "not deterministic or the trajectory is of another task or seed."
                )
            if expected is not None and result.observation != expected:
                raise RollError(
                    f"replaying expert trajectory {prefix.trajectory_id}: at turn {turn + 1} the "
                    f"environment answered {result.observation!r} but the expert saw "
                    f"{expected!r}; the environment is not deterministic or the trajectory is of "
                    "another task or seed."
                )
            step = _assistant_step(action, prompt, token_ids, result, logprobs=None)
            step.model = prefix.model
            step.prefix = True
            episode.steps.append(step)
            episode.finish_reasons.append("prefix")
            self._after_action(episode, result)

    # -- the record ----------------------------------------------------------------------------

    def _trajectory(self, episode: _Episode) -> Trajectory:
        env, request = episode.env, episode.request
        name = str(getattr(env, "name", type(env).__name__))
        sampled = [s for s in episode.steps if s.role is Role.ASSISTANT and s.usage is not None]
        roll: dict[str, Any] = {
            "turns": episode.turns,
            "finish_reasons": episode.finish_reasons,
            "env_seed": request.seed,
        }
        if request.prefix is not None:
            roll["anchor"] = request.anchor
            roll["prefix_trajectory_id"] = request.prefix.trajectory_id
        return Trajectory(
            task_id=request.task_id or f"{env.task_id}/{request.seed}",
            group_id=request.group_id,
            episode_id=episode.episode_id,
            agent=AgentInfo(name=AGENT_NAME, extra={"env": name}),
            model=self.backend.name,
            steps=episode.steps,
            reward=float(sum(episode.rewards)),
            failure_mode=episode.failure,
            timings=Timings(
                started_at=episode.started_at,
                finished_at=episode.finished_at,
                agent_sec=episode.seconds,
                total_sec=episode.seconds,
            ),
            usage=Usage(
                prompt_tokens=sum(s.usage.prompt_tokens or 0 for s in sampled if s.usage),
                completion_tokens=sum(s.usage.completion_tokens or 0 for s in sampled if s.usage),
            ),
            extra={"roll": roll},
        )


def _assistant_step(
    content: str,
    prompt: list[int],
    token_ids: list[int],
    result: EnvStep,
    *,
    logprobs: list[float] | None,
    policy_version: int | None = None,
) -> Step:
    sampled = logprobs is not None
    return Step(
        role=Role.ASSISTANT,
        content=content,
        timestamp=_now(),
        prompt_token_ids=prompt,
        token_ids=token_ids,
        logprobs=logprobs,
        policy_version=policy_version,
        reward=result.reward,
        usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(token_ids))
        if sampled
        else None,
        extra={"env_info": result.info} if result.info else {},
    )
