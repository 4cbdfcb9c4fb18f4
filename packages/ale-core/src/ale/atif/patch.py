"""JSON patches: what of an imported ATIF document the canonical mapping would not give
back, kept so that export gives the same JSON again.

A patch mirrors the document: a dict key for each changed field, ``$items`` for the
changed items of a list of the same length, ``$value`` for a new value and ``$absent``
for a removed key, each with ``$base`` (what the canonical document held there).
"""

from __future__ import annotations

from typing import Any

_ABSENT = "$absent"
_ITEMS = "$items"
_VALUE = "$value"
_BASE = "$base"
"""What the canonical document held where a patch changes it: the patch applies there only
while the trajectory still gives that (an edit made after import wins over the patch)."""


def diff(target: Any, base: Any) -> Any:
    """A patch turning ``base`` into ``target`` (None when they are equal)."""
    if target == base and type(target) is type(base):
        return None
    if isinstance(target, dict) and isinstance(base, dict):
        patch: dict[str, Any] = {}
        for key in base.keys() - target.keys():
            patch[key] = {_ABSENT: True, _BASE: base[key]}
        for key, value in target.items():
            if key not in base:
                patch[key] = {_VALUE: value}
            else:
                sub = diff(value, base[key])
                if sub is not None:
                    patch[key] = sub
        return patch or None
    if isinstance(target, list) and isinstance(base, list) and len(target) == len(base):
        items = {
            str(i): sub
            for i, (t, b) in enumerate(zip(target, base, strict=True))
            if (sub := diff(t, b)) is not None
        }
        return {_ITEMS: items} if items else None
    return {_VALUE: target, _BASE: base}


def _edited(current: Any, patch: dict[str, Any]) -> bool:
    """Whether the trajectory now gives something other than what the patch was made on."""
    return _BASE in patch and current != patch[_BASE]


def apply(base: Any, patch: Any) -> Any:
    if patch is None:
        return base
    if _VALUE in patch:
        return base if _edited(base, patch) else patch[_VALUE]
    if _ITEMS in patch:
        if not isinstance(base, list):
            return base  # edited into something else: the edit wins
        out = list(base)
        for index, sub in patch[_ITEMS].items():
            if int(index) < len(out):
                out[int(index)] = apply(out[int(index)], sub)
        return out
    if not isinstance(base, dict):
        return base
    out_d = dict(base)
    for key, sub in patch.items():
        if isinstance(sub, dict) and sub.get(_ABSENT) is True:
            if not _edited(out_d.get(key), sub):
                out_d.pop(key, None)
        elif key in out_d:
            out_d[key] = apply(out_d[key], sub)
        elif _VALUE in sub and _BASE not in sub:
            out_d[key] = sub[_VALUE]  # a field the canonical form does not write
    return out_d  # a key an edit took away stays away
