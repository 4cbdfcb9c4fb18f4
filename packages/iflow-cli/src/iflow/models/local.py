"""A transformers causal LM in this process: small local models and the trainer's policy.

:class:`LocalModel` renders the conversation with the tokenizer's chat template, samples in a
worker thread (one generation at a time) and returns what a trainer needs besides the text:
the prompt's token ids, the sampled token ids and the log-probability of each sampled token
under the distribution it was sampled from.

Tools reach the template in one of two ways. With ``tool_format="auto"`` (the default) the
choice follows what the template uses; ``"native"`` and ``"text"`` force one:

- a template that uses ``tools`` (Qwen-style) gets the schemas as ``tools``; otherwise
  :func:`iflow.models.parsing.render_tools_prompt` is appended to the system message, in
  the brief form (one line a tool) for ``"auto"`` and ``"brief"``: a model whose template
  knows no tools (SmolLM2, most small models) was not trained on JSON schemas either, and
  the brief form costs a fifth of the tokens;
- a template that uses ``tool_calls`` gets assistant calls (arguments as objects) and ``tool``
  messages as they are; otherwise they are rewritten as ``<tool_call>`` / ``<tool_response>``
  text (:func:`iflow.models.parsing.text_tool_messages`).

Either way calls come back as ``<tool_call>`` markup in the text and are parsed with
:func:`iflow.models.parsing.parse_tool_calls`. :func:`prompt_token_ids` is the one place the
prompt is built, so a trainer can rebuild exactly what the policy saw.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from ale.trajectory import Step, Usage
from iflow.errors import ConfigError, ContextTooLong, ModelError
from iflow.models.base import DeltaCallback, ModelResponse, to_openai_messages
from iflow.models.directory import check_model_directory
from iflow.models.parsing import parse_tool_calls, text_tool_messages, with_tools_prompt

_DEFAULT_CONTEXT = 32768
ToolFormat = Literal["auto", "native", "text", "brief"]


class LocalModel:
    """A model directory (``save_pretrained`` output) loaded with transformers.

    ``temperature`` 0 is greedy decoding; otherwise tokens are sampled from the softmax of the
    logits divided by ``temperature``, restricted to the ``top_p`` nucleus. No other sampling
    rule is applied, whatever the model's ``generation_config.json`` says (no top-k, no
    repetition penalty), so the distribution is exactly the one these settings describe.
    ``seed`` makes runs reproducible: call *n* samples with seed ``seed + n``. ``context_limit``
    defaults to the config's ``max_position_embeddings``. Loading happens in the constructor.
    """

    exact_tokens = True
    """Counts come from the tokenizer (the agent's meter asks :meth:`count_tokens`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        device: str = "cpu",
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        context_limit: int | None = None,
        dtype: str = "auto",
        tool_format: ToolFormat = "auto",
        name: str | None = None,
    ) -> None:
        directory = Path(path).expanduser()
        model, tokenizer = _load(directory, device=device, dtype=dtype)
        self._setup(
            model,
            tokenizer,
            name=name or directory.name,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            context_limit=context_limit,
            tool_format=tool_format,
        )

    @classmethod
    def from_loaded(
        cls,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "policy",
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        context_limit: int | None = None,
        tool_format: ToolFormat = "auto",
    ) -> LocalModel:
        """Wrap a model and tokenizer already in memory (the trainer's live policy); the model
        is used on the device it is on."""
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                "the tokenizer has no chat template; set tokenizer.chat_template before use."
            )
        self = cls.__new__(cls)
        self._setup(
            model,
            tokenizer,
            name=name,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=seed,
            context_limit=context_limit,
            tool_format=tool_format,
        )
        return self

    def _setup(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        seed: int | None,
        context_limit: int | None,
        tool_format: ToolFormat,
    ) -> None:
        if tool_format not in ("auto", "native", "text", "brief"):
            raise ConfigError(
                'tool_format must be "auto", "native", "text" or "brief" for a local model, '
                f"not {tool_format!r}."
            )
        if temperature < 0:
            raise ConfigError(f"temperature must be 0 (greedy) or more, not {temperature}.")
        if not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], not {top_p}.")
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, not {max_new_tokens}.")
        self.name = name
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.tool_format: ToolFormat = tool_format
        limit = getattr(model.config, "max_position_embeddings", None) or _DEFAULT_CONTEXT
        self.context_limit: int = context_limit or int(limit)
        self._calls = 0
        self._lock = threading.Lock()

    def count_tokens(self, messages: list[Step], tools: list[dict[str, Any]]) -> int:
        """Exact: the length of the prompt the chat template makes (generation prompt included)."""
        return len(prompt_token_ids(self.tokenizer, messages, tools, self.tool_format))

    async def complete(
        self,
        messages: list[Step],
        tools: list[dict[str, Any]],
        *,
        on_delta: DeltaCallback | None = None,
    ) -> ModelResponse:
        """Generate one answer in a worker thread. ``on_delta`` gets the whole text at the
        end (generation is not streamed)."""
        response = await asyncio.to_thread(self._complete, messages, tools)
        if on_delta is not None and response.content:
            on_delta(response.content)
        return response

    def _complete(self, messages: list[Step], tools: list[dict[str, Any]]) -> ModelResponse:
        prompt = prompt_token_ids(self.tokenizer, messages, tools, self.tool_format)
        room = self.context_limit - len(prompt)
        if room <= 0:
            raise ContextTooLong(
                f"the prompt ({len(prompt)} tokens) is longer than {self.name}'s context window "
                f"({self.context_limit} tokens); compress the conversation (/compress) or use a "
                "model with a longer context."
            )
        token_ids, logprobs = self._generate(prompt, min(self.max_new_tokens, room))
        eos = set(_eos_ids(self.model, self.tokenizer))
        stopped = bool(token_ids) and token_ids[-1] in eos
        raw = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        content, calls, errors = parse_tool_calls(raw)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            format_errors=errors,
            usage=Usage(prompt_tokens=len(prompt), completion_tokens=len(token_ids)),
            finish_reason="stop" if stopped else "length",
            prompt_token_ids=prompt,
            token_ids=token_ids,
            logprobs=logprobs,
            raw=raw if raw != content else None,
        )

    def _generate(self, prompt: list[int], max_new_tokens: int) -> tuple[list[int], list[float]]:
        """Sample after ``prompt``; the sampled ids and their log-probs. Runs in a thread."""
        import torch
        from transformers import GenerationConfig

        sampling = self.temperature > 0
        # top_k=0 switches off the top-k that transformers would otherwise default to
        options: dict[str, Any] = {"temperature": self.temperature, "top_p": self.top_p, "top_k": 0}
        eos = _eos_ids(self.model, self.tokenizer)
        config = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=sampling,
            **(options if sampling else {}),
            repetition_penalty=1.0,
            eos_token_id=eos or None,
            pad_token_id=_pad_id(self.tokenizer, eos),
            return_dict_in_generate=True,
            output_scores=True,
        )
        with self._lock, torch.inference_mode():
            device = self.model.device
            input_ids = torch.tensor([prompt], dtype=torch.long, device=device)
            seed = None if self.seed is None else self.seed + self._calls
            self._calls += 1
            with _seeded(seed, device):
                out = self.model.generate(
                    input_ids=input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    generation_config=config,
                )
            sampled = out.sequences[0, len(prompt) :]
            if not len(out.scores):
                return [], []
            # `scores` holds, per step, the logits after the logits processors: divided by the
            # temperature and with tokens outside the top-p nucleus at -inf. generate samples
            # from softmax(scores), so log_softmax(scores) is the sampling distribution and
            # its value at the sampled token is that token's log-prob under it. (`logits`, the
            # raw model output, would give the untempered model distribution instead.) In
            # greedy decoding no processor runs, so these are the model's own log-probs: the
            # point mass of argmax would carry no information.
            scores = torch.stack(out.scores, dim=0)[:, 0, :].float()
            count = min(len(sampled), scores.shape[0])
            sampled = sampled[:count]
            chosen = torch.log_softmax(scores[:count], dim=-1).gather(-1, sampled[:, None])
            return sampled.tolist(), chosen.squeeze(-1).tolist()


