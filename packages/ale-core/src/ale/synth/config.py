"""The synthesis config: which families, how many tasks, in what proportions, how filtered.

A config is a YAML file read into :class:`SynthConfig`. Everything is checked before a
run starts: an unknown key is refused naming the closest valid one, an unknown family
naming the closest family, and each declared set of proportions must sum to 1. The
config and its seed fix the output: the same config regenerates the same tasks.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ale.configs import explain
from ale.synth.family import CATEGORIES, DIFFICULTIES, UnknownFamily, get_family

_SUM_TOLERANCE = 1e-6


class SynthConfigError(ValueError):
    """The config cannot be used; the message says what to change."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FamilyConfig(_Model):
    difficulty: dict[str, float] | None = None
    """How this family's candidates are spread over difficulties (sums to 1); default:
    the ``mix.difficulty`` proportions when declared, else even."""


class MixConfig(_Model):
    """Declared proportions of the final dataset; each declared dimension sums to 1."""

    family: dict[str, float] | None = None
    """Share of the final tasks per family (names from ``families``); None: not declared."""
    category: dict[str, float] | None = None
    """Share of the final tasks per category; None: not declared."""
    difficulty: dict[str, float] | None = None
    """Share of the final tasks per difficulty; None: not declared."""


class FilterConfig(_Model):
    max_turns: int = Field(default=30, gt=0)
    """Most assistant turns a kept trajectory may have."""
    max_chars: int = Field(default=60000, gt=0)
    """Most characters (all step contents, arguments and results) a kept trajectory may have."""
    max_repeats: int = Field(default=2, ge=1)
    """Most times one identical call (tool and arguments) may appear in a trajectory."""
    replay: bool = True
    """Replay every kept trajectory's calls in a fresh sandbox; keep it only if it reaches
    the same reward."""


class DecontaminationConfig(_Model):
    sets: list[Path] = Field(default_factory=lambda: [Path("datasets/terminal-bench-local")])
    """Held-out task sets (directories of tasks) whose instructions must not leak in."""
    n: int = Field(default=8, ge=2)
    """Word n-gram length."""
    max_overlap: float = Field(default=0.1, ge=0, le=1)
    """A candidate whose share of instruction n-grams found in a held-out set reaches this
    is rejected."""


class DedupConfig(_Model):
    threshold: float = Field(default=0.8, gt=0, le=1)
    """Estimated Jaccard similarity (word shingles) from which two instructions are near
    duplicates."""
    shingle: int = Field(default=5, ge=1)
    """Words per shingle (the word n-grams compared)."""
    num_perm: int = Field(default=128, ge=8)
    """Hash functions of each MinHash signature (a multiple of ``bands``)."""
    bands: int = Field(default=32, ge=1)
    """LSH bands the signature is cut into; instructions sharing a band's bucket are compared."""


class TeacherConfig(_Model):
    """A model behind an OpenAI-compatible endpoint, run through the same agent."""

    base_url: str
    """The endpoint's OpenAI-compatible base URL (e.g. ``http://127.0.0.1:8000/v1``)."""
    model: str
    """The model name sent to the endpoint."""
    api_key_env: str | None = None
    """Environment variable holding the API key (never the key itself)."""
    share: float = Field(default=1.0, ge=0, le=1)
    """Share of tasks given to the teacher; the expert solves the rest, and any task the
    teacher fails."""


