"""Ray as the optional engine for scale: the cluster connection, and environments in actors.

With a ``ray:`` section in the config, ``roll train`` connects to the Ray cluster at
``ray.address`` for the run (:func:`ray_session`), and then:

- with ``env:``, the environments live in ``ray.env_workers`` actors (:class:`EnvWorkers`,
  each hosting many environments by slot). The rollout engine drives them through
  :class:`RemoteEnv` proxies, which have the ``reset``/``step`` interface of an in-process
  :class:`~roll.envs.base.Env`, so generation stays one batched call per turn in the trainer.
  :class:`RemoteEnvEngine` is the :class:`~roll.rollout.RolloutEngine` whose turn sends the
  actions of every episode at once, one call per actor, so environments step in parallel;
  the episodes, tokens and rewards are those of the in-process run with the same seeds.
- with ``tasks:``, agentic episodes run in rollout workers (:mod:`roll.agentic.ray_workers`).

Without the section nothing here is used and everything runs in one process. ``ray`` is an
optional dependency (``roll[ray]``), imported only inside functions.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import signal
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ale.trajectory import Trajectory
from roll.config import EnvConfig, RayConfig
from roll.envs.base import Env, EnvStep
from roll.envs.registry import make_env
from roll.errors import ConfigError, RollError
from roll.generation.base import Generation
from roll.rollout import EpisodeRequest, RolloutEngine

if TYPE_CHECKING:
    from roll.rollout import _Episode

RAY_CLIENT_PORT = 10001
"""Ray Client's port on the head node when a ``ray://`` address names none."""


# -- the connection ----------------------------------------------------------------------------


def import_ray() -> Any:
    """The ``ray`` module, or a :class:`ConfigError` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "ray.address is set but Ray is not installed; install it with "
            "pip install 'roll[ray]', or remove the ray: section to run in one process."
        ) from None
    return ray


def _host_port(address: str) -> tuple[str, int]:
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep and address.startswith("ray://"):
        host, port = target, str(RAY_CLIENT_PORT)
    if not host or not port.isdigit():
        raise ConfigError(
            f"ray.address {address!r} is not auto, HOST:PORT or ray://HOST:PORT; give the "
            "address `ray start --head` printed."
        )
    return host.strip("[]"), int(port)


def _auto_address() -> str | None:
    """The address ``auto`` stands for (the cluster ``ray start`` made here), when Ray says."""
    try:
        from ray._private.services import canonicalize_bootstrap_address_or_die
    except ImportError:  # another Ray layout: ray.init finds it itself
        return None
    try:
        return str(canonicalize_bootstrap_address_or_die("auto"))
    except ConnectionError:
        raise ConfigError(
            "ray.address is auto but no Ray cluster runs on this machine; start one with "
            "`ray start --head`, or set ray.address to the cluster's HOST:PORT."
        ) from None
    except Exception:
        return None


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds, with one sentence, when nothing listens at ``address`` (``ray.init``
    itself retries for minutes)."""
    target = _auto_address() if address == "auto" else address
    if target is None:
        return
    host, port = _host_port(target)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(
            f"no Ray cluster answers at {address!r} ({reason}); start one with "
            "`ray start --head` and set ray.address to its address, or remove the ray: section."
        ) from None


