"""numeric-solve: a small numerical-methods job whose answer is a few numbers in a file.

Each draft is one of three kinds: integrate tabulated data with the trapezoid rule, find
the root(s) of a stated polynomial on an interval by bisection to a stated tolerance, or
step a stated ODE (or, when hard, a system of two) with Euler's method or classic RK4.
Difficulty changes sizes, spacing and ordering of the data, the polynomial's degree and
number of roots in the interval, and whether checkpoints or a system are asked for. The
tests accept the tolerance the instruction states.
"""

from __future__ import annotations

import itertools
import math
import random
import textwrap
from collections.abc import Callable

from ale.synth.expert import Observation, shell, write
from ale.synth.family import ExpertProgram, Family, TaskDraft, register
from task_families._sources import fill, phrase_table, phrases

_OUT_NAMES = ["answer.txt", "result.txt", "output.txt", "solution.txt", "out/result.txt"]
_ONE_PER_LINE = phrases("numeric_solve", "one_per_line")
_ONE_NUMBER = phrases("numeric_solve", "one_number")
_TOL = phrases("numeric_solve", "tol")

# ---------------------------------------------------------------- trapezoid rule

_TABLES = [
    ("t_s", "velocity_mps", "distance travelled"),
    ("time_h", "power_kw", "energy used"),
    ("x_m", "load_n_per_m", "total load"),
    ("depth_m", "area_m2", "volume"),
    ("t_min", "flow_l_per_min", "volume pumped"),
]
_TRAP_OPEN = phrases("numeric_solve", "trap_open")
_TRAP_ASK = phrases("numeric_solve", "trap_ask")
_TRAP_SPACING = phrases("numeric_solve", "trap_spacing")
_TRAP_EVEN = phrases("numeric_solve", "trap_even")
_TRAP_SHUFFLED = phrases("numeric_solve", "trap_shuffled")


