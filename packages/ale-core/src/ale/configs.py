"""One-sentence explanations of configuration errors, shared by every package's config loader.

pydantic's messages list every problem with internal locations; a user who mistyped a key
wants one sentence naming the key and the closest valid one.
"""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError


def field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The valid keys at ``loc`` (the path of an unknown key, its last part the key) in ``model``."""
    current: Any = model
    for part in loc[:-1]:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        annotation = field.annotation
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        current = next((a for a in inner if issubclass(a, BaseModel)), None)
        if current is None:
            return []
    return list(current.model_fields)


def explain(exc: ValidationError, model: type[BaseModel], source: str) -> str:
    """One sentence for ``exc`` raised validating ``model`` from ``source``.

    An unknown key is preferred over other errors and named with the closest valid key at
    the same place (``did you mean 'clip_high'?``).
    """
    errors = exc.errors()
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(error["loc"])
    where = ".".join(str(p) for p in loc) or "the top level"
    if error["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), field_names(model, loc), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; remove it."
        return f"{source}: unknown key {where}{hint}"
    value = error.get("input")
    shown = f" (got {value!r})" if isinstance(value, str | int | float | bool) else ""
    return f"{source}: {where}: {error['msg']}{shown}."
