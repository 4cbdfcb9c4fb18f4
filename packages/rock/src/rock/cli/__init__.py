"""The ``rock`` command: the daemon (``serve``), its sandboxes, pools and images, and ``doctor``.

Every verb that talks to the daemon takes ``--home`` (where ``rock serve`` left its
address and token) and ``--url``; errors are one sentence on stderr after ``rock:``,
exit 1; bad input is exit 2.

The root group lives in :mod:`rock.cli._common`; each topic module registers its
commands on it when imported here.
"""

from __future__ import annotations

from rock.cli._bench import bench, bench_build, bench_check, bench_run, bench_show, bench_toolchain
from rock.cli._common import BadInput, main
from rock.cli._image import build_base_cmd, doctor, image, image_ls
from rock.cli._pool import pool, pool_ls, pool_rm, pool_set
from rock.cli._sandbox import (
    sandbox,
    sandbox_cp,
    sandbox_create,
    sandbox_exec,
    sandbox_logs,
    sandbox_ls,
    sandbox_rm,
    sandbox_shell,
)
from rock.cli._serve import serve
from rock.cli._synth import synth, synth_families, synth_run, synth_stats

__all__ = [
    "BadInput",
    "bench",
    "bench_build",
    "bench_check",
    "bench_run",
    "bench_show",
    "bench_toolchain",
    "build_base_cmd",
    "doctor",
    "image",
    "image_ls",
    "main",
    "pool",
    "pool_ls",
    "pool_rm",
    "pool_set",
    "sandbox",
    "sandbox_cp",
    "sandbox_create",
    "sandbox_exec",
    "sandbox_logs",
    "sandbox_ls",
    "sandbox_rm",
    "sandbox_shell",
    "serve",
    "synth",
    "synth_families",
    "synth_run",
    "synth_stats",
]