# -- the prompt --------------------------------------------------------------------------------


def template_features(tokenizer: Any, tool_format: ToolFormat = "auto") -> tuple[bool, bool]:
    """Whether to give the chat template ``tools`` and ``tool_calls`` natively: what the
    template uses for ``"auto"``, both for ``"native"``, neither for ``"text"`` and
    ``"brief"`` (text markup, tools described in one line each)."""
    if tool_format != "auto":
        native = tool_format == "native"
        return native, native
    template = tokenizer.chat_template
    text = json.dumps(template) if isinstance(template, dict) else str(template or "")
    return bool(re.search(r"\btools\b", text)), "tool_calls" in text


def chat_messages(
    tokenizer: Any,
    messages: list[Step],
    tools: list[dict[str, Any]],
    tool_format: ToolFormat = "auto",
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """The messages and the ``tools`` argument to give the tokenizer's chat template (see the
    module docstring for how tools are placed)."""
    uses_tools, uses_calls = template_features(tokenizer, tool_format)
    chat = to_openai_messages(messages)
    if uses_calls:
        for message in chat:
            for call in message.get("tool_calls", []):
                function = call["function"]
                with contextlib.suppress(json.JSONDecodeError):  # invalid JSON stays text
                    function["arguments"] = json.loads(function["arguments"])
    else:
        chat = text_tool_messages(chat)
    if uses_tools:
        return chat, (tools or None)
    return with_tools_prompt(chat, tools, brief=tool_format in ("brief", "auto")), None


def prompt_token_ids(
    tokenizer: Any,
    messages: list[Step],
    tools: list[dict[str, Any]],
    tool_format: ToolFormat = "auto",
    *,
    add_generation_prompt: bool = True,
) -> list[int]:
    """The token ids of the prompt (generation prompt included unless asked not to) for
    ``messages`` and ``tools``.
    Control tokens written inside messages (``<|im_end|>`` in a file the agent read) are
    encoded as plain text, so only the template's own markup becomes control tokens."""
    from jinja2 import TemplateError

    chat, tools_arg = chat_messages(tokenizer, messages, tools, tool_format)
    options: dict[str, Any] = {"tools": tools_arg, "add_generation_prompt": add_generation_prompt}
    options |= {"tokenize": True, "return_dict": False}
    try:
        try:
            ids = tokenizer.apply_chat_template(chat, sanitize_control_tokens=True, **options)
        except (TypeError, ValueError, NotImplementedError):
            ids = tokenizer.apply_chat_template(chat, **options)  # an older tokenizer class
    except TemplateError as exc:
        raise ModelError(
            f"the chat template could not render this conversation ({exc}); check that the "
            "model directory's template suits a chat with system, user, assistant and tool turns."
        ) from exc
    if isinstance(ids, Mapping):
        ids = ids["input_ids"]
    return [int(i) for i in ids]


# -- loading -----------------------------------------------------------------------------------


def _load(directory: Path, *, device: str, dtype: str) -> tuple[Any, Any]:
    check_model_directory(directory)
    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(
            "the local provider needs transformers and torch; install them with "
            "pip install 'iflow-cli[local]'."
        ) from exc
    try:
        with quiet_progress():
            tokenizer = AutoTokenizer.from_pretrained(directory)
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
        model.to(device)  # type: ignore[arg-type]  # transformers types .to as taking a model
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(
            f"could not load a model from {directory} ({_first_line(exc)}); check that it holds "
            "a complete save_pretrained output and that the device name is right."
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"the tokenizer in {directory} has no chat template; add one to its "
            "tokenizer_config.json or chat_template.jinja."
        )
    model.eval()
    return model, tokenizer


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """transformers' progress bars off while loading or saving (they would draw over a TUI)."""
    from transformers.utils import logging

    enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            logging.enable_progress_bar()


@contextlib.contextmanager
def _seeded(seed: int | None, device: Any) -> Iterator[None]:
    """Seed torch for one generation without changing the caller's random state."""
    if seed is None:
        yield
        return
    import torch

    devices: list[int] = []
    if getattr(device, "type", "cpu") == "cuda":
        devices = [device.index if device.index is not None else torch.cuda.current_device()]
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    found: list[int] = []
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in [configured, tokenizer.eos_token_id]:
        for token in value if isinstance(value, list) else [value]:
            if isinstance(token, int) and token not in found:
                found.append(token)
    return found


def _pad_id(tokenizer: Any, eos: list[int]) -> int | None:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return eos[0] if eos else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


__all__ = [
    "LocalModel",
    "chat_messages",
    "prompt_token_ids",
    "quiet_progress",
    "template_features",
]
