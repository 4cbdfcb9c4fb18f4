import json
from pathlib import Path

MAZE = "$lines"
SHORTEST = "$length"
MOVES = {"U": (-1, 0), "D": (1, 0), "L": (0, -1), "R": (0, 1)}


def answer():
    return "$read"


def test_answer_present():
    assert Path("$path").is_file()


def test_length_is_optimal():
    n, moves = answer()
    if n is not None:
        assert n == SHORTEST


def test_moves_valid_and_optimal():
    n, moves = answer()
    if moves is None:
        return
    r, c = next((r, c) for r, row in enumerate(MAZE) for c, ch in enumerate(row) if ch == "S")
    keys = set()
    for i, m in enumerate(moves):
        assert m in MOVES, f"bad move {m!r} at {i}"
        r, c = r + MOVES[m][0], c + MOVES[m][1]
        assert 0 <= r < len(MAZE) and 0 <= c < len(MAZE[r]), f"left the maze at move {i}"
        ch = MAZE[r][c]
        assert ch != "#", f"walked into a wall at move {i}"
        if ch.isupper() and ch not in "SG":
            assert ch.lower() in keys, f"door {ch} without its key at move {i}"
        if ch.islower():
            keys.add(ch)
    assert MAZE[r][c] == "G", "the moves do not end on a goal"
    assert len(moves) == SHORTEST
    if n is not None:
        assert n == len(moves)
