"""Built-in toy environments: small enough for a tiny model to learn, shaped like agent tasks.

- ``arithmetic``: one turn, "What is 17 + 5? Answer with the number only."; reward 1.0 when
  the first integer of the answer is right.
- ``guess``: find a secret number in [1, n]; each wrong guess is answered "higher" or
  "lower", so an episode has several interaction chunks; reward 1.0 for finding it.
- ``echo``: k rounds, each showing a word the agent must repeat; reward 1/k per exact
  repeat, so the episode's reward is the fraction repeated (partial credit).
- ``letter``: k rounds, each asking for a reply containing a letter; reward 1/k per reply
  that does. An untrained model already succeeds sometimes: the trainers' smoke tests use it.

Each is deterministic given the seed passed to ``reset``, and has an ``expert_action()``
(what a perfect player does next, from the environment's own state) so expert trajectories
for chunk-level initialised resampling can be recorded (:func:`roll.resample.record_experts`). None of them ends an episode for
running out of turns: the rollout engine enforces ``max_turns`` (and records
``limits_exceeded``), so the environment's reward for an unfinished episode is what it gave.
"""

from __future__ import annotations

import random
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from roll.envs.base import EnvStep
from roll.errors import ConfigError, RollError

_INTEGER = re.compile(r"-?\d+")
_O = TypeVar("_O", bound=BaseModel)


def _first_integer(text: str) -> int | None:
    match = _INTEGER.search(text)
    return int(match.group()) if match else None


def _options(model: type[_O], env: str, options: dict[str, Any]) -> _O:
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(f"invalid options for the {env!r} environment: {exc}") from exc


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Episodic:
    """Guards shared by the toy environments: ``step`` only between ``reset`` and the end."""

    name = "toy"
    _live = False

    def _begin_step(self) -> None:
        if not self._live:
            raise RollError(
                f"{self.name}: step() was called with no episode running; call reset(seed) first"
            )

    def _end(self, step: EnvStep) -> EnvStep:
        self._live = not step.done
        return step


# -- arithmetic ----------------------------------------------------------------------------------


class ArithmeticOptions(_Options):
    """Options of the ``arithmetic`` environment."""

    digits: int = Field(default=2, ge=1, le=9)
    """Operands are drawn from [0, 10**digits): the difficulty."""
    operators: str = Field(default="+", pattern=r"^[-+*]+$")
    """The operators to draw from, any of ``+``, ``-``, ``*``."""


class ArithmeticEnv(_Episodic):
    """One question, one answer: ``What is a OP b? Answer with the number only.``"""

    name = "arithmetic"

    def __init__(self, **options: Any) -> None:
        self.options = _options(ArithmeticOptions, self.name, options)
        self.max_turns = 1
        self.task_id = f"arithmetic:digits={self.options.digits},ops={self.options.operators}"
        self.answer = 0

    def reset(self, seed: int) -> list[dict[str, str]]:
        rng = random.Random(seed)
        top = 10**self.options.digits - 1
        a, b = rng.randint(0, top), rng.randint(0, top)
        operator = rng.choice(self.options.operators)
        self.answer = {"+": a + b, "-": a - b, "*": a * b}[operator]
        self._live = True
        question = f"What is {a} {operator} {b}? Answer with the number only."
        return [{"role": "user", "content": question}]

    def expert_action(self) -> str:
        """The right answer."""
        return str(self.answer)

    def step(self, action: str) -> EnvStep:
        self._begin_step()
        given = _first_integer(action)
        correct = given == self.answer
        info = {"answer": self.answer, "given": given}
        return self._end(
            EnvStep(observation=None, reward=1.0 if correct else 0.0, done=True, info=info)
        )


# -- guess ---------------------------------------------------------------------------------------


class GuessOptions(_Options):
    """Options of the ``guess`` environment."""

    n: int = Field(default=10, ge=2)
    """The secret is drawn from [1, n]."""
    max_turns: int = Field(default=6, ge=1)
    """Guesses allowed (binary search needs about log2(n) + 1)."""


