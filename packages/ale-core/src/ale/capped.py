"""A command's output kept up to a cap, with the size it had in all.

rock's backends (local processes, Docker execs) and iflow's local workspace each read a
command's streams without bounding the command: what it prints past the cap is counted and
dropped, so a runaway command cannot fill memory, and the caller can say how much was lost.
"""

from __future__ import annotations


class CappedOutput:
    """Bytes of one stream: the first ``cap`` kept in ``data``, ``total`` counted."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.data = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.cap - len(self.data)
        if room > 0:
            self.data.extend(chunk[:room])

    @property
    def dropped(self) -> int:
        """How many bytes went past the cap."""
        return self.total - len(self.data)