def _trapezoid(rng: random.Random, difficulty: str) -> dict:
    x, y, what = rng.choice(_TABLES)
    n = {"easy": 11, "medium": 25, "hard": 40}[difficulty] + rng.randrange(10)
    start = rng.choice([0, 0, 1, 2, 5])
    if difficulty == "easy":
        step = rng.choice([0.25, 0.5, 1.0, 2.0])
        xs = [round(start + i * step, 2) for i in range(n)]
    else:
        xs = [float(start)]
        for _ in range(n - 1):
            xs.append(round(xs[-1] + rng.uniform(0.1, 1.5), 2))
    amp, base, freq = rng.uniform(2, 20), rng.uniform(5, 40), rng.uniform(0.1, 0.6)
    ys = [round(base + amp * math.sin(freq * v) + rng.uniform(-1, 1), 3) for v in xs]
    rows = list(zip(xs, ys, strict=True))
    shuffled = difficulty == "hard"
    if shuffled:
        rng.shuffle(rows)

    def trap(lo: float, hi: float) -> float:
        pts = sorted(p for p in rows if lo <= p[0] <= hi)
        return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in itertools.pairwise(pts))

    answers = [trap(xs[0], xs[-1])]
    asks = [rng.choice(_TRAP_ASK).format(x=x, y=y, what=what)]
    bounds: tuple[float, float] | None = None
    if difficulty == "hard":
        i = rng.randrange(2, n // 3)
        j = rng.randrange(2 * n // 3, n - 2)
        bounds = (xs[i], xs[j])
        answers.append(trap(*bounds))
        asks.append(
            f"Give two numbers: first the integral over all samples, then the integral over "
            f"`{x}` from {xs[i]:g} to {xs[j]:g} (both are sample points)."
        )
    src = rng.choice(
        ["samples.csv", "profile.csv", "table.csv", f"{y.split('_')[0]}.csv", f"{x}_{y}.csv"]
    )
    text = f"{x},{y}\n" + "".join(f"{a:g},{b:g}\n" for a, b in rows)
    parts = [rng.choice(_TRAP_OPEN).format(src=src, x=x, y=y), *asks]
    if difficulty == "easy":
        even = rng.choice(_TRAP_EVEN)
        parts.append(even.format(n=n, step=xs[1] - xs[0], x=x, lo=xs[0], hi=xs[-1]))
    else:
        parts.append(rng.choice(_TRAP_SPACING).format(x=x))
    if shuffled:
        parts.append(rng.choice(_TRAP_SHUFFLED).format(x=x))
    code = fill("numeric_solve", "trapezoid", src=src, bounds=bounds)
    return {
        "parts": parts,
        "answers": answers,
        "tol": 1e-3,
        "files": {src: text},
        "code": code,
        "look": f"head -n 5 {src}; wc -l {src}",
        "params": {"columns": [x, y], "points": n, "shuffled": shuffled, "source": src},
    }


# ---------------------------------------------------------------- bisection


def _mul(p: list[float], q: list[float]) -> list[float]:
    out = [0.0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


def _horner(coeffs: list[float], x: float) -> float:
    acc = 0.0
    for c in coeffs:
        acc = acc * x + c
    return acc


def _bisect(f: Callable[[float], float], lo: float, hi: float) -> float:
    flo = f(lo)
    for _ in range(200):
        mid = (lo + hi) / 2
        fm = f(mid)
        if fm == 0 or hi - lo < 1e-14:
            return mid
        if (fm < 0) == (flo < 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return (lo + hi) / 2


def _poly_text(coeffs: list[float]) -> str:
    deg = len(coeffs) - 1
    terms: list[str] = []
    for i, c in enumerate(coeffs):
        if c == 0:
            continue
        power = deg - i
        mag = f"{abs(c):g}"
        body = {0: mag, 1: f"{mag}x"}.get(power, f"{mag}x^{power}")
        if mag == "1" and power:
            body = body[1:]
        sign = "-" if c < 0 else "+"
        terms.append(("-" if sign == "-" else "") + body if not terms else f" {sign} {body}")
    return "".join(terms)


_ROOT_OPEN = phrases("numeric_solve", "root_open")
_ROOT_ASK_ONE = phrases("numeric_solve", "root_ask_one")
_ROOT_ASK_MANY = phrases("numeric_solve", "root_ask_many")
_COEFFS = phrases("numeric_solve", "coeffs")


def _draw_poly(
    rng: random.Random, difficulty: str, a: float, b: float, k_in: int
) -> tuple[list[float], list[float]]:
    """``k_in`` roots in [a, b] and the rounded coefficients of a polynomial having them (medium
    drafts add a root outside, and a factor without real roots keeps the degree at least 3)."""
    roots: list[float] = []
    while len(roots) < k_in:
        r = rng.uniform(a + 0.2, b - 0.2)
        if all(abs(r - s) > 0.5 for s in roots):
            roots.append(r)
    lead = rng.choice([-1, 1]) * round(rng.uniform(0.5, 3), 2)
    poly = [lead]
    for r in roots:
        poly = _mul(poly, [1.0, -r])
    if difficulty == "medium":  # a second real root, outside the interval
        outside = rng.choice([a - rng.uniform(0.5, 3), b + rng.uniform(0.5, 3)])
        poly = _mul(poly, [1.0, -outside])
    if len(poly) < 4 or difficulty == "medium":  # a factor without real roots
        p_, q_ = rng.uniform(-2, 2), rng.uniform(0.5, 4)
        poly = _mul(poly, [1.0, p_, p_ * p_ / 4 + q_])
    return roots, [round(c, 3) for c in poly]


def _scan(coeffs: list[float], a: float, b: float) -> list[float]:
    """The roots in [a, b] found by bisecting each sign change on a grid of 4000 steps."""

    def f(x: float) -> float:
        return _horner(coeffs, x)

    grid = 4000
    found: list[float] = []
    prev = f(a)
    for i in range(1, grid + 1):
        x = a + (b - a) * i / grid
        cur = f(x)
        if (cur < 0) != (prev < 0):
            found.append(_bisect(f, a + (b - a) * (i - 1) / grid, x))
        prev = cur
    return found


def _bisection(rng: random.Random, difficulty: str) -> dict:
    k_in = {"easy": 1, "medium": 1, "hard": rng.randint(2, 3)}[difficulty]
    tol = {"easy": 1e-4, "medium": 1e-6, "hard": 1e-6}[difficulty]
    while True:
        a = rng.randint(-4, 1) + rng.choice([0, 0.5])
        b = a + rng.randint(3, 6)
        roots, coeffs = _draw_poly(rng, difficulty, a, b, k_in)
        found = _scan(coeffs, a, b)
        if (
            len(found) == k_in
            and abs(_horner(coeffs, a)) > 1e-3
            and abs(_horner(coeffs, b)) > 1e-3
            and all(abs(x - r) < 0.05 for x, r in zip(found, sorted(roots), strict=True))
        ):
            break
    poly_s = _poly_text(coeffs)
    coef_s = "[" + ", ".join(f"{c:g}" for c in coeffs) + "]"
    fa, fb = f"{a:g}", f"{b:g}"
    ask = (
        rng.choice(_ROOT_ASK_ONE).format(a=fa, b=fb, tol=tol)
        if k_in == 1
        else rng.choice(_ROOT_ASK_MANY).format(a=fa, b=fb, tol=tol, k=k_in)
    )
    parts = [
        rng.choice(_ROOT_OPEN).format(poly=poly_s),
        rng.choice(_COEFFS).format(c=coef_s, d=len(coeffs) - 1),
        ask,
    ]
    code = fill("numeric_solve", "bisection", coeffs=coeffs, a=float(a), b=float(b), tol=tol)
    return {
        "parts": parts,
        "answers": found,
        "tol": tol,
        "files": {},
        "code": code,
        "look": None,
        "params": {"coefficients": coeffs, "interval": [a, b], "roots_in_interval": k_in},
    }


# ---------------------------------------------------------------- ODEs

_SCALAR = [
    ("logistic growth", "r*y*(1 - y/K)", {"r": (0.3, 1.5), "K": (50, 500)}, (1, 20)),
    ("Newton cooling", "-k*(y - Ta)", {"k": (0.05, 0.5), "Ta": (15, 25)}, (60, 95)),
    ("forced decay", "-k*y + a*sin(w*t)", {"k": (0.2, 1.0), "a": (1, 5), "w": (0.5, 3)}, (0, 5)),
    ("growth-decay", "y*(a - b*t)", {"a": (0.3, 1.0), "b": (0.3, 0.8)}, (1, 5)),
]
_SYSTEMS = [
    (
        "damped oscillator",
        ("x", "v"),
        ("v", "-w2*x - c*v"),
        {"w2": (1, 6), "c": (0.1, 0.8)},
        ((0.5, 2), (-1, 1)),
    ),
    (
        "predator-prey",
        ("x", "y"),
        ("a*x - b*x*y", "d*x*y - g*y"),
        {"a": (0.8, 1.5), "b": (0.05, 0.2), "d": (0.02, 0.1), "g": (0.5, 1.2)},
        ((5, 20), (2, 8)),
    ),
]
_ODE_OPEN = phrases("numeric_solve", "ode_open")
_METHOD = phrase_table("numeric_solve", "method")
_ODE_ASK_FINAL = phrases("numeric_solve", "ode_ask_final")
_ODE_ASK_CHECK = phrases("numeric_solve", "ode_ask_check")
_ODE_ASK_SYS = phrases("numeric_solve", "ode_ask_sys")


def _num(rng: random.Random, lo_hi: tuple[float, float]) -> float:
    return round(rng.uniform(*lo_hi), 2)


def _draw_model(
    rng: random.Random, system: bool
) -> tuple[str, tuple[str, ...], list[float], list[str], str, str]:
    """A model with drawn parameters: its name, variable names, initial state, right-hand
    sides, and how the equations and the initial state are written."""
    names: tuple[str, ...]
    if system:
        name, names, rhs, prm, inits = rng.choice(_SYSTEMS)
        values = {k: _num(rng, v) for k, v in prm.items()}
        state0 = [_num(rng, r) for r in inits]
        exprs = [_subst(e, values) for e in rhs]
        eqs = f"d{names[0]}/dt = {exprs[0]}, d{names[1]}/dt = {exprs[1]}"
        init = f"{names[0]} = {state0[0]:g}, {names[1]} = {state0[1]:g}"
    else:
        name, rhs1, prm, init_r = rng.choice(_SCALAR)
        names = ("y",)
        values = {k: _num(rng, v) for k, v in prm.items()}
        state0 = [_num(rng, init_r)]
        exprs = [_subst(rhs1, values)]
        eqs = f"dy/dt = {exprs[0]}"
        init = f"y = {state0[0]:g}"
    return name, names, state0, exprs, eqs, init


def _ode_ask(
    rng: random.Random, difficulty: str, names: tuple[str, ...], checkpoints: list[int]
) -> str:
    """What to report: both variables (hard), the checkpoints (medium) or the final value."""
    if difficulty == "hard":
        return rng.choice(_ODE_ASK_SYS).format(u=names[0], v=names[-1])  # two names
    if difficulty == "medium":
        steps = ", ".join(str(s) for s in checkpoints[:-1]) + f" and {checkpoints[-1]}"
        return rng.choice(_ODE_ASK_CHECK).format(steps=steps)
    return rng.choice(_ODE_ASK_FINAL)


def _ode(rng: random.Random, difficulty: str) -> dict:
    method = "euler" if difficulty == "easy" else rng.choice(["euler", "rk4"])
    other = "rk4" if method == "euler" else "euler"
    t0 = rng.choice([0, 0, 1])

    names: tuple[str, ...]
    while True:  # redraw until the asked method is told apart from the other one
        h = rng.choice([0.01, 0.02, 0.05, 0.1])
        n = rng.randint(20, 60) if h >= 0.05 else rng.randint(80, 250)
        name, names, state0, exprs, eqs, init = _draw_model(rng, difficulty == "hard")
        checkpoints = [n]
        if difficulty == "medium":
            checkpoints = [*sorted(rng.sample(range(5, n), k=2)), n]
        answers = _run(exprs, names, state0, t0, h, n, checkpoints, method)
        alt = _run(exprs, names, state0, t0, h, n, checkpoints, other)
        if max(abs(a - b) for a, b in zip(answers, alt, strict=True)) > 1e-3:
            break
    parts = [
        rng.choice(_ODE_OPEN).format(name=name, eqs=eqs, init=init, t0=t0),
        rng.choice(_METHOD[method]).format(h=h, n=n),
        _ode_ask(rng, difficulty, names, checkpoints),
        "(`sin` is the sine of an angle in radians.)" if "sin" in eqs else "",
    ]
    code = fill(
        "numeric_solve",
        "ode",
        names=names,
        exprs=exprs,
        h=h,
        n=n,
        t0=float(t0),
        method=method,
        checkpoints=checkpoints,
        state0=state0,
    )
    return {
        "parts": [p for p in parts if p],
        "answers": answers,
        "tol": 1e-6,
        "files": {},
        "code": code,
        "look": None,
        "params": {
            "model": name,
            "method": method,
            "h": h,
            "steps": n,
            "checkpoints": checkpoints,
            "rhs": exprs,
        },
    }


def _subst(expr: str, values: dict[str, float]) -> str:
    """``expr`` with its parameter names replaced by their values, spaced for reading."""
    out = []
    token = ""
    for ch in expr + " ":
        if ch.isalnum():
            token += ch
            continue
        if token:
            out.append(f"{values[token]:g}" if token in values else token)
            token = ""
        out.append(ch)
    return "".join(out).strip().replace("*", " * ").replace("  ", " ")


def _run(
    exprs: list[str],
    names: tuple[str, ...],
    state0: list[float],
    t0: float,
    h: float,
    n: int,
    checkpoints: list[int],
    meth: str,
) -> list[float]:
    """The state after each checkpoint step of ``meth`` (flattened)."""
    compiled = [compile(e, "<rhs>", "eval") for e in exprs]
    state = list(state0)
    out: list[float] = []
    for step in range(1, n + 1):
        state = _step(compiled, names, meth, t0 + (step - 1) * h, state, h)
        if step in checkpoints:
            out.extend(state)
    return out


def _step(
    compiled: list, names: tuple[str, ...], meth: str, t: float, s: list[float], h: float
) -> list[float]:
    def f(tt: float, ss: list[float]) -> list[float]:
        env = {**dict(zip(names, ss, strict=True)), "t": tt, "sin": math.sin}
        return [eval(c, {}, env) for c in compiled]

    if meth == "euler":
        return [a + h * d for a, d in zip(s, f(t, s), strict=True)]
    k1 = f(t, s)
    k2 = f(t + h / 2, [a + h / 2 * d for a, d in zip(s, k1, strict=True)])
    k3 = f(t + h / 2, [a + h / 2 * d for a, d in zip(s, k2, strict=True)])
    k4 = f(t + h, [a + h * d for a, d in zip(s, k3, strict=True)])
    return [
        a + h / 6 * (p + 2 * q + 2 * r + w) for a, p, q, r, w in zip(s, k1, k2, k3, k4, strict=True)
    ]


# ---------------------------------------------------------------- the family

_KINDS = {"trapezoid": _trapezoid, "bisection": _bisection, "ode": _ode}


@register
class NumericSolve(Family):
    name = "numeric-solve"
    category = "scientific-computing"
    description = "Trapezoid integration, polynomial bisection or an Euler/RK4 ODE run."
    multi_turn = False

    def generate(self, rng: random.Random, difficulty: str) -> TaskDraft:
        kind = rng.choice(sorted(_KINDS))
        job = _KINDS[kind](rng, difficulty)
        out = rng.choice(_OUT_NAMES)
        answers: list[float] = job["answers"]
        tol: float = job["tol"]
        many = len(answers) > 1
        parts = list(job["parts"])
        parts.append(f"Save the result to `{out}`.")
        parts.append(rng.choice(_ONE_PER_LINE if many else _ONE_NUMBER))
        parts.append(rng.choice(_TOL).format(tol=f"{tol:g}"))
        instruction = " ".join(parts)
        code = job["code"] + textwrap.dedent(
            f"""\
            import os
            os.makedirs(os.path.dirname({out!r}) or ".", exist_ok=True)
            with open({out!r}, "w") as fh:
                fh.write("".join(f"{{v:.12g}}\\n" for v in answers))
            """
        )
        tests = fill(
            "numeric_solve",
            "test_outputs",
            expected=[float(a) for a in answers],
            tol=tol,
            path="/app/" + out,
        )
        expert = _expert(job["look"], kind, code, out, len(answers))
        params = {"kind": kind, "output": out, "tolerance": tol, **job["params"]}
        files = {f"/app/{name}": text for name, text in job["files"].items()}
        mistakes = [shell("python3 -c 'import numpy, scipy'", "Check for numpy and scipy.")]
        if files:
            mistakes.append(shell("head -n 5 /app/data.csv", "First a look at the data."))
        return TaskDraft(
            instruction=instruction,
            files=files,
            tests=tests,
            solution="python3 - <<'PY'\n" + code + "PY\n",
            expert=expert,
            params=params,
            mistakes=mistakes,
            tags=["numerical-methods", kind],
        )


def _expert(
    look: str | None, kind: str, code: str, out: str, n_answers: int
) -> Callable[[], ExpertProgram]:
    """Look at the data (when there is some), write the script, run it, show the output."""

    def expert() -> ExpertProgram:
        if look:
            seen: Observation = yield shell(look, "First a look at the data.")
            lines = seen.output.splitlines()
            header = lines[0] if lines else ""
            thought = f"The header is `{header}`; I write the integration script."
        else:
            thought = f"I write a short stdlib script for the {kind} computation."
        yield write("/app/compute.py", code, thought)
        ran: Observation = yield shell(
            f"python3 compute.py 2>&1 && cat {out}", "Run it and show the output file."
        )
        if not ran.ok:
            return "The script failed; see the error above."
        got = ran.output.strip().splitlines()[-n_answers:]
        return f"Wrote {len(got)} value(s) to {out}: {', '.join(got)}."

    return expert
