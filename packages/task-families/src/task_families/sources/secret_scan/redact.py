import json
from pathlib import Path

HITS = json.loads("$hits")
MARK = "$mark"
for name, line, kind, value in sorted(HITS, key=lambda h: (h[0], -h[1])):
    path = Path("/app") / name
    lines = path.read_text().split("\n")
    i = line - 1
    if kind == "pem":
        end = next(j for j in range(i, len(lines)) if lines[j].startswith("-----END"))
        lines[i : end + 1] = [MARK]
    else:
        lines[i] = lines[i].replace(value, MARK)
    path.write_text("\n".join(lines))
