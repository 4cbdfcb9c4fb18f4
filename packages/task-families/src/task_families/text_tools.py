"""text-count, text-transform and text-find: one standard text tool applied to one small file.

These are the families of the end-to-end demo (``make demo``), made for models small enough
to train on a laptop: every task of a kind is solved by the same one-line command, only the
file's content and its name and the output's name (each from a short list) change. What a
model must learn is the mapping from the request, in one of several phrasings, to the tool
(``wc -l``, ``sort -u``, ``tac``...) and to put the two file names in their places — not to
copy arbitrary strings, which a tiny model cannot do. Held-out tasks (other seeds) have the
same kinds with other data, names and phrasings.

- ``text-count``: the number of lines, words or characters of the file.
- ``text-transform``: sort, sort without duplicates, first line, last line, reverse the
  order of the lines, upper-case.
- ``text-find``: any kind of the two above, but the request does not name the file ("the
  file in /app"): the agent must look (``ls``) before it acts, two commands over two turns,
  the second using a name it read in the first one's output (from a longer list of names, so
  guessing rarely works). A pretrained model copies names from a request easily; reading one
  from an observation is what SFT teaches only part of the way, and what RL can sharpen.

The tests compare the output file with the expected text (counts: the first number in it).
"""

from __future__ import annotations

import random
import textwrap

from ale.synth.expert import shell
from ale.synth.family import ExpertProgram, Family, TaskDraft, register

SOURCES = ["data.txt", "input.txt", "notes.txt"]
# Names whose words the agent's prompt does not otherwise use: the compact system prompt
# says "Its result comes back...", so with result.txt as an output name the word was in every
# prompt whichever name the request asked for (a confound for a model learning to copy it).
OUTPUTS = ["answer.txt", "output.txt"]
HIDDEN_SOURCES = [
    "list.txt",
    "words.txt",
    "items.txt",
    "lines.txt",
    "records.txt",
    "names.txt",
    "entries.txt",
    "colors.txt",
    "places.txt",
    "fruits.txt",
]
"""``text-find``: the file's name, never said in the request, and none of :data:`SOURCES`
(a policy that guesses a name the other families use must not be rewarded now and then)."""
HIDDEN_PHRASES = ["the file in /app", "the only file in /app", "the one file in /app"]
"""``text-find``: how its requests refer to the file."""
_WORDS = [
    "apple",
    "banana",
    "cherry",
    "grape",
    "lemon",
    "mango",
    "melon",
    "olive",
    "peach",
    "pear",
    "plum",
    "berry",
    "river",
    "stone",
    "cloud",
    "storm",
    "field",
    "forest",
    "ocean",
    "island",
    "valley",
    "meadow",
    "harbor",
    "canyon",
    "red",
    "blue",
    "green",
    "amber",
    "silver",
    "golden",
    "black",
    "white",
    "orange",
    "violet",
]

COUNT_KINDS: dict[str, tuple[str, list[str]]] = {
    "lines": (
        "wc -l < {src} > {out}",
        [
            "Count the lines in {src} and write the number to {out}.",
            "How many lines does {src} have? Put the count in {out}.",
            "Write the number of lines of {src} into {out}.",
        ],
    ),
    "words": (
        "wc -w < {src} > {out}",
        [
            "Count the words in {src} and write the number to {out}.",
            "How many words does {src} contain? Put the count in {out}.",
            "Write the number of words of {src} into {out}.",
        ],
    ),
    "chars": (
        "wc -c < {src} > {out}",
        [
            "Count the bytes in {src} and write the number to {out}.",
            "How many bytes long is {src}? Put the count in {out}.",
            "Write the size of {src} in bytes into {out}.",
        ],
    ),
}

TRANSFORM_KINDS: dict[str, tuple[str, list[str]]] = {
    "sort": (
        "sort {src} > {out}",
        [
            "Sort the lines of {src} and save them in {out}.",
            "Write the lines of {src} in sorted order to {out}.",
            "Put the lines of {src}, sorted, into {out}.",
        ],
    ),
    "unique": (
        "sort -u {src} > {out}",
        [
            "Sort the lines of {src}, drop duplicates, and save them in {out}.",
            "Write the distinct lines of {src}, sorted, to {out}.",
            "Put each different line of {src} once, in sorted order, into {out}.",
        ],
    ),
    "first": (
        "head -n 1 {src} > {out}",
        [
            "Copy the first line of {src} into {out}.",
            "Write only the first line of {src} to {out}.",
            "Save the top line of {src} in {out}.",
        ],
    ),
    "last": (
        "tail -n 1 {src} > {out}",
        [
            "Copy the last line of {src} into {out}.",
            "Write only the last line of {src} to {out}.",
            "Save the bottom line of {src} in {out}.",
        ],
    ),
    "reverse": (
        "tac {src} > {out}",
        [
            "Reverse the order of the lines of {src} and save them in {out}.",
            "Write the lines of {src} from last to first to {out}.",
            "Put the lines of {src} in reverse order into {out}.",
        ],
    ),
    "upper": (
        "tr a-z A-Z < {src} > {out}",
        [
            "Convert {src} to upper case and save it in {out}.",
            "Write {src} in capital letters to {out}.",
            "Put an upper-case copy of {src} into {out}.",
        ],
    ),
}


