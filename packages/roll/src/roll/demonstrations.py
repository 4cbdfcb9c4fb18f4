"""Demonstrations: the agent trajectories SFT learns from, as files and as the agent saw them.

Read from JSONL files or ``rock synth`` dataset directories, with the iflow agent's tool schemas
and its compact-profile system message, so that SFT (:mod:`roll.sft`) and the tokenizer of a
tiny model built from nothing (:mod:`roll.session`) read the same data the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ale.jsonl import read_jsonl
from ale.trajectory import Role, Trajectory
from roll.errors import ConfigError


def iflow_tool_schemas(*, compact: bool = False) -> list[dict[str, Any]]:
    """The tool schemas the iflow agent offers (in yolo mode), as its local model renders them;
    ``compact``: those of the compact prompt profile."""
    from iflow.prompts import COMPACT_TOOLS
    from iflow.tools import default_tools

    if compact:
        by_name = {tool.name: tool for tool in default_tools()}
        return [by_name[name].compact_schema() for name in COMPACT_TOOLS]
    return [tool.schema() for tool in default_tools()]


_WORKDIR = re.compile(r"working directory (\S+?)\)?\.?$", re.MULTILINE)


def as_compact(trajectory: Trajectory) -> Trajectory:
    """The trajectory as the agent in the compact profile would have seen it: its system
    message replaced by the compact one (same working directory)."""
    from iflow.prompts import system_prompt

    steps = list(trajectory.steps)
    if not steps or steps[0].role is not Role.SYSTEM:
        return trajectory
    found = _WORKDIR.search(steps[0].content)
    cwd = found.group(1).rstrip(").") if found else "/app"
    compact = system_prompt(workspace="sandbox", cwd=cwd, mode="yolo", profile="compact")
    steps[0] = steps[0].model_copy(update={"content": compact})
    return trajectory.model_copy(update={"steps": steps})


def trajectory_files(paths: Iterable[str | Path]) -> list[Path]:
    """The JSONL files named, or found in dataset directories (``trajectories.jsonl`` and
    ``trajectories/*.jsonl``)."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(path.glob("trajectories.jsonl")) + sorted(
                path.glob("trajectories/*.jsonl")
            )
            if not found:
                raise ConfigError(
                    f"{path} holds no trajectories.jsonl or trajectories/*.jsonl; give a "
                    "dataset directory written by `rock synth run` or a JSONL file"
                )
            files.extend(found)
        else:
            raise ConfigError(f"there is no file or directory {path}; check data in the config")
    return files


def load_trajectories(paths: Iterable[str | Path]) -> list[Trajectory]:
    out: list[Trajectory] = []
    for file in trajectory_files(paths):
        out.extend(read_jsonl(file, Trajectory))
    return out
