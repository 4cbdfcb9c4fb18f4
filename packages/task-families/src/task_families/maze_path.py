"""maze-path: the shortest path through an ASCII maze.

A maze (walls ``#``, start ``S``, goal ``G``) is carved with a seeded depth-first
backtracker; medium and hard mazes get extra openings so that several routes exist, medium
ones have several exits (the nearest counts) and hard ones have doors that open only once
the matching key has been picked up. The agent reports the length of a shortest path
and/or a move string of ``U``/``D``/``L``/``R``.

It needs interaction: the instruction does not give the maze's size, its floor symbol or
which keys and doors it holds, so the expert first looks at the file (its size and a census
of its symbols) and writes a breadth-first search fitted to what it found (plain positions,
or positions with the set of keys held when keys are present), then runs and checks it.
"""

from __future__ import annotations

import json
import random
import re
from collections import deque
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import Code, fill, phrase_table, phrases

_MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
_KEY_LETTERS = "abcdef"  # not g or s: their upper cases are the goal and the start

_OPENERS = phrases("maze_path", "openers")
_LEGEND = phrases("maze_path", "legend")
_STEP = phrases("maze_path", "step")
_MULTI = phrases("maze_path", "multi")
_KEYS = phrases("maze_path", "keys")
_ASK = phrase_table("maze_path", "ask")
_BOTH_KEYS = [("length", "moves"), ("steps", "path"), ("distance", "route"), ("n_moves", "moves")]


def _carve(rng: random.Random, w: int, h: int, braid: float) -> list[list[str]]:
    """A ``(2h+1) x (2w+1)`` grid of ``#`` and ``.``: a backtracker maze, then ``braid`` of
    the remaining inner walls between two cells knocked out (loops)."""
    grid = [["#"] * (2 * w + 1) for _ in range(2 * h + 1)]
    start = (rng.randrange(h), rng.randrange(w))
    seen = {start}
    stack = [start]
    grid[2 * start[0] + 1][2 * start[1] + 1] = "."
    while stack:
        r, c = stack[-1]
        nexts = [
            (r + dr, c + dc)
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))
            if 0 <= r + dr < h and 0 <= c + dc < w and (r + dr, c + dc) not in seen
        ]
        if not nexts:
            stack.pop()
            continue
        nr, nc = rng.choice(nexts)
        grid[r + nr + 1][c + nc + 1] = "."
        grid[2 * nr + 1][2 * nc + 1] = "."
        seen.add((nr, nc))
        stack.append((nr, nc))
    walls = [
        (r, c)
        for r in range(1, 2 * h)
        for c in range(1, 2 * w)
        if grid[r][c] == "#" and (r % 2) != (c % 2)
    ]
    for r, c in rng.sample(walls, k=int(len(walls) * braid)):
        grid[r][c] = "."
    return grid


def solve(grid: list[str]) -> tuple[int, str] | None:
    """Length and one move string of a shortest path from S to any G (keys and doors
    honoured), or None when there is none."""
    cells = {(r, c): ch for r, row in enumerate(grid) for c, ch in enumerate(row)}
    start = next(p for p, ch in cells.items() if ch == "S")
    first: tuple = (start, frozenset())
    prev: dict[tuple, tuple | None] = {first: None}
    todo = deque([first])
    while todo:
        state = todo.popleft()
        (r, c), keys = state
        if cells[(r, c)] == "G":
            path = []
            while (back := prev[state]) is not None:
                state, move = back
                path.append(move)
            return len(path), "".join(reversed(path))
        for move, (dr, dc) in _MOVES.items():
            pos = (r + dr, c + dc)
            ch = cells.get(pos, "#")
            if ch == "#" or (ch.isupper() and ch not in "SG" and ch.lower() not in keys):
                continue
            nxt = (pos, keys | {ch} if ch.islower() else keys)
            if nxt not in prev:
                prev[nxt] = (state, move)
                todo.append(nxt)
    return None


def _open_cells(grid: list[list[str]]) -> list[tuple[int, int]]:
    return [(r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "."]


def _positions(grid: list[list[str]], moves: str) -> list[tuple[int, int]]:
    r, c = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "S")
    out = [(r, c)]
    for m in moves:
        r, c = r + _MOVES[m][0], c + _MOVES[m][1]
        out.append((r, c))
    return out


