"""Streaming JSONL: one record a line, read and written in constant memory.

Reading validates each line into a pydantic model (a :class:`~ale.trajectory.Trajectory`
by default) straight from the JSON text. A bad line raises :class:`JsonlError`
naming the file and the line; with ``skip_invalid=True`` bad lines are skipped
and counted instead (``reader.skipped``), and a warning says how many.

Files ending in ``.gz`` are read and written compressed. Writing is atomic by
default: records go to a temporary file beside the target, which replaces the
target only when the writer closes cleanly, so a crash never leaves half a file.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Generic, TypeVar, overload

from pydantic import BaseModel, ValidationError

from ale.trajectory import Trajectory

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)

_MAX_KEPT_ERRORS = 100


class JsonlError(ValueError):
    """A line of a JSONL file could not be read."""

    def __init__(self, path: Path, line_no: int, reason: str) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        super().__init__(
            f"{path}:{line_no}: {reason}; fix or remove that line, "
            "or read with skip_invalid=True to skip bad lines."
        )


def _open_text(path: Path, mode: str, *, compressed: bool | None = None) -> IO[str]:
    if compressed if compressed is not None else path.suffix == ".gz":
        return io.TextIOWrapper(gzip.GzipFile(path, mode + "b"), encoding="utf-8", newline="\n")
    return open(path, mode, encoding="utf-8", newline="\n")


def _describe(exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    if first["type"] == "json_invalid":
        return f"not valid JSON ({first['msg']})"
    loc = ".".join(str(p) for p in first["loc"]) or "record"
    more = exc.error_count() - 1
    suffix = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return f"field '{loc}': {first['msg']}{suffix}"


class JsonlReader(Generic[M]):
    """Iterate the records of a JSONL file, validated into ``model``.

    Use as an iterable (it opens and closes the file itself) or as a context
    manager. After iteration, ``skipped`` holds the number of bad lines skipped
    and ``errors`` the first of them.
    """

    def __init__(
        self, path: str | os.PathLike[str], model: type[M], *, skip_invalid: bool = False
    ) -> None:
        self.path = Path(path)
        self.model = model
        self.skip_invalid = skip_invalid
        self.skipped = 0
        self.errors: list[JsonlError] = []
        self.lines_read = 0
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path} does not exist; check the path.")

    def __iter__(self) -> Iterator[M]:
        self.skipped = 0
        self.errors = []
        self.lines_read = 0
        validate = self.model.model_validate_json
        with _open_text(self.path, "r") as fh:
            for line_no, line in enumerate(fh, start=1):
                self.lines_read = line_no
                if not line.strip():
                    continue
                try:
                    yield validate(line)
                except ValidationError as exc:
                    error = JsonlError(self.path, line_no, _describe(exc))
                    if not self.skip_invalid:
                        raise error from None
                    self._record(error)
                except UnicodeDecodeError as exc:  # pragma: no cover - depends on file bytes
                    error = JsonlError(self.path, line_no, f"not UTF-8 text ({exc.reason})")
                    if not self.skip_invalid:
                        raise error from None
                    self._record(error)
        if self.skipped:
            log.warning(
                "skipped %d bad line%s of %s (first: %s)",
                self.skipped,
                "s" if self.skipped > 1 else "",
                self.path,
                self.errors[0],
            )

    def _record(self, error: JsonlError) -> None:
        self.skipped += 1
        if len(self.errors) < _MAX_KEPT_ERRORS:
            self.errors.append(error)


@overload
def read_jsonl(
    path: str | os.PathLike[str], *, skip_invalid: bool = ...
) -> JsonlReader[Trajectory]: ...
@overload
def read_jsonl(
    path: str | os.PathLike[str], model: type[M], *, skip_invalid: bool = ...
) -> JsonlReader[M]: ...
def read_jsonl(
    path: str | os.PathLike[str], model: type[Any] = Trajectory, *, skip_invalid: bool = False
) -> JsonlReader[Any]:
    """A reader over ``path`` validating each line into ``model`` (Trajectory by default)."""
    return JsonlReader(path, model, skip_invalid=skip_invalid)


class JsonlWriter:
    """Write records one a line. Atomic unless appending.

    >>> with JsonlWriter("out.jsonl") as w:   # doctest: +SKIP
    ...     w.write(trajectory)
    """

    def __init__(
        self, path: str | os.PathLike[str], *, append: bool = False, atomic: bool = True
    ) -> None:
        self.path = Path(path)
        self.append = append
        self.atomic = atomic and not append
        self.count = 0
        self._fh: IO[str] | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> JsonlWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.atomic:
            fd, tmp = tempfile.mkstemp(
                prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent
            )
            os.close(fd)
            self._tmp = Path(tmp)
            self._fh = _open_text(self._tmp, "w", compressed=self.path.suffix == ".gz")
        else:
            self._fh = _open_text(self.path, "a" if self.append else "w")
        return self

    def write(self, record: BaseModel | dict[str, Any]) -> None:
        """Write one record (a pydantic model or a JSON-able dict) as one line."""
        if self._fh is None:
            raise RuntimeError("JsonlWriter is not open; use it in a 'with' block.")
        if isinstance(record, BaseModel):
            text = record.model_dump_json(exclude_none=True)
        else:
            text = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
        self._fh.write(text)
        self._fh.write("\n")
        self.count += 1

    def write_all(self, records: Iterable[BaseModel | dict[str, Any]]) -> int:
        """Write every record; return how many were written by this call."""
        before = self.count
        for record in records:
            self.write(record)
        return self.count - before

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._fh is not None
        self._fh.close()
        self._fh = None
        if self._tmp is None:
            return
        if exc_type is None:
            os.replace(self._tmp, self.path)
        else:
            self._tmp.unlink(missing_ok=True)
        self._tmp = None


def write_jsonl(
    path: str | os.PathLike[str],
    records: Iterable[BaseModel | dict[str, Any]],
    *,
    append: bool = False,
) -> int:
    """Write ``records`` to ``path``, one a line; return how many were written."""
    with JsonlWriter(path, append=append) as writer:
        return writer.write_all(records)
