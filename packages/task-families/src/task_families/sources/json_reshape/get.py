MISSING = object()


def get(record, path, default=MISSING):
    value = record
    for key in path:
        if not isinstance(value, dict) or key not in value:
            if default is MISSING:
                raise KeyError(".".join(path))
            return default
        value = value[key]
    return value
