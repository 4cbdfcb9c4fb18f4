rows = []
for line in open("$src").read().splitlines()[1:]:
    if line.strip():
        a, b = line.split(",")
        rows.append((float(a), float(b)))
rows.sort()


def trap(lo, hi):
    pts = [p for p in rows if lo <= p[0] <= hi]
    return sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(pts, pts[1:]))


answers = [trap(rows[0][0], rows[-1][0])]
BOUNDS = "$bounds"
if BOUNDS:
    answers.append(trap(*BOUNDS))
