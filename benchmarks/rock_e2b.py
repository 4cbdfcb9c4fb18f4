"""An exec round trip through the official e2b SDK against the daemon's E2B API, against
rock's own client (the baseline), in the same sandbox, interleaved.

A private ``rock serve`` on loopback; one sandbox made by rock's client and reached by the
SDK with ``Sandbox.connect`` (E2B_API_URL and E2B_SANDBOX_URL the daemon's URL). The SDK
wraps every command in ``/bin/bash -l -c`` and streams its output over Connect; rock's
client runs ``true`` as given and gets the result in one JSON answer. A third row runs the
SDK's own command line (``/bin/bash -l -c true``) through rock's client, to part the
protocol's cost from the login shell's.

Then sandbox creation: ``Sandbox.create(template=ALIAS)`` from a template the SDK built on
the daemon (``Template().from_image("rock/base:bookworm")`` with a RUN step, built once), and
killed, against rock's own ``client.create(image=…)`` of the same image and delete (the
baseline), interleaved, ``--creates`` each.

Usage: python benchmarks/rock_e2b.py [--n 100] [--creates 20]
"""

from __future__ import annotations

import argparse
import os
import time

from _rockbench import daemon, machine, summary

from rock.client import Client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100)
    parser.add_argument("--creates", type=int, default=20)
    args = parser.parse_args()
    print(machine())
    with daemon() as (client, _):
        os.environ.update(
            E2B_API_URL=client.url, E2B_SANDBOX_URL=client.url, E2B_API_KEY=client.token or ""
        )
        from e2b import Sandbox

        sandbox = client.create()
        try:
            e2b = Sandbox.connect(sandbox.id)
            rows: dict[str, list[float]] = {"rock": [], "e2b": [], "rock-login": []}
            runs = {
                "rock": lambda: sandbox.exec("true"),
                "e2b": lambda: e2b.commands.run("true"),
                "rock-login": lambda: sandbox.exec(["/bin/bash", "-l", "-c", "true"]),
            }
            for run in runs.values():
                for _ in range(5):
                    run()  # warm
            for _ in range(args.n):
                for name, run in runs.items():
                    started = time.perf_counter()
                    run()
                    rows[name].append(time.perf_counter() - started)
        finally:
            sandbox.delete()
        made = creates(client, args.creates)
    base = sorted(rows["rock"])[len(rows["rock"]) // 2]
    labels = {
        "rock": "rock client, `true` (baseline)",
        "e2b": "e2b SDK commands.run, `true`",
        "rock-login": "rock client, `/bin/bash -l -c true`",
    }
    for name, label in labels.items():
        p50 = sorted(rows[name])[len(rows[name]) // 2]
        print(f"{label:<38} {summary(rows[name])}   {p50 / base:5.2f}x")
    base = sorted(made["rock"])[len(made["rock"]) // 2]
    labels = {
        "rock": "rock client create + delete (baseline)",
        "e2b": "e2b Sandbox.create(template) + kill",
    }
    for name, label in labels.items():
        p50 = sorted(made[name])[len(made[name]) // 2]
        print(f"{label:<38} {summary(made[name])}   {p50 / base:5.2f}x")


def creates(client: Client, n: int) -> dict[str, list[float]]:
    """Create and remove a sandbox from a template the SDK built, and with rock's client."""
    from e2b import Sandbox, Template

    template = Template().from_image("rock/base:bookworm").run_cmd("echo built > /opt/mark")
    info = Template.build(template, name="bench-e2b-create:v1")
    image = f"rock-e2b-template/bench-e2b-create:{info.build_id}"
    made: dict[str, list[float]] = {"rock": [], "e2b": []}

    def rock_create() -> None:
        client.create(image=image, use_pools=False).delete()

    def e2b_create() -> None:
        Sandbox.create(template="bench-e2b-create:v1").kill()

    runs = {"rock": rock_create, "e2b": e2b_create}
    for run in runs.values():
        run()  # warm
    for _ in range(n):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            made[name].append(time.perf_counter() - started)
    return made


if __name__ == "__main__":
    main()
