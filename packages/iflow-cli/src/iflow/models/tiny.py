"""A tiny chat model built from nothing, for tests, demos and the trainer's smoke runs.

Nothing can be downloaded in the places this runs, so :func:`build_tiny_model` makes a whole
model directory locally in about a second: a byte-level BPE tokenizer trained on a small
built-in corpus (English, shell, Python, JSON and tool-call markup), a ChatML chat template,
and a randomly initialised ``LlamaForCausalLM`` of about a hundred thousand parameters. The
result loads with ``AutoTokenizer`` / ``AutoModelForCausalLM`` like any checkpoint; its output
is noise until trained. (Llama rather than Qwen2: ``AutoTokenizer`` swaps in its own
pre-tokenizer for Qwen2 directories, which would not be the tokenizer trained here; for
Llama directories it loads ``tokenizer.json`` as written.)

The chat template (ChatML) renders:

- ``system``/``user``/``assistant`` turns as ``<|im_start|>ROLE\\n...<|im_end|>``;
- an assistant's ``tool_calls`` after its text, each as
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
- consecutive ``tool`` messages as one user turn of ``<tool_response>...</tool_response>``
  blocks;
- the assistant header when ``add_generation_prompt`` is set.

When a prompt is built with ``sanitize_control_tokens=True`` (as :mod:`iflow.models.local`
does), only the ChatML tokens written inside messages are turned into plain text; the tool
markup stays one token wherever it appears (``chat_control_tokens`` is empty), so a call the
model wrote reads back as the same tokens when it reappears in a later prompt as text.

It deliberately does not know the ``tools`` list: :mod:`iflow.models.local` appends
:func:`iflow.models.parsing.render_tools_prompt` to the system message for templates that do
not use ``tools``, so the tool description is written in one place for every text model.

torch, tokenizers and transformers are imported inside the function: importing this module
is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
"""Control tokens of the ChatML format (special: dropped when decoding)."""
MARKUP_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
"""Tool markup, added as single tokens that stay in decoded text."""

CHAT_TEMPLATE = """\
{%- for message in messages -%}
{%- set content = message.content | default('', true) -%}
{%- if message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
{{- '<|im_start|>user' -}}
{%- endif -%}
{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
{{- '<|im_end|>\\n' -}}
{%- endif -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\\n' + content -}}
{%- for call in message.tool_calls | default([], true) -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if content or not loop.first -%}{{- '\\n' -}}{%- endif -%}
{{- '<tool_call>\\n{"name": ' + (fn.name | tojson) + ', "arguments": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}
{%- else -%}{{- fn.arguments | default({}, true) | tojson -}}{%- endif -%}
{{- '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\\n' -}}
{%- else -%}
{{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}
"""

_CORPUS = """\
The quick brown fox jumps over the lazy dog. I will read the file, run the tests and fix the bug.
You are a helpful coding assistant working in a terminal. Answer briefly and call tools when needed.
Let me look at the repository first. The tests pass now. The task is done; I am finishing.
ls -la && cd src && cat README.md | head -n 20
grep -rn "def main" . --include=*.py; find . -name "*.txt" -type f
python3 -m pytest -q tests/ 2>&1 | tail -5; git status; git diff --stat
mkdir -p build && echo "hello world" > build/out.txt && wc -l build/out.txt
pip install -e . ; export PATH=$HOME/.local/bin:$PATH; sed -n 1,40p main.py
def add(a: int, b: int) -> int:
    \"\"\"Return the sum of a and b.\"\"\"
    return a + b

class Counter:
    def __init__(self) -> None:
        self.count = 0

    def increment(self, step: int = 1) -> None:
        self.count += step

for i in range(10):
    if i % 2 == 0:
        print(f"even {i}")
    else:
        print("odd", i)
import os, sys, json
with open("data.json") as handle:
    data = json.load(handle)
{"name": "example", "version": "1.0.0", "items": [1, 2, 3], "enabled": true, "extra": null}
{"path": "src/app.py", "start_line": 1, "end_line": 50, "content": "print('hi')\\n"}
<tool_call>
{"name": "run_shell_command", "arguments": {"command": "ls -la"}}
</tool_call>
<tool_call>
{"name": "read_file", "arguments": {"path": "README.md"}}
</tool_call>
<tool_call>
{"name": "write_file", "arguments": {"path": "hello.py", "content": "print('hello')\\n"}}
</tool_call>
<tool_call>
{"name": "finish", "arguments": {"summary": "Created hello.py and ran it."}}
</tool_call>
<tool_response>
total 8
drwxr-xr-x 2 user user 4096 Jan  1 00:00 .
-rw-r--r-- 1 user user   12 Jan  1 00:00 hello.py
</tool_response>
<tool_response>
exit code: 0
hello
</tool_response>
"""


def build_tiny_model(
    path: str | Path,
    *,
    seed: int = 0,
    vocab_size: int = 512,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_position_embeddings: int = 2048,
    corpus: Iterable[str] = (),
) -> Path:
    """Write a tiny ChatML chat model (tokenizer, template, random weights) into ``path``.

    The directory is created if needed and loads with ``AutoTokenizer.from_pretrained`` and
    ``AutoModelForCausalLM.from_pretrained``. The same arguments give the same files: the
    tokenizer is trained deterministically and the weights are drawn from ``seed`` without
    touching the global torch random state. ``vocab_size`` is the BPE vocabulary (at least
    256 bytes plus the 7 added tokens); ``hidden_size`` must be divisible by ``heads``.
    ``corpus``: more texts to train the tokenizer on, after the built-in one (a trainer
    passes the prompts its model will see, so they take fewer tokens). Returns ``path`` as a
    :class:`Path`.
    """
    minimum = 256 + len(SPECIAL_TOKENS) + len(MARKUP_TOKENS)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (bytes and added tokens)")
    if hidden_size % heads:
        raise ValueError(f"hidden_size ({hidden_size}) must be divisible by heads ({heads})")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _build_tokenizer(vocab_size, list(corpus))
    model = _build_model(
        tokenizer,
        seed=seed,
        hidden_size=hidden_size,
        layers=layers,
        heads=heads,
        max_position_embeddings=max_position_embeddings,
    )
    from iflow.models.local import quiet_progress

    with quiet_progress():
        tokenizer.save_pretrained(out)
        model.save_pretrained(out)
    return out


def _build_tokenizer(vocab_size: int, corpus: list[str] | None = None) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(MARKUP_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    lines = _CORPUS.splitlines(keepends=True)
    for text in corpus or []:  # the texts a model will mostly see merge into fewer tokens
        lines.extend(text.splitlines(keepends=True))
    bpe.train_from_iterator(lines, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        chat_template=CHAT_TEMPLATE,
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
        chat_control_tokens=[],
    )
    tokenizer.add_tokens(MARKUP_TOKENS)
    return tokenizer


def _build_model(
    tokenizer: Any,
    *,
    seed: int,
    hidden_size: int,
    layers: int,
    heads: int,
    max_position_embeddings: int,
) -> Any:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=pad,
        eos_token_id=eos,
        pad_token_id=pad,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    return model.eval()
