import json, os, statistics

CONVERT = "$conv"
SPEC = "$spec"
rows = []
with open("$src") as fh:
    for line in fh:
        line = line.strip()
        if line and not line.startswith("#"):
            rows.append([cell.strip() for cell in "$split"])
header, data = rows[0], rows[1:]


def column(name):
    fac, off = CONVERT.get(name, (1.0, 0.0))
    i = header.index(name)
    return [None if r[i] == "NA" else float(r[i]) * fac + off for r in data]


FUNCS = {"mean": statistics.mean, "median": statistics.median,
         "stdev": statistics.stdev, "min": min, "max": max}
result = {}
for key, stat, a, b in SPEC:
    if stat in FUNCS:
        result[key] = FUNCS[stat]([v for v in column(a) if v is not None])
        continue
    pairs = [(x, y) for x, y in zip(column(a), column(b)) if x is not None and y is not None]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    if stat == "r":
        result[key] = statistics.correlation(xs, ys)
    else:
        fit = statistics.linear_regression(xs, ys)
        result[key] = fit.slope if stat == "slope" else fit.intercept
os.makedirs(os.path.dirname("$out") or ".", exist_ok=True)
with open("$out", "w") as fh:
    json.dump({k: round(v, "$decimals") for k, v in result.items()}, fh, indent=2)
