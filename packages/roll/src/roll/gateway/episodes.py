"""What the policy gateway keeps per episode: its key, its transcripts, the record it hands back.

An episode is opened with a key and closed when its agent is done. Each call of the episode
continues one of its **segments**: a transcript (a :class:`~roll.policy.PolicyModel`
for chat calls, a token sequence for text completions) whose last call and answer the new
call's messages begin with. The new messages' tokens are appended to that transcript's and
the sampled ids kept as sampled (token-in/token-out), so the recorded steps have one growing
token view, exactly as on the in-process path. A call that continues no segment (the agent
compressed or truncated its history, a sub-agent began, or a second call came while the
first was still generating: a fork) starts a new segment; the trainer samples each segment
apart (:func:`ale.chunking.split_segments`), and the count is a metric. Nothing is recorded
for a call whose answer was not delivered (the client went away): the transcript goes back
to where it was.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ale.trajectory import Role, Step
from iflow.errors import ContextTooLong
from iflow.models.base import ModelResponse
from roll.generation.queue import GenerationQueue
from roll.policy import PolicyModel


class Refusal(StrEnum):
    """Why the gateway did not serve a call (the server answers each with its HTTP status)."""

    UNKNOWN_KEY = "unknown_key"
    """No key, or one that belongs to no open episode (401)."""
    FINISHED = "episode_finished"
    """The episode was closed (409)."""
    CONTEXT_TOO_LONG = "context_length_exceeded"
    """The prompt leaves no room to generate in the policy's context (400)."""


class CallRefused(Exception):
    """A call the gateway does not serve: ``reason`` says why, the message says it to a person."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class _TextTranscript:
    """A text-completions segment: the text so far and its tokens."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)


@dataclass
class _Segment:
    steps: list[Step] = field(default_factory=list)
    chat: PolicyModel | None = None
    text: _TextTranscript | None = None
    busy: bool = False


@dataclass
class EpisodeRecord:
    """What an episode's agent did through the gateway, handed back when it is closed."""

    steps: list[Step]
    """Every segment's messages and sampled answers, one segment after another (each later
    segment's first answer has a prompt that does not extend the tokens before it)."""
    calls: int
    segments: int
    lost: bool = False
    """The gateway restarted while the episode was open: its record is not the whole
    episode, so it must be run again rather than scored."""


@dataclass
class _Episode:
    label: str
    segments: list[_Segment] = field(default_factory=list)
    calls: int = 0
    open: bool = True
    lost: bool = False


