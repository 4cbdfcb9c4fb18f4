"""The built-in toy environments (determinism, rewards by hand) and the environment registry."""

from __future__ import annotations

import re

import pytest

from roll.envs import ArithmeticEnv, EchoEnv, Env, EnvStep, GuessEnv, env_names, make_env
from roll.errors import ConfigError, RollError


def test_builtins_are_envs_and_reset_is_deterministic() -> None:
    for name in env_names():
        env = make_env(name)
        assert isinstance(env, Env)
        assert env.max_turns >= 1 and env.task_id.startswith(name)
        assert env.reset(3) == make_env(name).reset(3)
    openings = {make_env("arithmetic").reset(seed)[0]["content"] for seed in range(10)}
    assert len(openings) > 1  # the seed picks the problem


def test_arithmetic_reward_is_the_first_integer() -> None:
    env = ArithmeticEnv()
    assert env.reset(2) == [
        {"role": "user", "content": "What is 7 + 11? Answer with the number only."}
    ]
    assert env.max_turns == 1
    right = env.step("18")
    assert right == EnvStep(
        observation=None, reward=1.0, done=True, info={"answer": 18, "given": 18}
    )
    env.reset(2)
    assert env.step("The answer is 18, surely not 19.").reward == 1.0
    env.reset(2)
    assert env.step("19 (or 18)").reward == 0.0
    env.reset(2)
    assert env.step("eighteen").reward == 0.0


def test_arithmetic_difficulty_and_operators() -> None:
    env = ArithmeticEnv(digits=1, operators="-")
    for seed in range(20):
        question = env.reset(seed)[0]["content"]
        a, b = map(int, re.findall(r"\d+", question)[:2])
        assert a < 10 and b < 10 and " - " in question
        assert env.step(f"{a - b}").reward == 1.0  # negative answers parse too
    wide = ArithmeticEnv(digits=4)
    numbers = [int(n) for s in range(20) for n in re.findall(r"\d+", wide.reset(s)[0]["content"])]
    assert max(numbers) >= 1000
    with pytest.raises(ConfigError, match="digits"):
        ArithmeticEnv(digits=0)
    with pytest.raises(ConfigError, match="operators"):
        ArithmeticEnv(operators="/")


def test_guess_hints_malformed_guesses_and_success() -> None:
    env = GuessEnv()  # n=10
    opening = env.reset(0)
    assert env.secret == 7 and "from 1 to 10" in opening[0]["content"]
    assert env.step("5") == EnvStep(
        observation="higher", done=False, info={"secret": 7, "guess": 5}
    )
    assert env.step("I guess 9").observation == "lower"
    for bad in ["no idea", "11", "0"]:
        step = env.step(bad)
        assert not step.done and step.reward == 0.0 and step.info["valid"] is False
        assert step.observation is not None and step.observation.startswith("Not a valid guess")
    found = env.step("7")
    assert (found.done, found.reward, found.observation) == (True, 1.0, None)
    with pytest.raises(RollError, match="reset"):
        env.step("7")


def test_guess_options() -> None:
    env = make_env("guess", n=100, max_turns=8)
    assert (env.max_turns, env.task_id) == (8, "guess:n=100")
    secrets = set()
    small = GuessEnv(n=3)
    for seed in range(30):
        small.reset(seed)
        secrets.add(small.secret)
    assert secrets == {1, 2, 3}


def test_echo_partial_credit() -> None:
    env = EchoEnv(rounds=3)
    assert env.max_turns == 3
    opening = env.reset(0)
    assert opening[-1] == {"role": "user", "content": "Word 1 of 3: path"}
    assert env.words == ["path", "items", "dog"]
    first = env.step(" path\n")  # surrounding whitespace is forgiven
    assert first.reward == pytest.approx(1 / 3)
    assert (first.observation, first.done) == ("Word 2 of 3: items", False)
    second = env.step("Items")  # case is not
    assert (second.reward, second.observation) == (0.0, "Word 3 of 3: dog")
    third = env.step("dog")
    assert (third.done, third.observation, third.reward) == (True, None, pytest.approx(1 / 3))
    assert first.reward + second.reward + third.reward == pytest.approx(2 / 3)


def test_step_before_reset_is_an_error() -> None:
    with pytest.raises(RollError, match="reset"):
        EchoEnv().step("x")


def test_registry_names_and_import_paths() -> None:
    assert env_names() == ["arithmetic", "echo", "guess", "letter"]
    assert isinstance(make_env("guess"), GuessEnv)
    echo = make_env("roll.envs.toy:EchoEnv", rounds=2)
    assert isinstance(echo, EchoEnv) and echo.max_turns == 2


def test_registry_errors() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'guess'.*package\.module:ClassName"):
        make_env("gues")
    with pytest.raises(ConfigError, match="arithmetic, echo, guess"):
        make_env("zzzzzz")
    with pytest.raises(ConfigError, match="cannot import module"):
        make_env("roll.no_such_module:Env")
    with pytest.raises(ConfigError, match="has no 'Nope'"):
        make_env("roll.envs.toy:Nope")
    with pytest.raises(ConfigError, match="form"):
        make_env("roll.envs.toy:")
    with pytest.raises(ConfigError, match="not an environment"):
        make_env("collections:OrderedDict")
    with pytest.raises(ConfigError, match="bogus"):
        make_env("echo", bogus=1)
    with pytest.raises(ConfigError, match="refused its options"):
        make_env("roll.envs.toy:_Episodic", rounds=1)


def test_letter_rewards_each_reply_holding_the_letter() -> None:
    env = make_env("letter", rounds=2, letters="e")
    opening = env.reset(3)
    assert "'e'" in opening[0]["content"]
    first = env.step("hello")
    assert (first.reward, first.done) == (0.5, False) and "'e'" in (first.observation or "")
    second = env.step("xyz")
    assert (second.reward, second.done) == (0.0, True)