def _build(rng: random.Random, difficulty: str) -> list[list[str]]:
    """A maze with S, G(s), and for hard, doors and keys that matter."""
    w, h = {"easy": (6, 5), "medium": (12, 8), "hard": (18, 11)}[difficulty]
    w, h = w + rng.randrange(4), h + rng.randrange(3)
    while True:
        grid = _carve(rng, w, h, {"easy": 0.0, "medium": 0.06, "hard": 0.05}[difficulty])
        cells = _open_cells(grid)
        sr, sc = rng.choice(cells)
        grid[sr][sc] = "S"
        far = sorted(
            (p for p in cells if abs(p[0] - sr) + abs(p[1] - sc) > (w + h) // 2),
            key=lambda p: (-(abs(p[0] - sr) + abs(p[1] - sc)), p),
        )
        if not far:
            continue
        n_goals = rng.randint(2, 3) if difficulty == "medium" else 1
        for gr, gc in rng.sample(far[: max(n_goals, len(far) // 3)], k=n_goals):
            grid[gr][gc] = "G"
        if difficulty != "hard":
            return grid
        if _add_doors(rng, grid, rng.randint(1, 2)):
            return grid


def _add_doors(rng: random.Random, grid: list[list[str]], pairs: int) -> bool:
    """Put ``pairs`` door/key pairs on ``grid`` so that each key is needed; False if that
    did not work out (the caller draws a new maze)."""
    letters = rng.sample(_KEY_LETTERS, k=pairs)
    for letter in letters:
        before = solve(["".join(row) for row in grid])
        if before is None:
            return False
        route = _positions(grid, before[1])
        middle = route[len(route) // 4 : 3 * len(route) // 4]
        spots = [p for p in middle if grid[p[0]][p[1]] == "."]
        rng.shuffle(spots)
        placed = False
        for door in spots[:6]:
            grid[door[0]][door[1]] = letter.upper()
            walls = [
                "".join("#" if ch.isupper() and ch not in "SG" else ch for ch in row)
                for row in grid
            ]
            reach = _reachable(walls)
            keys = [p for p in _open_cells(grid) if p in reach and p not in route]
            rng.shuffle(keys)
            for key in keys[:8]:
                grid[key[0]][key[1]] = letter
                now = solve(["".join(row) for row in grid])
                blocked = solve(walls)
                if now and now[0] > before[0] and (blocked is None or blocked[0] > now[0]):
                    placed = True
                    break
                grid[key[0]][key[1]] = "."
            if placed:
                break
            grid[door[0]][door[1]] = "."
        if not placed:
            return False
    return True


def _reachable(grid: list[str]) -> set[tuple[int, int]]:
    start = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "S")
    seen = {start}
    todo = [start]
    while todo:
        r, c = todo.pop()
        for dr, dc in _MOVES.values():
            p = (r + dr, c + dc)
            if p not in seen and grid[p[0]][p[1]] not in "#ABCDEF":
                seen.add(p)
                todo.append(p)
    return seen


@register
class MazePath(Family):
    name = "maze-path"
    category = "games"
    description = "Find the shortest path through an ASCII maze (exits, keys and doors)."
    multi_turn = True

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        raw = _build(rng, difficulty)
        floor = rng.choice([".", " ", " ", "."])
        lines = ["".join(floor if ch == "." else ch for ch in row) for row in raw]
        best = solve(lines)
        assert best is not None
        length = best[0]
        ask = rng.choice(["length", "moves", "both"])
        lk, mk = rng.choice(_BOTH_KEYS)
        src = rng.choice(["maze.txt", "labyrinth.txt", "puzzle/maze.txt", "map.txt", "grid.txt"])
        out = rng.choice(
            {
                "length": ["answer.txt", "length.txt", "shortest.txt", "out/steps.txt"],
                "moves": ["path.txt", "moves.txt", "route.txt", "out/path.txt"],
                "both": ["solution.json", "answer.json", "path.json", "out/result.json"],
            }[ask]
        )
        goals = sum(row.count("G") for row in lines)
        doors = sorted({ch for row in lines for ch in row if ch in _KEY_LETTERS.upper()})
        parts = [
            rng.choice(_OPENERS).format(src=src),
            rng.choice(_LEGEND),
            rng.choice(_STEP),
        ]
        if goals > 1:
            parts.append(rng.choice(_MULTI))
        if doors:
            parts.append(rng.choice(_KEYS))
        parts.append(rng.choice(_ASK[ask]).format(out=out, lk=lk, mk=mk))
        solution = "python3 - <<'PY'\n" + _script(src, out, ask, lk, mk, len(lines), "") + "PY\n"
        wrong = "maze.txt" if src != "maze.txt" else "maze.map"
        return TaskDraft(
            instruction=" ".join(parts),
            files={f"/app/{src}": "\n".join(lines) + "\n"},
            tests=_tests(lines, length, ask, out, lk, mk),
            solution=solution,
            expert=_expert(src, out, ask, lk, mk),
            params={
                "rows": len(lines),
                "cols": len(lines[0]),
                "goals": goals,
                "doors": doors,
                "ask": ask,
                "source": src,
                "output": out,
                "floor": floor,
                "shortest": length,
            },
            mistakes=[
                shell(f"cat /app/{wrong}", "Let me look at the maze first."),
                shell("python3 maze_bfs.py", "Run the search."),
            ],
            tags=["maze", "bfs"],
        )


def _expert(src: str, out: str, ask: str, lk: str, mk: str) -> Callable[[], ExpertProgram]:
    """Measure the maze, count its symbols, fit the search to them (keys or none), run it."""

    def expert() -> ExpertProgram:
        seen: Observation = yield shell(
            f"wc -l {src}; head -n 3 {src}", "Let me see how big the maze is and how it looks."
        )
        count = re.search(r"^\s*(\d+)", seen.output)
        rows = int(count.group(1)) if count else 0
        census: Observation = yield shell(
            f"grep -o . {src} | sort | uniq -c",
            f"The maze has {rows} rows. Which symbols does it use?",
        )
        symbols = _census(census.output)
        keys = "".join(sorted(ch for ch in symbols if ch.islower()))
        yield write("/app/bfs.py", _script(src, out, ask, lk, mk, rows, keys), _plan(symbols, keys))
        ran = yield shell(f"python3 bfs.py && cat {out}", "Run the search and show the answer.")
        if not ran.ok:
            return "The search failed; see the error above."
        return f"Found a shortest path of {ran.output.split()[0]} moves and wrote {out}."

    return expert


def _census(output: str) -> dict[str, int]:
    """Symbol -> count, from ``uniq -c`` output."""
    symbols: dict[str, int] = {}
    for line in output.splitlines():
        m = re.match(r"^\s*(\d+) (.)$", line)
        if m:
            symbols[m.group(2)] = int(m.group(1))
    return symbols


def _plan(symbols: dict[str, int], keys: str) -> str:
    """What the expert says about the search the symbols call for."""
    n_goals = symbols.get("G", 0)
    if keys:
        note = (
            f"It has keys {', '.join(keys)} and doors "
            f"{', '.join(ch for ch in sorted(symbols) if ch.isupper() and ch not in 'SG')}"
            ", so the search state is the position plus the keys held."
        )
    else:
        note = "No keys or doors, so a plain breadth-first search over cells will do."
    if n_goals > 1:
        note += f" There are {n_goals} goals; the search stops at the first one reached."
    return note


def _script(src: str, out: str, ask: str, lk: str, mk: str, rows: int, keys: str) -> str:
    """A BFS over (cell, keys held); ``keys`` are the key letters seen (empty: none)."""
    if ask == "length":
        emit = 'fh.write(f"{len(path)}\\n")'
    elif ask == "moves":
        emit = 'fh.write(path + "\\n")'
    else:
        emit = f"json.dump({{{lk!r}: len(path), {mk!r}: path}}, fh)"
    return fill("maze_path", "bfs", src=src, rows=rows, keys=keys, out=out, emit=Code(emit))


def _tests(lines: list[str], length: int, ask: str, out: str, lk: str, mk: str) -> str:
    path = "/app/" + out
    if ask == "length":
        read = f"int(Path({path!r}).read_text().strip()), None"
    elif ask == "moves":
        read = f'None, "".join(Path({path!r}).read_text().split())'
    else:
        read = (
            f"(lambda d: (int(d[{lk!r}]), str(d[{mk!r}])))(json.loads(Path({path!r}).read_text()))"
        )
    return fill(
        "maze_path",
        "test_outputs",
        lines=Code(json.dumps(lines)),
        length=Code(length),
        read=Code(read),
        path=path,
    )
