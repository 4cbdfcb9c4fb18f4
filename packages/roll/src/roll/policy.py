"""The policy as the iflow agent's model: one episode's exact tokens over a shared queue.

Below both ways an agent reaches the policy: in-process iflow episodes
(:mod:`roll.agentic`) and the OpenAI-compatible gateway for any other agent
(:mod:`roll.gateway`); so neither folder imports the other for it.

Episodes reach the backend through one :class:`~roll.generation.queue.GenerationQueue`,
which batches their concurrent requests.

:class:`PolicyModel` is one episode's :class:`iflow.models.base.Model`. It keeps the
episode's token sequence itself: the first prompt is the chat template's rendering (as
:func:`iflow.models.local.prompt_token_ids` makes it, tool descriptions included); after
that, the sampled ids are kept exactly as sampled and only the text the template adds for
the new turns (the tool results, the next generation prompt) is tokenised and appended. So
every recorded step's ``prompt_token_ids`` extends the tokens before it, which is what
:func:`ale.chunking.token_view` needs, and the log-probs recorded are those of the tokens
the policy actually produced. When the agent rewrites the history (context compression),
the transcript starts again from the full rendering and the step is marked
``extra["roll"]["rewritten"]``: the trainer splits the trajectory there.
"""

from __future__ import annotations

import json
from typing import Any

from ale.trajectory import Role, Step, Usage
from iflow.errors import ContextTooLong
from iflow.models.base import DeltaCallback, ModelResponse
from iflow.models.local import chat_messages, prompt_token_ids
from iflow.models.parsing import parse_tool_calls
from roll.errors import PromptTooLong
from roll.generation.queue import GenerationQueue

_MARK = "\u2063roll-end-of-turn\u2063"


