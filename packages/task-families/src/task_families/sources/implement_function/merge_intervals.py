def merge_intervals(intervals):
    spans = sorted([min(a, b), max(a, b)] for a, b in intervals)
    merged = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged
