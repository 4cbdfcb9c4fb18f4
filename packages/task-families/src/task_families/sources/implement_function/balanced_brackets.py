def is_balanced(text):
    closing = {")": "(", "]": "[", "}": "{"}
    stack = []
    quoted = False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in closing:
            if not stack or stack.pop() != closing[ch]:
                return False
    return not stack and not quoted
