"""Check one family end to end on Docker: oracle passes, nop fails, expert passes."""

import asyncio
import sys
import tempfile
from pathlib import Path

from ale.synth.expert import ExpertAgent, ExpertRun
from ale.synth.family import draft_for, get_family
from ale.synth.render import render_task
from ale.task import load_task
from rock.backends.docker import DockerBackend
from rock.bench.agents import NopAgent, OracleAgent
from rock.bench.images import ImageBuilder
from rock.episode_runner import FreshSandboxes, PoolRunner


async def main(family, seeds, mistake):
    backend = DockerBackend()
    runner = PoolRunner(FreshSandboxes(backend))
    fam = get_family(family)
    ok = True
    for seed in seeds:
        for diff in fam.difficulties:
            d = draft_for(family, seed, diff)
            dest = Path(tempfile.mkdtemp()) / f"{family}-{seed}-{diff}"
            render_task(d, dest, family=family, category=fam.category, difficulty=diff, seed=seed)
            task = load_task(dest)
            o = await runner.episode(task, OracleAgent(task))
            n = await runner.episode(task, NopAgent())
            e = await runner.episode(
                task, ExpertAgent(ExpertRun(d.expert(), mistake=mistake, mistakes=d.mistakes))
            )
            good = o.passed and not n.passed and n.error is None and e.passed
            ok &= good
            print(
                f"{'OK ' if good else 'BAD'} {family} seed={seed} {diff}: oracle={o.reward} {o.error or ''} nop={n.reward} {n.error or ''} expert={e.reward} {e.error or ''}"
            )
            if not good:
                print("  task dir:", dest)
                if e.trajectory:
                    for s in e.trajectory.steps[-6:]:
                        print(
                            "   ",
                            s.role,
                            (s.content or "")[:200],
                            [c.arguments for c in s.tool_calls],
                            [r.content[:300] for r in s.tool_results],
                        )
                if o.trajectory and not o.passed:
                    print(
                        "   oracle verifier:",
                        o.trajectory.verifier.stdout[-1500:] if o.trajectory.verifier else None,
                    )
    return ok


if __name__ == "__main__":
    fam = sys.argv[1]
    seeds = [int(s) for s in (sys.argv[2].split(",") if len(sys.argv) > 2 else ["1", "2"])]
    mistake = "--mistake" in sys.argv
    import docker

    ImageBuilder(docker.from_env()).ensure_base("rock/bench-base:bookworm")
    sys.exit(0 if asyncio.run(main(fam, seeds, mistake)) else 1)
