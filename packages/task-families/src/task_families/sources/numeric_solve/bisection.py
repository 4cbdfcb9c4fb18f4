COEFFS = "$coeffs"
A, B, TOL = "$a", "$b", "$tol"


def p(x):
    acc = 0.0
    for c in COEFFS:
        acc = acc * x + c
    return acc


def bisect(lo, hi):
    while hi - lo > TOL / 4:
        mid = (lo + hi) / 2
        if (p(mid) < 0) == (p(lo) < 0):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


N = 2000
answers = []
for i in range(N):
    lo, hi = A + (B - A) * i / N, A + (B - A) * (i + 1) / N
    if (p(lo) < 0) != (p(hi) < 0):
        answers.append(bisect(lo, hi))
print("sign changes found:", len(answers))
