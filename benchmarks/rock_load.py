"""Load: many clients running commands at once through one daemon, nothing lost or mixed up.

``--clients`` threads, each with its own `rock.Client` (its own connections), run
``--execs`` commands each, spread round-robin over ``--sandboxes`` sandboxes. Every
command echoes a unique token; the reply must carry exactly that token on stdout and
nothing on stderr. Figures: errors, wrong outputs, throughput (execs/s) and latency.
Baseline: the same commands with the same concurrency through the docker SDK's
exec_run directly (no daemon), on the same containers; the ratio is daemon
throughput / direct throughput.

Usage: python benchmarks/rock_load.py [--clients 64] [--execs 100] [--sandboxes 32]
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid
from collections.abc import Callable

import docker
from _rockbench import daemon, machine, summary

from rock.client import Client, RemoteSandbox

Target = Callable[[int, int, bytes], tuple[bytes, bytes, int]]


def run_load(clients: int, execs: int, target: Target) -> tuple[float, list[float], int, int]:
    """Run the load; return (seconds, latencies, errors, wrong outputs)."""
    latencies: list[float] = []
    errors = [0]
    wrong = [0]
    lock = threading.Lock()
    barrier = threading.Barrier(clients + 1)

    def worker(index: int) -> None:
        mine: list[float] = []
        barrier.wait()
        for n in range(execs):
            token = f"{index}-{n}-{uuid.uuid4().hex}".encode()
            started = time.perf_counter()
            try:
                out, err, code = target(index, n, token)
                if out != token + b"\n" or err or code != 0:
                    with lock:
                        wrong[0] += 1
                        if wrong[0] <= 3:
                            print(
                                f"  wrong: want {token!r}, got {out[:200]!r} {err[:200]!r} {code}"
                            )
            except Exception as exc:
                with lock:
                    errors[0] += 1
                    if errors[0] <= 3:
                        print(f"  error: {type(exc).__name__}: {str(exc)[:300]}")
            mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - started, latencies, errors[0], wrong[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--execs", type=int, default=100)
    parser.add_argument("--sandboxes", type=int, default=32)
    args = parser.parse_args()
    engine = docker.from_env()
    total = args.clients * args.execs
    with daemon() as (client, _):
        boxes = [client.create(memory_mb=256, pids_limit=128) for _ in range(args.sandboxes)]
        containers = [engine.containers.get(b.info.container_id or "") for b in boxes]
        clients = [Client(client.url, client.token, max_connections=2) for _ in range(args.clients)]
        remote = [[RemoteSandbox(c, b.info) for b in boxes] for c in clients]

        def via_daemon(index: int, n: int, token: bytes) -> tuple[bytes, bytes, int]:
            sb = remote[index][(index + n) % len(boxes)]
            result = sb.exec(f"echo {token.decode()}", timeout=120)
            return result.stdout, result.stderr, result.exit_code

        def direct(index: int, n: int, token: bytes) -> tuple[bytes, bytes, int]:
            container = containers[(index + n) % len(containers)]
            code, (out, err) = container.exec_run(
                ["bash", "-c", f"echo {token.decode()}"], demux=True
            )
            return out or b"", err or b"", code

        d_elapsed, d_lat, d_errors, d_wrong = run_load(args.clients, args.execs, via_daemon)
        b_elapsed, b_lat, b_errors, b_wrong = run_load(args.clients, args.execs, direct)
        for c in clients:
            c.close()
        for b in boxes:
            b.delete()
    d_rate, b_rate = total / d_elapsed, total / b_elapsed
    ok = d_errors + d_wrong == 0
    print(f"machine: {machine()}")
    print(
        f"load: {args.clients} clients x {args.execs} execs over {args.sandboxes} sandboxes "
        f"= {total} commands, each echoing a unique token"
    )
    print(
        f"via daemon : {d_errors} errors, {d_wrong} wrong or mixed-up outputs, "
        f"{d_rate:.0f} execs/s, latency {summary(d_lat)}"
    )
    print(
        f"exec_run   : {b_errors} errors, {b_wrong} wrong outputs, "
        f"{b_rate:.0f} execs/s, latency {summary(b_lat)}"
    )
    print(f"goal: zero errors, zero lost or mixed-up outputs ({'met' if ok else 'NOT met'})")
    print(f"RATIO daemon throughput / direct exec_run throughput = {d_rate / b_rate:.2f}x")


if __name__ == "__main__":
    main()