class GatewayEpisodes:
    """The open episodes of a gateway, by key (see the module docstring)."""

    def __init__(
        self,
        queue: GenerationQueue,
        tokenizer: Any,
        *,
        context_limit: int = 4096,
        max_new_tokens: int | None = None,
        tool_format: str = "auto",
    ) -> None:
        self.queue = queue
        self.tokenizer = tokenizer
        self.context_limit = context_limit
        self.max_new_tokens = max_new_tokens or queue.params.max_new_tokens
        self.tool_format = tool_format
        self._episodes: dict[str, _Episode] = {}
        self.undelivered = 0
        """Answers generated but not delivered (the client went away): not recorded."""

    # -- keys ------------------------------------------------------------------------------------

    def open(self, label: str = "") -> str:
        """A new episode; its key (the agent's API key)."""
        key = f"roll-{secrets.token_urlsafe(18)}"
        self._episodes[key] = _Episode(label)
        return key

    def close(self, key: str) -> EpisodeRecord:
        """End the episode of ``key`` (later calls get :attr:`Refusal.FINISHED`) and return its
        record."""
        episode = self._episodes[key]
        episode.open = False
        steps: list[Step] = []
        for index, segment in enumerate(episode.segments):
            if index and segment.steps:
                first = next(
                    (i for i, s in enumerate(segment.steps) if s.token_ids is not None), None
                )
                if first is not None:
                    answer = segment.steps[first]
                    extra = {
                        **answer.extra,
                        "roll": {**answer.extra.get("roll", {}), "rewritten": True},
                    }
                    segment.steps[first] = answer.model_copy(update={"extra": extra})
            steps.extend(segment.steps)
        used = sum(1 for s in episode.segments if s.steps)
        return EpisodeRecord(steps=steps, calls=episode.calls, segments=used, lost=episode.lost)

    def forget(self, key: str) -> None:
        self._episodes.pop(key, None)

    def lose_all(self) -> None:
        """The gateway restarts: every open episode's record is incomplete (see
        :attr:`EpisodeRecord.lost`) and its key stops working."""
        for episode in self._episodes.values():
            if episode.open:
                episode.lost = True
                episode.open = False

    def _episode(self, key: str | None) -> _Episode:
        episode = self._episodes.get(key or "")
        if episode is None or (episode.lost and not episode.open):
            raise CallRefused(
                Refusal.UNKNOWN_KEY,
                "this API key belongs to no open episode of the policy gateway; use the base "
                "URL and key your episode was given",
            )
        if not episode.open:
            raise CallRefused(
                Refusal.FINISHED,
                f"episode {episode.label or 'of this key'} has finished; its calls are "
                "recorded and it takes no more",
            )
        return episode

    # -- calls -----------------------------------------------------------------------------------

    def check(self, key: str | None) -> None:
        """Raise :class:`CallRefused` unless ``key`` is an open episode's."""
        self._episode(key)

    async def chat(
        self,
        key: str | None,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        max_tokens: int | None = None,
    ) -> Answer:
        """The policy's answer to one chat call, to :meth:`Answer.commit` once delivered (or
        :meth:`Answer.discard`). Cancelling the call cancels its generation."""
        episode = self._episode(key)
        budget = min(max_tokens or self.max_new_tokens, self.max_new_tokens)
        segment = next(
            (
                s
                for s in episode.segments
                if s.chat is not None and not s.busy and s.chat.extends(messages)
            ),
            None,
        )
        if segment is None:
            fresh = PolicyModel(
                self.queue,
                self.tokenizer,
                context_limit=self.context_limit,
                max_new_tokens=budget,
                tool_format=self.tool_format,
            )
            segment = _Segment(chat=fresh)
            episode.segments.append(segment)
        model = segment.chat
        assert model is not None
        model.max_new_tokens = budget
        new = messages[model.seen :]
        before = model.snapshot()
        segment.busy = True
        try:
            response = await model.complete(messages, tools)
        except ContextTooLong as exc:
            raise CallRefused(Refusal.CONTEXT_TOO_LONG, str(exc)) from None
        finally:
            segment.busy = False
        episode.calls += 1
        steps = [*new, _answer_step(response, model.name)]
        return Answer(self, episode, segment, steps, response, lambda: model.restore(before))

    async def complete_text(
        self, key: str | None, prompt: str, *, max_tokens: int | None = None
    ) -> Answer:
        """The policy's continuation of ``prompt`` (a text completion; its ``response`` has
        the text, ids and log-probs), to commit or discard as :meth:`chat`'s."""
        episode = self._episode(key)
        segment = next(
            (
                s
                for s in episode.segments
                if s.text is not None and not s.busy and prompt.startswith(s.text.text)
            ),
            None,
        )
        if segment is None:
            segment = _Segment(text=_TextTranscript())
            episode.segments.append(segment)
        transcript = segment.text
        assert transcript is not None
        if transcript.tokens:
            new_text = prompt[len(transcript.text) :]
            ids = transcript.tokens + list(
                self.tokenizer.encode(new_text, add_special_tokens=False)
            )
        else:
            new_text = prompt
            ids = list(self.tokenizer.encode(prompt))
        room = self.context_limit - len(ids)
        if room <= 0:
            raise CallRefused(
                Refusal.CONTEXT_TOO_LONG,
                f"the prompt ({len(ids)} tokens) is longer than the policy's context "
                f"({self.context_limit} tokens)",
            )
        budget = min(max_tokens or self.max_new_tokens, self.max_new_tokens, room)
        segment.busy = True
        try:
            generation = await self.queue.generate(ids, budget)
        finally:
            segment.busy = False
        episode.calls += 1
        sampled = list(generation.token_ids)
        text = self.tokenizer.decode(sampled, skip_special_tokens=True)
        response = ModelResponse(
            content=text,
            finish_reason=generation.finish_reason,
            prompt_token_ids=ids,
            token_ids=sampled,
            logprobs=list(generation.logprobs),
            policy_version=generation.policy_version,
        )
        before = (transcript.text, transcript.tokens)
        transcript.text, transcript.tokens = prompt + text, ids + sampled

        def undo() -> None:
            transcript.text, transcript.tokens = before

        steps = [Step(role=Role.USER, content=new_text), _answer_step(response, "policy")]
        return Answer(self, episode, segment, steps, response, undo)


@dataclass
class Answer:
    """A served call's answer, recorded only when :meth:`commit` says it was delivered."""

    episodes: GatewayEpisodes
    episode: _Episode
    segment: _Segment
    steps: list[Step]
    response: ModelResponse
    undo: Callable[[], None]
    """Puts the transcript back as it was before the call."""
    done: bool = False

    def commit(self) -> None:
        """The answer reached the client: record the call (unless its episode has ended)."""
        if self.done:
            return
        self.done = True
        if self.episode.open:
            self.segment.steps.extend(self.steps)
        else:
            self.undo()

    def discard(self) -> None:
        """The answer did not reach the client: nothing is recorded, the transcript is as
        before the call."""
        if self.done:
            return
        self.done = True
        self.undo()
        self.episodes.undelivered += 1


def _answer_step(response: ModelResponse, model: str) -> Step:
    return Step(
        role=Role.ASSISTANT,
        content=response.content,
        tool_calls=response.tool_calls,
        prompt_token_ids=response.prompt_token_ids,
        token_ids=response.token_ids,
        logprobs=response.logprobs,
        policy_version=response.policy_version,
        model=model,
        extra=dict(response.extra),
    )
