_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(n, base):
    if not 2 <= base <= 36:
        raise ValueError(f"base must be between 2 and 36, not {base}")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    n = abs(n)
    digits = []
    while n:
        n, rest = divmod(n, base)
        digits.append(_DIGITS[rest])
    return sign + "".join(reversed(digits))
