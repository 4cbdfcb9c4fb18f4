from math import sin

NAMES = "$names"
EXPRS = "$exprs"
H, N, T0, METHOD = "$h", "$n", "$t0", "$method"
CHECKPOINTS = "$checkpoints"


def f(t, s):
    env = dict(zip(NAMES, s), t=t, sin=sin)
    return [eval(e, {}, env) for e in EXPRS]


def step(t, s):
    if METHOD == "euler":
        return [a + H * d for a, d in zip(s, f(t, s))]
    k1 = f(t, s)
    k2 = f(t + H / 2, [a + H / 2 * d for a, d in zip(s, k1)])
    k3 = f(t + H / 2, [a + H / 2 * d for a, d in zip(s, k2)])
    k4 = f(t + H, [a + H * d for a, d in zip(s, k3)])
    return [a + H / 6 * (p + 2 * q + 2 * r + w) for a, p, q, r, w in zip(s, k1, k2, k3, k4)]


state = "$state0"
answers = []
for i in range(1, N + 1):
    state = step(T0 + (i - 1) * H, state)
    if i in CHECKPOINTS:
        answers.extend(state)