def _lines(rng: random.Random, kind: str) -> list[str]:
    count = rng.randint(4, 9)
    lines = [" ".join(rng.sample(_WORDS, k=rng.randint(1, 3))) for _ in range(count)]
    if kind in ("unique", "sort"):  # something to drop: `sort -u` must not pass a sort task
        for _ in range(rng.randint(1, 3)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(lines))
    if kind == "sort":
        while lines == sorted(lines):
            rng.shuffle(lines)
    return lines


def _expected(kind: str, text: str) -> str:
    lines = text.splitlines()
    if kind == "lines":
        return str(len(lines))
    if kind == "words":
        return str(len(text.split()))
    if kind == "chars":
        return str(len(text.encode()))
    if kind == "sort":  # C-locale byte order, like `sort` in the task image (LANG unset)
        return "\n".join(sorted(lines))
    if kind == "unique":
        return "\n".join(sorted(set(lines)))
    if kind == "first":
        return lines[0]
    if kind == "last":
        return lines[-1]
    if kind == "reverse":
        return "\n".join(reversed(lines))
    return text.upper().rstrip("\n")


def _draft(
    rng: random.Random,
    kinds: dict[str, tuple[str, list[str]]],
    counting: bool,
    *,
    hidden: bool = False,
) -> TaskDraft:
    kind = rng.choice(sorted(kinds))
    command, phrasings = kinds[kind]
    src, out = rng.choice(HIDDEN_SOURCES if hidden else SOURCES), rng.choice(OUTPUTS)
    text = "\n".join(_lines(rng, kind)) + "\n"
    expected = _expected(kind, text)
    solution = command.format(src=src, out=out)
    said = rng.choice(HIDDEN_PHRASES) if hidden else src
    instruction = rng.choice(phrasings).format(src=said, out=out)

    def expert() -> ExpertProgram:
        if hidden:
            yield shell("ls")
        ran = yield shell(solution)
        return "Done." if ran.ok else "The command failed."

    if counting:
        check = (
            f"    words = Path('/app/{out}').read_text().split()\n"
            f"    assert words and words[0] == {expected!r}\n"
        )
    else:
        check = (
            f"    got = Path('/app/{out}').read_text().rstrip('\\n')\n"
            f"    assert got == {expected!r}\n"
        )
    tests = (
        textwrap.dedent(
            f"""\
            from pathlib import Path


            def test_source_untouched():
                assert Path('/app/{src}').read_text() == {text!r}


            def test_output():
            """
        )
        + check
    )
    wrong = rng.choice([s for s in (HIDDEN_SOURCES if hidden else SOURCES) if s != src])
    return TaskDraft(
        instruction=instruction,
        files={f"/app/{src}": text},
        tests=tests,
        solution=solution + "\n",
        expert=expert,
        params={"kind": kind, "source": src, "output": out, "hidden": hidden},
        mistakes=[shell(command.format(src=wrong, out=out))],
        tags=["coreutils", kind, *(["inspect-first"] if hidden else [])],
        agent_timeout_sec=120.0,
        test_timeout_sec=60.0,
    )


@register
class TextCount(Family):
    name = "text-count"
    category = "text-processing"
    description = "Count a small file's lines, words or bytes into an output file (demo family)."
    difficulties = ("easy",)

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        return _draft(rng, COUNT_KINDS, counting=True)


@register
class TextTransform(Family):
    name = "text-transform"
    category = "text-processing"
    description = (
        "Sort, dedupe, reverse, upper-case, or take the first or last line of a file (demo family)."
    )
    difficulties = ("easy",)

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        return _draft(rng, TRANSFORM_KINDS, counting=False)


@register
class TextFind(Family):
    name = "text-find"
    category = "text-processing"
    description = (
        "Count or transform the one file in /app, whose name the request does not say: look "
        "first, then act (demo family, two turns)."
    )
    difficulties = ("easy",)

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        if rng.random() < len(COUNT_KINDS) / (len(COUNT_KINDS) + len(TRANSFORM_KINDS)):
            return _draft(rng, COUNT_KINDS, counting=True, hidden=True)
        return _draft(rng, TRANSFORM_KINDS, counting=False, hidden=True)
