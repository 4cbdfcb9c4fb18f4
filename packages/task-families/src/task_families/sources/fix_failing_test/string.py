"""String helpers for the static site generator."""


def _clean(text):
    return "".join(ch.lower() for ch in text if ch.isalnum())


def slugify(text, sep="-"):
    """Lower-case alphanumeric words of text joined by sep."""
    words = "".join(ch.lower() if ch.isalnum() else " " for ch in text).split()
    return sep.join(words)


def truncate(text, width, suffix="..."):
    """text cut to at most width characters, ending in suffix when it was cut."""
    if len(text) <= width:
        return text
    return text[: width - len(suffix)] + suffix


def is_palindrome(text):
    """True when text reads the same backwards, ignoring case and punctuation."""
    cleaned = _clean(text)
    return cleaned == cleaned[::-1]


def count_word(text, word):
    """How many times word occurs in text as a whole word, ignoring case."""
    target = _clean(word)
    return sum(1 for token in text.split() if _clean(token) == target)


def title_case(text):
    """Each word capitalised, the rest of the word in lower case."""
    return " ".join(w[:1].upper() + w[1:].lower() for w in text.split())


def initials(name):
    """Upper-case initials of a full name, each followed by a dot."""
    return "".join(part[0].upper() + "." for part in name.split())