class SynthConfig(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    """The dataset's name: its default directory (``datasets/<name>``) and its manifest's."""
    seed: int
    """Fixes the run's random choices (the candidates' seeds, difficulties, mistakes, the mix)."""
    target: int = Field(gt=0)
    """Tasks in the final dataset."""
    output: Path | None = None
    """Where the dataset is written; default ``datasets/<name>``."""
    oversample: float = Field(default=1.3, ge=1.0, le=10.0)
    """Candidates generated per final task (rejections and mixing need spare ones)."""
    families: dict[str, FamilyConfig]
    """The task families to generate from, each with its settings (a list of names: the
    defaults)."""
    mix: MixConfig = Field(default_factory=MixConfig)
    """Declared proportions of the final dataset; by default none: the families share it
    evenly."""
    mistake_rate: float = Field(default=0.2, ge=0, le=1)
    """Share of expert trajectories with one recoverable mistake."""
    concurrency: int = Field(default=4, ge=1, le=64)
    """Episodes run at once (and the warm pool's size)."""
    agent: str = "iflow"
    """The ``ale.agents`` entry point the experts act through."""
    agent_kwargs: dict[str, Any] = Field(default_factory=dict)
    """More arguments for the agent (and the teacher, which runs through it)."""
    filters: FilterConfig = Field(default_factory=FilterConfig)
    """Which trajectories are kept."""
    decontamination: DecontaminationConfig = Field(default_factory=DecontaminationConfig)
    """Rejects candidates whose instructions overlap held-out task sets."""
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    """Rejects candidates whose instructions duplicate another's."""
    teacher: TeacherConfig | None = None
    """A model that solves a share of the tasks instead of the expert; None: the expert
    solves them all."""

    @field_validator("families", mode="before")
    @classmethod
    def _family_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            return {str(name): {} for name in value}
        return (
            {k: ({} if v is None else v) for k, v in value.items()}
            if isinstance(value, dict)
            else value
        )

    def output_dir(self, root: Path = Path(".")) -> Path:
        return self.output if self.output is not None else root / "datasets" / self.name

    def digest(self) -> str:
        """What identifies the run's output: the config without where it is written."""
        data = self.model_dump(mode="json", exclude={"output", "concurrency"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def check(self) -> None:
        """Refuse what cannot run: unknown families, proportions not summing to 1."""
        if not self.families:
            raise SynthConfigError(
                "the config names no families; list at least one under families:"
            )
        for name, fam in self.families.items():
            try:
                family = get_family(name)
            except UnknownFamily as exc:
                raise SynthConfigError(f"families: {exc}") from None
            if fam.difficulty is not None:
                _check_sum(f"families.{name}.difficulty", fam.difficulty)
                _check_keys(f"families.{name}.difficulty", fam.difficulty, family.difficulties)
        categories = {get_family(n).category for n in self.families}
        for dim, known in (
            ("family", list(self.families)),
            ("category", sorted(categories)),
            ("difficulty", list(DIFFICULTIES)),
        ):
            shares = getattr(self.mix, dim)
            if shares is None:
                continue
            _check_sum(f"mix.{dim}", shares)
            valid = CATEGORIES if dim == "category" else known
            _check_keys(f"mix.{dim}", shares, valid)
            if dim == "category":
                missing = [c for c, p in shares.items() if p > 0 and c not in categories]
                if missing:
                    raise SynthConfigError(
                        f"mix.category gives a share to {', '.join(missing)}, but no family "
                        "in families: is of that category; add one or drop the share."
                    )


def _check_sum(where: str, shares: dict[str, float]) -> None:
    if any(v < 0 for v in shares.values()):
        raise SynthConfigError(f"{where} has a negative proportion; proportions are shares >= 0.")
    total = math.fsum(shares.values())
    if abs(total - 1.0) > _SUM_TOLERANCE:
        raise SynthConfigError(
            f"the proportions of {where} sum to {total:g}, not 1; scale them so they add up to 1."
        )


def _check_keys(where: str, shares: dict[str, float], valid: Any) -> None:
    for key in shares:
        if key not in valid:
            close = difflib.get_close_matches(key, list(valid), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SynthConfigError(
                f"{where} names {key!r}, which is not one of {', '.join(valid)}{hint}."
            )


def parse_config(data: Any, *, source: str = "the config") -> SynthConfig:
    """A checked :class:`SynthConfig` from parsed YAML; :class:`SynthConfigError` otherwise."""
    if not isinstance(data, dict):
        raise SynthConfigError(f"{source} must be a YAML mapping of settings (name:, seed:, ...).")
    try:
        config = SynthConfig.model_validate(data)
    except ValidationError as exc:
        raise SynthConfigError(explain(exc, SynthConfig, source)) from None
    config.check()
    return config


def load_config(path: str | Path) -> SynthConfig:
    """Read and check the YAML config at ``path``."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SynthConfigError(
            f"cannot read the config {path} ({exc.strerror or exc}); check the path."
        ) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SynthConfigError(f"{path} is not valid YAML ({exc}); fix the file.") from None
    return parse_config(data, source=str(path))