@contextlib.contextmanager
def ray_session(config: RayConfig | None) -> Iterator[None]:
    """Connected to the cluster of ``config`` inside (nothing happens for ``None``).

    A connection this process already has is used as it is and left open.
    """
    if config is None:
        yield
        return
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    check_address(config.address, timeout=min(config.start_timeout, 5.0))
    kept = _handlers()
    try:
        ray.init(address=config.address, logging_level=logging.WARNING, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(
            f"cannot connect to the Ray cluster at {config.address!r} ({first}); check "
            "ray.address, that the cluster runs the same Ray version, and for a cluster with "
            "token authentication set RAY_AUTH_MODE=token and its token (ray get-auth-token)."
        ) from None
    finally:
        _restore(kept)
    try:
        yield
    finally:
        ray.shutdown()


_STOPPING = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def _handlers() -> dict[int, Any]:
    """The handlers of the signals that stop a run (the main thread's only: elsewhere Python
    sets none). ``ray.init`` puts its own on SIGTERM, which exits at once (status 15): the
    run's own clean-up (its sandboxes, its checkpoint) must stay the one that answers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in _STOPPING}


def _restore(handlers: dict[int, Any]) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def remote_error(exc: BaseException) -> BaseException:
    """The error an actor raised (a roll error as it was), else a :class:`RollError`."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, RollError):
        return cause
    text = str(cause if cause is not None else exc).strip()
    first = text.splitlines()[-1] if text else type(exc).__name__
    return RollError(f"a Ray worker failed: {first}")


def wait_started(actors: list[Any], *, timeout: float, what: str) -> None:
    """Wait until every actor answers ``ready()``; one sentence when they cannot start."""
    ray = import_ray()
    try:
        ray.get([actor.ready.remote() for actor in actors], timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise RollError(
            f"the Ray cluster did not start {len(actors)} {what} within {timeout:g} s; it may "
            "lack the CPUs or GPUs they ask for: lower ray.worker_cpus (or the number of "
            "workers), add nodes, or raise ray.start_timeout."
        ) from None
    except ray.exceptions.RayError as exc:
        raise remote_error(exc) from None


def kill_actors(actors: list[Any]) -> None:
    """End actors this run started (what they hold is released by their processes' exit)."""
    with contextlib.suppress(ImportError):
        import ray

        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)


# -- environments in actors --------------------------------------------------------------------


class EnvHost:
    """The body of an env worker actor: environments of one spec, one per slot.

    A slot's environment is made at its first reset and dropped when its episode is over.
    Calls come in batches (one per actor per turn); each call's error is returned in its
    place, so one failing environment does not hide the others' results.
    """

    def __init__(self, name: str, kwargs: dict[str, Any]) -> None:
        self.name = name
        self.kwargs = dict(kwargs)
        self.envs: dict[int, Env] = {}
        self.failed: Exception | None = None
        try:
            self.probe = make_env(name, **self.kwargs)
        except Exception as exc:  # raised by ready(): Ray keeps a method's error whole
            self.failed = exc

    def ready(self) -> bool:
        if self.failed is not None:
            raise self.failed
        return True

    def describe(self) -> tuple[str, int, str]:
        return _describe(self.probe)

    def reset(self, calls: list[tuple[int, int]]) -> list[Any]:
        out: list[Any] = []
        for slot, seed in calls:
            try:
                env = self.envs.get(slot)
                if env is None:
                    env = self.envs[slot] = make_env(self.name, **self.kwargs)
                out.append((env.reset(seed), _describe(env)))
            except Exception as exc:
                out.append(exc)
        return out

    def step(self, calls: list[tuple[int, str]]) -> list[Any]:
        out: list[Any] = []
        for slot, action in calls:
            try:
                env = self.envs.get(slot)
                if env is None:
                    raise RollError(
                        f"environment slot {slot} has no episode running; reset it first"
                    )
                out.append(env.step(action))
            except Exception as exc:
                out.append(exc)
        return out

    def drop(self, slots: list[int]) -> None:
        for slot in slots:
            self.envs.pop(slot, None)


def _describe(env: Env) -> tuple[str, int, str]:
    return str(getattr(env, "name", type(env).__name__)), int(env.max_turns), str(env.task_id)


class _Batch:
    """One remote call's results, fetched once for every proxy that shares the call."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self._values: list[Any] | None = None

    def value(self, index: int) -> Any:
        if self._values is None:
            ray = import_ray()
            try:
                self._values = list(ray.get(self.ref))
            except ray.exceptions.RayError as exc:
                raise remote_error(exc) from None
        result = self._values[index]
        if isinstance(result, BaseException):
            raise result
        return result


class RemoteEnv:
    """An environment in an env worker actor, with the :class:`~roll.envs.base.Env`
    interface. ``reset``/``step`` take the result of a call :class:`EnvWorkers` already sent
    for this action (a turn's batch), or make the call themselves."""

    def __init__(self, host: Any, slot: int, name: str, max_turns: int, task_id: str) -> None:
        self.host = host
        self.slot = slot
        self.name = name
        self.max_turns = max_turns
        self.task_id = task_id
        self._pending: tuple[str, Any, _Batch, int] | None = None

    def expect(self, kind: str, argument: Any, batch: _Batch, index: int) -> None:
        """The call ``kind(argument)`` was sent in ``batch``; the next one must be it."""
        self._pending = (kind, argument, batch, index)

    def _result(self, kind: str, argument: Any) -> Any:
        pending, self._pending = self._pending, None
        if pending is not None:
            sent_kind, sent, batch, index = pending
            if (sent_kind, sent) != (kind, argument):  # the environment already acted
                raise RollError(
                    f"environment slot {self.slot} was sent {sent_kind}({sent!r}) ahead of "
                    f"time but asked for {kind}({argument!r}); the rollout engine and the env "
                    "workers disagree about the turn."
                )
            return batch.value(index)
        method = self.host.reset if kind == "reset" else self.host.step
        return _Batch(method.remote([(self.slot, argument)])).value(0)

    def reset(self, seed: int) -> list[dict[str, str]]:
        messages, (self.name, self.max_turns, self.task_id) = self._result("reset", seed)
        return list(messages)

    def step(self, action: str) -> EnvStep:
        result = self._result("step", action)
        assert isinstance(result, EnvStep)
        return result


class EnvWorkers:
    """``ray.env_workers`` actors hosting the environments of ``env:`` (a context manager).

    :meth:`make` is the environment factory of a step's episode requests: each call a new
    :class:`RemoteEnv` on the next actor in turn, so a step's episodes spread evenly.
    """

    def __init__(self, config: RayConfig, env: EnvConfig) -> None:
        self.config = config
        self.env = env
        self.hosts: list[Any] = []
        self._slots = itertools.count()
        self._spec: tuple[str, int, str] = ("env", 1, "env")

    def __enter__(self) -> EnvWorkers:
        ray = import_ray()
        actor = ray.remote(EnvHost).options(num_cpus=self.config.worker_cpus)
        self.hosts = [
            actor.remote(self.env.name, dict(self.env.kwargs))
            for _ in range(self.config.env_workers)
        ]
        try:
            wait_started(self.hosts, timeout=self.config.start_timeout, what="env workers")
            name, max_turns, task_id = ray.get(self.hosts[0].describe.remote())
            self._spec = (name, max_turns, task_id)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        kill_actors(self.hosts)
        self.hosts = []

    def make(self) -> RemoteEnv:
        """A new environment of the spec, in the next actor."""
        if not self.hosts:
            raise RollError("the env workers are not running; use EnvWorkers as a context")
        slot = next(self._slots)
        name, max_turns, task_id = self._spec
        return RemoteEnv(self.hosts[slot % len(self.hosts)], slot, name, max_turns, task_id)

    def send(self, kind: str, calls: list[tuple[RemoteEnv, Any]]) -> None:
        """Send ``kind`` (``reset`` with a seed, ``step`` with an action) to many
        environments at once: one call per actor; each proxy takes its result when asked."""
        by_host: dict[int, list[tuple[RemoteEnv, Any]]] = {}
        for env, argument in calls:
            by_host.setdefault(id(env.host), []).append((env, argument))
        for group in by_host.values():
            host = group[0][0].host
            method = host.reset if kind == "reset" else host.step
            batch = _Batch(method.remote([(env.slot, argument) for env, argument in group]))
            for index, (env, argument) in enumerate(group):
                env.expect(kind, argument, batch, index)

    def release(self, envs: list[RemoteEnv]) -> None:
        """Drop the environments of finished episodes from their actors."""
        by_host: dict[int, tuple[Any, list[int]]] = {}
        for env in envs:
            by_host.setdefault(id(env.host), (env.host, []))[1].append(env.slot)
        for host, slots in by_host.values():
            host.drop.remote(slots)


class RemoteEnvEngine(RolloutEngine):
    """The rollout engine over :class:`RemoteEnv` environments: a run's resets, and each
    turn's steps, are sent to the env workers together as soon as they are known (the resets
    before the episodes start, the steps as soon as the turn's batch is generated), so the
    environments work in parallel while the loop of :class:`~roll.rollout.RolloutEngine`,
    and so every result, stays the same."""

    def __init__(self, workers: EnvWorkers, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workers = workers
        self._episodes: list[_Episode] = []

    def run(
        self, requests: list[EpisodeRequest], *, keep_groups: int | None = None
    ) -> list[Trajectory]:
        resets = [(r.env, r.seed) for r in requests if isinstance(r.env, RemoteEnv)]
        self._episodes = []
        self.workers.send("reset", resets)
        try:  # the environments of cut episodes are dropped with the others
            return super().run(requests, keep_groups=keep_groups)
        finally:
            self._episodes = []
            self.workers.release([env for env, _ in resets])

    def _start(self, request: EpisodeRequest) -> _Episode:
        episode = super()._start(request)
        self._episodes.append(episode)
        return episode

    def _generate(self, prompts: list[list[int]]) -> list[Generation]:
        generations = super()._generate(prompts)
        # the engine generates for every episode not over, in order, and then gives each its
        # reply: decoded as it will be, the actions can go out now, all together
        live = [e for e in self._episodes if not e.over]
        if len(live) == len(generations):
            self.workers.send(
                "step",
                [
                    (episode.env, self._decode(generation))
                    for episode, generation in zip(live, generations, strict=True)
                    if isinstance(episode.env, RemoteEnv)
                ],
            )
        return generations

    def _decode(self, generation: Generation) -> str:
        return str(self.tokenizer.decode(list(generation.token_ids), skip_special_tokens=True))