class PolicyModel:
    """One episode's model: the policy behind a :class:`GenerationQueue`."""

    exact_tokens = True

    def __init__(
        self,
        queue: GenerationQueue,
        tokenizer: Any,
        *,
        name: str = "policy",
        context_limit: int = 4096,
        max_new_tokens: int | None = None,
        tool_format: str = "auto",
    ) -> None:
        self.queue = queue
        self.tokenizer = tokenizer
        self.name = name
        self.tool_format: Any = tool_format
        """How tools reach the prompt (:data:`iflow.models.local.ToolFormat`)."""
        self.context_limit = context_limit
        self.max_new_tokens = max_new_tokens or queue.params.max_new_tokens
        self.tokens: list[int] = []
        """The episode's token sequence so far (prompts and sampled ids)."""
        self._seen = 0
        """How many messages the transcript covers (the last one our own answer)."""
        self._history: list[tuple[Any, ...]] = []
        """What those messages said (:func:`said`): a call continues the transcript only
        when its first ``_seen`` messages say the same."""
        self._stopped = True
        """Whether the last answer ended with an end-of-turn token."""
        self._eos = set(_eos_ids(tokenizer))
        self.policy_versions: list[int] = []

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        return len(prompt_token_ids(self.tokenizer, messages, tools, self.tool_format))

    def _render(self, messages: list[Step], tools: list[dict[str, Any]], *, gen: bool) -> str:
        chat, tools_arg = chat_messages(self.tokenizer, messages, tools, self.tool_format)
        return str(
            self.tokenizer.apply_chat_template(
                chat, tools=tools_arg, add_generation_prompt=gen, tokenize=False
            )
        )

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _end_of_turn(self, messages: list[Step], tools: list[dict[str, Any]]) -> str:
        """The text the template writes after an assistant message's content."""
        probe = [*messages[:1], Step(role=Role.ASSISTANT, content=_MARK)]
        text = self._render(probe, tools, gen=False)
        return text[text.index(_MARK) + len(_MARK) :]

    @property
    def seen(self) -> int:
        """How many messages the transcript covers (the last one its own answer)."""
        return self._seen

    def snapshot(self) -> tuple[Any, ...]:
        """The transcript's state, to :meth:`restore` when an answer was not delivered."""
        return (
            list(self.tokens),
            self._seen,
            list(self._history),
            self._stopped,
            len(self.policy_versions),
        )

    def restore(self, state: tuple[Any, ...]) -> None:
        tokens, self._seen, history, self._stopped, versions = state
        self.tokens, self._history = list(tokens), list(history)
        del self.policy_versions[versions:]

    def extends(self, messages: list[Step]) -> bool:
        """Whether ``messages`` continue this transcript: they begin with the messages of the
        last call and its answer (however the client wrote the answer's tool calls back)."""
        if not self._seen or len(messages) <= self._seen:
            return False
        return [said(m) for m in messages[: self._seen]] == self._history

    def prompt_ids(
        self, messages: list[Step], tools: list[dict[str, Any]]
    ) -> tuple[list[int], bool]:
        """The prompt's ids extending the transcript, and whether the history was rewritten."""
        full = self._render(messages, tools, gen=True)
        if self.extends(messages):
            answered = self._render(messages[: self._seen], tools, gen=False)
            if full.startswith(answered):
                eot = self._end_of_turn(messages, tools)
                tail = full[len(answered) :]
                if self._stopped and self.tokens:
                    stop_text = self.tokenizer.decode([self.tokens[-1]])
                    if eot.startswith(stop_text):
                        # the sampled stop token already wrote the start of the end-of-turn
                        eot_rest = eot[len(stop_text) :]
                        if answered.endswith(eot):
                            return self.tokens + self._encode(eot_rest + tail), False
                if answered.endswith(eot):
                    return self.tokens + self._encode(eot + tail), False
        if not self._seen:
            return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), False
        return prompt_token_ids(self.tokenizer, messages, tools, self.tool_format), True

    def _take_prefix(self, messages: list[Step], tools: list[dict[str, Any]]) -> None:
        """An expert's turns the episode continues from (:func:`is_prefix`) enter the
        transcript as if this policy had written them: each records the prompt it followed
        and the ids of its text as the template writes it, the end-of-turn token included,
        with no log-probs, so the trajectory's token view holds them (for the imitation term;
        they take no RL loss). The steps are the agent's own, so its trajectory has them."""
        for index in range(self._seen, len(messages)):
            step = messages[index]
            if step.role is not Role.ASSISTANT or not is_prefix(step) or step.token_ids:
                continue
            prompt, _ = self.prompt_ids(messages[:index], tools)
            asked = self._render(messages[:index], tools, gen=True)
            answered = self._render(messages[: index + 1], tools, gen=False)
            eot = self._end_of_turn(messages, tools)
            text = answered[len(asked) :] if answered.startswith(asked) else step.content
            text = text[: -len(eot)] if eot and text.endswith(eot) else text
            ids = self._encode(text)
            stop = self._encode(eot)[:1]
            self._stopped = bool(stop) and stop[0] in self._eos
            if self._stopped:
                ids += stop
            step.prompt_token_ids, step.token_ids, step.logprobs = prompt, ids, None
            self.tokens = prompt + ids
            self._seen = index + 1
            self._history = [said(m) for m in messages[: index + 1]]

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        self._take_prefix(messages, tools)
        prompt, rewritten = self.prompt_ids(messages, tools)
        room = self.context_limit - len(prompt)
        if room <= 0:
            raise ContextTooLong(
                f"the prompt ({len(prompt)} tokens) is longer than the policy's context "
                f"({self.context_limit} tokens)"
            )
        queued = self.queue.backend.policy_version
        try:
            generation = await self.queue.generate(prompt, min(self.max_new_tokens, room))
        except PromptTooLong as exc:  # the server's window is smaller than context_limit:
            raise ContextTooLong(str(exc)) from None  # the agent's to handle, as above
        version = queued if generation.policy_version is None else generation.policy_version
        token_ids = list(generation.token_ids)
        self.tokens = prompt + token_ids
        self._seen = len(messages) + 1
        self._stopped = bool(token_ids) and token_ids[-1] in self._eos
        self.policy_versions.append(version)
        raw = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        self._history = [*map(said, messages), said(Step(role=Role.ASSISTANT, content=raw))]
        content, calls, errors = parse_tool_calls(raw)
        if on_delta is not None and content:
            on_delta(content)
        extra: dict[str, Any] = {"roll": {"rewritten": True}} if rewritten else {}
        return ModelResponse(
            content=content,
            tool_calls=calls,
            format_errors=errors,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(token_ids)),
            finish_reason=generation.finish_reason,
            prompt_token_ids=prompt,
            token_ids=token_ids,
            logprobs=list(generation.logprobs),
            policy_version=version,
            raw=raw if raw != content else None,
            extra=extra,
        )


def is_prefix(step: Step) -> bool:
    """Whether ``step`` is a turn of an expert's prefix the episode continues from
    (:attr:`~ale.trajectory.Step.prefix`: chunk-level initialised resampling), not one
    sampled here."""
    return step.prefix


def said(message: Step) -> tuple[Any, ...]:
    """What a message says, to tell a continued history from a rewritten one: an assistant
    turn's text and tool calls (names and arguments; native or as markup in the text, as the
    client chose to write them back), any other message as it is."""
    if message.role is Role.ASSISTANT:
        content, calls, _ = parse_tool_calls(message.content)
        named = [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in message.tool_calls]
        named += [(c.name, json.dumps(c.arguments, sort_keys=True)) for c in calls]
        return (message.role.value, content.strip(), tuple(named))
    results = tuple((r.call_id, r.content) for r in message.tool_results)
    return (message.role.value, message.content, results)


def _eos_ids(tokenizer: Any) -> list[int]:
    ids = tokenizer.eos_token_id
    if ids is None:
        return []
    return list(ids) if isinstance(ids, list | tuple) else [int(ids)]
