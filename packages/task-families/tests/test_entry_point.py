"""The built-in families reach ale.synth through the entry point, with nothing imported."""

from __future__ import annotations

import subprocess
import sys


def test_ale_finds_the_builtin_families_without_importing_them() -> None:
    probe = (
        "import sys\n"
        "from ale.synth.family import families\n"
        "assert 'task_families' not in sys.modules\n"
        "names = families()\n"
        "assert 'task_families' in sys.modules\n"
        "print(len(names), ' '.join(names))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    count, names = done.stdout.split(" ", 1)
    assert int(count) == 16
    assert {"text-count", "text-find", "text-transform", "csv-aggregate"} <= set(names.split())
