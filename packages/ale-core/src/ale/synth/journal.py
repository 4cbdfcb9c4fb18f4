"""The journal of a synthesis run: every stage decision, appended as it is made, so a
killed run started again skips what was already decided."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class Journal:
    """Append-only record of every stage decision, one JSON object a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: dict[tuple[str, str], dict[str, Any]] = {}
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut short by a kill
                self.records[(rec["stage"], rec["id"])] = rec
        self._fh = path.open("a", encoding="utf-8")

    def get(self, stage: str, item: str) -> dict[str, Any] | None:
        rec = self.records.get((stage, item))
        return None if rec is None or rec.get("retry") else rec

    def put(self, stage: str, item: str, ok: bool, reason: str | None = None, **data: Any) -> None:
        rec = {"stage": stage, "id": item, "ok": ok, "reason": reason, **data}
        self.records[(stage, item)] = rec
        self._fh.write(json.dumps(rec, sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()
