"""Small statistics helpers used by the reporting scripts."""


def _total(values):
    total = 0
    for value in values:
        total += value
    return total


def mean(values):
    """Arithmetic mean of a non-empty list."""
    return _total(values) / len(values)


def median(values):
    """Middle value (mean of the two middle values for an even count)."""
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    if n % 2 == 1:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def variance(values):
    """Population variance."""
    m = mean(values)
    return _total([(v - m) ** 2 for v in values]) / len(values)


def value_range(values):
    """Largest value minus smallest value."""
    return max(values) - min(values)


def clamp(x, low=0, high=100):
    """x limited to the closed interval [low, high]."""
    if x < low:
        return low
    if x > high:
        return high
    return x


def percent(part, whole, digits=1):
    """part as a percentage of whole, rounded to `digits` decimals."""
    return round(100 * part / whole, digits)
