import csv, json, os
totals = {}
with open("$src", newline="") as fh:
    rows = csv.DictReader((line for line in fh if line.strip()), delimiter="$delim")
    for row in rows:
        totals[row["$group"]] = totals.get(row["$group"], 0.0) + float(row["$value"])
os.makedirs(os.path.dirname("$out") or ".", exist_ok=True)
with open("$out", "w") as fh:
    json.dump({k: round(v, 2) for k, v in sorted(totals.items())}, fh, indent=2)
