"""What a benchmark run is asked to do: its options, and the error for a run that cannot
start as asked."""

from __future__ import annotations

from pydantic import BaseModel, Field


class BenchError(ValueError):
    """The run cannot start as asked (bad dataset, unknown task, resume mismatch)."""


class BenchOptions(BaseModel):
    n_concurrent: int = Field(default=1, ge=1)
    n_attempts: int = Field(default=1, ge=1)
    timeout_multiplier: float = Field(default=1.0, gt=0)
    allow_internet: bool | None = None
    """None follows each task's allow_internet; False closes the network for all, True opens
    it for all."""
    strict: bool = False
    """Run the verifier as the task ships it, without rock's verifier toolchain (its pytest
    and installer stand-ins): what Harbor does."""
    keep_sandboxes: bool = False
    """Leave each trial's sandbox running (for inspection); they are deleted otherwise."""
    max_retries: int = Field(default=0, ge=0)
    """Run a trial again, up to this many times, when the harness failed it (the sandbox
    failed or went away, the harness raised): never for the agent's own failures."""
    capabilities: list[str] | None = None
    """The capabilities every trial's root keeps; None: rock's default set."""
