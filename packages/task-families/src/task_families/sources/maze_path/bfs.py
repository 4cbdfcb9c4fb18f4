import json, os
from collections import deque

grid = open("$src").read().splitlines()
EXPECTED_ROWS = "$rows"  # 0 = not checked
assert not EXPECTED_ROWS or len(grid) == EXPECTED_ROWS, len(grid)
KEYS = "$keys"
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}
start = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "S")


def cell(r, c):
    if 0 <= r < len(grid) and 0 <= c < len(grid[r]):
        return grid[r][c]
    return "#"


first = (start, "")
prev = {first: None}
todo = deque([first])
end = None
while todo:
    state = todo.popleft()
    (r, c), held = state
    if cell(r, c) == "G":
        end = state
        break
    for move, (dr, dc) in MOVES.items():
        ch = cell(r + dr, c + dc)
        if ch == "#":
            continue
        if ch.isupper() and ch not in "SG" and ch.lower() not in held:
            continue
        if ch.islower() and ch not in held:
            held2 = "".join(sorted(held + ch))
        else:
            held2 = held
        nxt = ((r + dr, c + dc), held2)
        if nxt not in prev:
            prev[nxt] = (state, move)
            todo.append(nxt)
path = ""
while prev[end] is not None:
    end, move = prev[end]
    path = move + path
print(len(path), "moves")
os.makedirs(os.path.dirname("$out") or ".", exist_ok=True)
with open("$out", "w") as fh:
    "$emit"
