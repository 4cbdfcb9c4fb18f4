"""Loading what other distributions register in ale's entry-point groups.

Agents (``ale.agents``) and task families (``ale.task_families``) come from packages ale-core
never imports by name. When one of them is broken (a syntax error, a missing dependency, a
family that breaks a registration rule), importing it must not end a command in a
traceback: :func:`load_entry_point` turns any failure into :class:`PluginLoadError`, whose
message is one sentence naming the distribution, what failed and what to do.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint


class PluginLoadError(ImportError):
    """An installed package's entry point failed to import; the message says which and why."""

    def __init__(self, message: str, *, distribution: str, entry_point: str) -> None:
        super().__init__(message)
        self.distribution = distribution
        self.entry_point = entry_point

    def __str__(self) -> str:
        return str(self.args[0])


def distribution_of(ep: EntryPoint) -> str:
    """The name of the distribution that declares ``ep`` (its module path when unknown)."""
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else ep.value.partition(":")[0]


def load_entry_point(ep: EntryPoint, what: str) -> object:
    """``ep.load()``; a failure of any kind as :class:`PluginLoadError` (``what``: "agent",
    "task family"... for the sentence)."""
    try:
        return ep.load()
    except Exception as exc:  # whatever the package raises while importing
        dist = distribution_of(ep)
        first = (str(exc).strip().splitlines() or [""])[0]
        reason = f"{type(exc).__name__}: {first}".rstrip(": .")
        raise PluginLoadError(
            f"the {what} package {dist!r} is installed but failed to load ({ep.value}: "
            f"{reason}); fix or reinstall it, or remove it with pip uninstall {dist}.",
            distribution=dist,
            entry_point=ep.value,
        ) from exc
