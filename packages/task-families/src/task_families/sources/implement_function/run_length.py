def rle_encode(text):
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{j - i}{text[i]}")
        i = j
    return "".join(out)


def rle_decode(encoded):
    out = []
    count = ""
    for ch in encoded:
        if ch in "0123456789":
            count += ch
        elif not count:
            raise ValueError(f"character {ch!r} has no count")
        else:
            out.append(ch * int(count))
            count = ""
    if count:
        raise ValueError("encoded text ends with a count")
    return "".join(out)