class GuessEnv(_Episodic):
    """Guess a secret number; each wrong guess is answered ``higher`` or ``lower``."""

    name = "guess"

    def __init__(self, **options: Any) -> None:
        self.options = _options(GuessOptions, self.name, options)
        self.max_turns = self.options.max_turns
        self.task_id = f"guess:n={self.options.n}"
        self.secret = 0
        self.low, self.high = 1, self.options.n

    def reset(self, seed: int) -> list[dict[str, str]]:
        self.secret = random.Random(seed).randint(1, self.options.n)
        self.low, self.high = 1, self.options.n
        self._live = True
        prompt = (
            f"I am thinking of a whole number from 1 to {self.options.n}. Guess it: reply with "
            "one number. After a wrong guess I say 'higher' or 'lower'."
        )
        return [{"role": "user", "content": prompt}]

    def step(self, action: str) -> EnvStep:
        self._begin_step()
        guess = _first_integer(action)
        info: dict[str, Any] = {"secret": self.secret, "guess": guess}
        if guess is None or not 1 <= guess <= self.options.n:
            text = f"Not a valid guess: reply with one whole number from 1 to {self.options.n}."
            return self._end(EnvStep(observation=text, done=False, info=info | {"valid": False}))
        if guess == self.secret:
            return self._end(EnvStep(observation=None, reward=1.0, done=True, info=info))
        hint = "higher" if self.secret > guess else "lower"
        if hint == "higher":
            self.low = max(self.low, guess + 1)
        else:
            self.high = min(self.high, guess - 1)
        return self._end(EnvStep(observation=hint, done=False, info=info))

    def expert_action(self) -> str:
        """Binary search: the middle of what the hints so far leave open."""
        return str((self.low + self.high) // 2)


# -- echo ----------------------------------------------------------------------------------------

_WORDS = (
    "fox", "dog", "file", "tests", "bug", "task", "done", "hello",
    "world", "data", "name", "count", "path", "items", "main", "build",
)  # fmt: skip


class EchoOptions(_Options):
    """Options of the ``echo`` environment."""

    rounds: int = Field(default=3, ge=1)
    """Words shown per episode (one per turn)."""
    words: tuple[str, ...] = Field(default=_WORDS, min_length=1)
    """The vocabulary the words are drawn from (with replacement)."""


class EchoEnv(_Episodic):
    """Repeat the word shown, ``rounds`` times; reward 1/rounds for each exact repeat."""

    name = "echo"

    def __init__(self, **options: Any) -> None:
        self.options = _options(EchoOptions, self.name, options)
        self.max_turns = self.options.rounds
        self.task_id = f"echo:rounds={self.options.rounds}"
        self.words: list[str] = []
        self.round = 0

    def reset(self, seed: int) -> list[dict[str, str]]:
        rng = random.Random(seed)
        self.words = [rng.choice(self.options.words) for _ in range(self.options.rounds)]
        self.round = 0
        self._live = True
        intro = "Repeat each word I show you exactly, with nothing else."
        return [
            {"role": "system", "content": intro},
            {"role": "user", "content": self._show(0)},
        ]

    def _show(self, index: int) -> str:
        return f"Word {index + 1} of {self.options.rounds}: {self.words[index]}"

    def expert_action(self) -> str:
        """The word shown."""
        return self.words[self.round]

    def step(self, action: str) -> EnvStep:
        self._begin_step()
        word = self.words[self.round]
        exact = action.strip() == word
        reward = 1.0 / self.options.rounds if exact else 0.0
        info = {"word": word, "exact": exact}
        self.round += 1
        if self.round == self.options.rounds:
            return self._end(EnvStep(observation=None, reward=reward, done=True, info=info))
        return self._end(
            EnvStep(observation=self._show(self.round), reward=reward, done=False, info=info)
        )


# -- letter --------------------------------------------------------------------------------------


class LetterOptions(_Options):
    """Options of the ``letter`` environment."""

    rounds: int = Field(default=2, ge=1)
    """Turns per episode; each asks for a (new) letter."""
    letters: str = Field(default="aeiost", min_length=1)
    """The letters asked for."""


class LetterEnv(_Episodic):
    """Each turn asks for a reply containing a given letter; reward 1/rounds per reply that
    does. Even an untrained model's replies differ in this, so groups carry a signal from the
    first step: the smoke-test environment of the trainers."""

    name = "letter"

    def __init__(self, **options: Any) -> None:
        self.options = _options(LetterOptions, self.name, options)
        self.max_turns = self.options.rounds
        self.task_id = f"letter:rounds={self.options.rounds}"
        self.wanted: list[str] = []
        self.round = 0

    def _ask(self) -> str:
        return f"Reply with a word containing the letter {self.wanted[self.round]!r}."

    def expert_action(self) -> str:
        """The letter asked for."""
        return self.wanted[self.round]

    def reset(self, seed: int) -> list[dict[str, str]]:
        rng = random.Random(seed)
        self.wanted = [rng.choice(self.options.letters) for _ in range(self.options.rounds)]
        self.round = 0
        self._live = True
        return [{"role": "user", "content": self._ask()}]

    def step(self, action: str) -> EnvStep:
        self._begin_step()
        letter = self.wanted[self.round]
        hit = letter in action.lower()
        reward = 1.0 / self.options.rounds if hit else 0.0
        info = {"letter": letter, "hit": hit}
        self.round += 1
        if self.round == self.options.rounds:
            return self._end(EnvStep(observation=None, reward=reward, done=True, info=info))
        return self._end(EnvStep(observation=self._ask(), reward=reward, done=False, info=info))
