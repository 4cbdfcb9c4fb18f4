"""Head+tail truncation of long tool output: the start and the end usually matter most
(what ran, and how it ended), so the middle is cut and a marker line says how much."""

from __future__ import annotations


def head_tail(text: str, limit_chars: int, *, head_ratio: float = 0.5) -> tuple[str, int]:
    """``text`` cut to about ``limit_chars`` by removing its middle; returns the new text and
    the number of characters cut (0 when it fits).

    ``head_ratio`` of the budget goes to the head, the rest to the tail. Cuts fall on line
    breaks unless that would waste more than half of a part's budget (one huge line). The
    marker line ``[... 12,345 characters (210 lines) cut from the middle ...]`` comes on
    top of the kept ``limit_chars``.
    """
    if limit_chars < 0:
        raise ValueError("limit_chars must be zero or more")
    if not 0.0 <= head_ratio <= 1.0:
        raise ValueError("head_ratio must be between 0 and 1")
    if len(text) <= limit_chars:
        return text, 0
    head_budget = int(limit_chars * head_ratio)
    tail_budget = limit_chars - head_budget
    head_end = head_budget
    if head_budget > 0:
        cut = text.rfind("\n", 0, head_budget)
        if cut + 1 >= head_budget // 2:
            head_end = cut + 1
    tail_start = len(text) - tail_budget
    if tail_budget > 0:
        cut = text.find("\n", tail_start - 1, len(text) - 1)
        if cut != -1 and len(text) - (cut + 1) >= tail_budget // 2:
            tail_start = cut + 1
    head, tail = text[:head_end], text[tail_start:]
    cut_text = text[head_end:tail_start]
    omitted = len(cut_text)
    lines = cut_text.count("\n") + (0 if cut_text.endswith("\n") or not cut_text else 1)
    plural = "" if lines == 1 else "s"
    marker = f"[... {omitted:,} characters ({lines:,} line{plural}) cut from the middle ...]"
    separator = "" if not head or head.endswith("\n") else "\n"
    after = "\n" if tail else ""
    return f"{head}{separator}{marker}{after}{tail}", omitted
