_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def from_roman(text):
    text = text.strip().upper()
    if not text or any(ch not in _VALUES for ch in text):
        raise ValueError(f"not a roman numeral: {text!r}")
    total = 0
    for i, ch in enumerate(text):
        value = _VALUES[ch]
        if i + 1 < len(text) and _VALUES[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
