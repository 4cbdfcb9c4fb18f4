"""Tiny matrix helpers (a matrix is a list of rows) for the layout engine."""


def _dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def transpose(m):
    """Rows become columns."""
    return [[m[i][j] for i in range(len(m))] for j in range(len(m[0]))]


def identity(n):
    """The n x n identity matrix."""
    return [[1 if i == j else 0 for j in range(n)] for i in range(n)]


def matmul(a, b):
    """Matrix product of a and b."""
    cols = transpose(b)
    return [[_dot(row, col) for col in cols] for row in a]


def trace(m):
    """Sum of the main diagonal."""
    return sum(m[i][i] for i in range(len(m)))


def scale(m, k):
    """Every entry multiplied by k."""
    return [[k * x for x in row] for row in m]


def add(a, b):
    """Entry-wise sum of two matrices of the same shape."""
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]
