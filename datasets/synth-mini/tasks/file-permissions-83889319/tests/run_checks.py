"""Run a generated task's checks with python3 alone: ``python3 run_checks.py TEST_FILE``.

Why it exists: a synthesized task's ``tests/test_outputs.py`` is plain ``test_*`` functions
with ``assert`` statements, and starting pytest to run two of them costs a sandbox about
0.3 s of CPU (its import and plugins, and the pip call that makes sure it is there) against
0.04 s here; a synthesis run and an RL run verify hundreds of episodes. :mod:`ale.synth.render`
copies this file into ``tests/`` beside a test file that needs nothing of pytest (no
``import pytest``, no fixtures, no classes, no decorators) and keeps pytest for the others.
The test file stays a pytest file: ``pytest`` runs it with the same outcome.

What it does, as pytest does for such a file: imports the file with its folder first on
``sys.path``, calls each module-level function whose name starts with ``test`` in the order
of the module (one that wants an argument, a fixture, is an error, as pytest finds none), prints a ``short test summary info`` block in pytest's ``-rA`` form
(``PASSED path::name``, ``FAILED path::name - Error: message``) after each failure's
traceback, and exits 0 when every check passed, 1 when one failed, 2 when the file cannot
be imported, 5 when it holds no check. Standard library only: it runs on any python3 in a
task's image.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import time
import traceback

EXIT_PASSED, EXIT_FAILED, EXIT_ERROR, EXIT_NONE = 0, 1, 2, 5


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (": " + text[0] if text else "")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python3 run_checks.py TEST_FILE", file=sys.stderr)
        return EXIT_ERROR
    path = argv[1]
    started = time.monotonic()
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = os.path.splitext(os.path.basename(path))[0]
    print("=" * 20 + " test session starts (run_checks) " + "=" * 20)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a broken test file is an error, as pytest's collection error
        traceback.print_exc(file=sys.stdout)
        print("=" * 20 + " short test summary info " + "=" * 20)
        print(f"ERROR {path} - {_one_line(exc)}")
        return EXIT_ERROR
    checks = [
        (key, value)
        for key, value in list(vars(module).items())
        if key.startswith("test") and inspect.isfunction(value)
    ]
    lines, failed = [], 0
    for key, check in checks:
        node = f"{path}::{key}"
        wanted = [
            p.name
            for p in inspect.signature(check).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        if wanted:  # a fixture pytest would look for: an error at its set-up there too
            failed += 1
            lines.append(f"ERROR {node} - fixture {wanted[0]!r} not found")
            continue
        try:
            check()
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # (a check calling sys.exit fails, as under pytest)
            failed += 1
            print("_" * 20 + f" {key} " + "_" * 20)
            traceback.print_exc(file=sys.stdout)
            lines.append(f"FAILED {node} - {_one_line(exc)}")
        else:
            lines.append(f"PASSED {node}")
    print("=" * 20 + " short test summary info " + "=" * 20)
    print("\n".join(lines))
    passed = len(checks) - failed
    took = time.monotonic() - started
    counts = [f"{failed} failed"] if failed else []  # (errors among them)
    counts += [f"{passed} passed"] if passed else []
    print(f"{', '.join(counts) or 'no tests ran'} in {took:.2f}s")
    if not checks:
        return EXIT_NONE
    return EXIT_FAILED if failed else EXIT_PASSED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
