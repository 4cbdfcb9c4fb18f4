"""In-process multi-turn environments for RL: the contract, the built-ins and the registry."""

from roll.envs.base import Env, EnvStep
from roll.envs.registry import env_names, make_env
from roll.envs.toy import ArithmeticEnv, EchoEnv, GuessEnv

__all__ = ["ArithmeticEnv", "EchoEnv", "Env", "EnvStep", "GuessEnv", "env_names", "make_env"]
