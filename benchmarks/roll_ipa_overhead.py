"""The IPA loss's cost over token-level GRPO's on the same multi-turn batch (goal: <= 10%).

One batch of 16 multi-turn sequences (~600 tokens each: a prompt, then 4-6 policy chunks
separated by environment-observation runs; seeded random ids; rewards 0/1 with both in every
group of 4) is trained on by two updaters holding identical copies of a tiny Llama policy:

- baseline, token-level GRPO: ``LossSpec()`` with ``assign_advantages(samples, "grpo")``;
- IPA: ``LossSpec(loss="ipa", ratio_level="chunk", mismatch_threshold=2.0)`` with
  ``assign_advantages(samples, "ipa", gamma=0.95)``;

both with ``token_mean`` aggregation. The sampling log-probs mu are the model's own log-probs
of the batch perturbed by a little noise, with a few chunks shifted far enough that IPA's
mismatch mask drops them (exp(mean(old - mu)) = e > 2), so that path does real work.

Figures, each IPA / GRPO, repetitions interleaved (the order alternating) and medians taken:

- the update step, ``Updater.step`` (micro-batching, collate, forward, loss, backward, grad
  clip, AdamW): the figure of the goal, also given as the fastest of each (on a shared
  machine the median can still move by more than the loss costs);
- the loss alone, ``policy_loss`` forward + backward on fixed log-prob tensors of one collated
  micro-batch (no model): the loss's own cost, which the step's noise would hide; times the
  number of micro-batches, it is the loss's share of the step;
- the batch preparation, ``assign_advantages`` + ``set_weights`` + ``collate`` of every
  micro-batch (``Updater.step`` collates again inside the step; this line shows that part and
  the estimators' cost on their own).

Everything runs on one torch thread unless ``--threads`` says otherwise: on a shared machine
a parallel op waits for its slowest thread, and a second thread whose core a neighbour holds
turns into stalls of milliseconds (here, on 2 busy cores: steps of 2-15 s with 2 threads, of
3.7-7.4 s with one), which would time the neighbours rather than the loss.

A numerical check (not timed) first runs one forward/backward of each loss and prints that
the loss is finite and the gradient non-zero, and how many tokens the mismatch mask dropped.

Usage: .venv/bin/python benchmarks/roll_ipa_overhead.py [--steps 6] [--hidden 256] [--layers 4]
       [--threads 1] [--json]
(--json: the results as one JSON object on stdout, the report on stderr)
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from _rockbench import machine

from ale.chunking import chunk_ids
from iflow.models.tiny import build_tiny_model
from roll.algo.batch import Sample, assign_advantages, collate, micro_batches, set_weights
from roll.algo.losses import LossSpec, policy_loss
from roll.config import OptimConfig
from roll.models import load_policy, scored_logprobs
from roll.update import Updater, scored_logprobs_of


@dataclass(frozen=True)
class Mode:
    """One way to train on the batch: an advantage estimator and a loss."""

    name: str
    estimator: str
    gamma: float
    spec: LossSpec


GRPO = Mode("token-level GRPO", "grpo", 1.0, LossSpec())
IPA = Mode("IPA", "ipa", 0.95, LossSpec(loss="ipa", ratio_level="chunk", mismatch_threshold=2.0))
MISMATCH_SHIFT = 1.0
"""How far below the model's log-prob a mismatched chunk's mu is (exp(1.0) = 2.7 > 2)."""


def build_batch(
    lm: Any, *, sequences: int, vocab: int, pad_id: int, budget: int, seed: int
) -> list[Sample]:
    """The multi-turn batch, with mu taken from ``lm`` (perturbed; a few chunks mismatched)."""
    rng = random.Random(seed)
    samples = []
    for index in range(sequences):
        mask = [False] * rng.randint(40, 80)  # the prompt
        chunks = rng.randint(4, 6)
        for k in range(chunks):
            mask += [True] * rng.randint(50, 110)  # the policy's turn
            if k < chunks - 1:
                mask += [False] * rng.randint(20, 60)  # the environment's observation
        ids = [rng.randrange(vocab) for _ in mask]
        samples.append(
            Sample(input_ids=ids, rl_mask=mask, chunk_ids=chunk_ids(ids, mask), group=index // 4)
        )
    for start in range(0, sequences, 4):  # 0/1 rewards with both in every group of 4
        group = samples[start : start + 4]
        wins = rng.randint(1, max(1, len(group) - 1))
        for i, sample in enumerate(rng.sample(group, len(group))):
            sample.reward = 1.0 if i < wins else 0.0
    model_logp = scored_logprobs_of(lm, samples, pad_id, budget, "cpu")
    for sample, logp in zip(samples, model_logp, strict=True):
        shifted = {c for c in set(sample.chunk_ids) if c >= 0 and rng.random() < 0.12}
        sample.mu = [
            math.nan
            if c < 0
            else lp + rng.gauss(0.0, 0.02) - (MISMATCH_SHIFT if c in shifted else 0.0)
            for lp, c in zip(logp, sample.chunk_ids, strict=True)
        ]
    return samples


def prepare(samples: list[Sample], mode: Mode, *, pad_id: int, budget: int) -> list[Any]:
    """What precedes a step: advantages, aggregation weights, and the collated micro-batches."""
    assign_advantages(samples, mode.estimator, gamma=mode.gamma)  # type: ignore[arg-type]
    set_weights(samples, "token_mean")
    return [collate(batch, pad_id=pad_id) for batch in micro_batches(samples, budget)]


def check(lm: Any, samples: list[Sample], *, pad_id: int, budget: int) -> list[str]:
    """One forward/backward of each loss on the first micro-batch: finite, non-zero gradient."""
    lines = []
    for mode in (GRPO, IPA):
        model = copy.deepcopy(lm).train()
        col = prepare(samples, mode, pad_id=pad_id, budget=budget)[0]
        logp, _ = scored_logprobs(model, col)
        loss, stats = policy_loss(logp, col.tokens, mode.spec)
        loss.backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        norm = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
        value = float(loss.detach())
        ok = math.isfinite(value) and math.isfinite(norm) and norm > 0
        lines.append(
            f"check {mode.name:<17} loss {value:+.5f}  grad norm {norm:.4g}  "
            f"mismatch-masked tokens {int(stats['masked_tokens'])}/{int(col.tokens.rl.sum())}  "
            f"-> {'OK (finite, non-zero gradient)' if ok else 'FAILED'}"
        )
        if not ok:
            raise SystemExit("\n".join(lines))
    return lines


def interleaved(
    runs: dict[str, Callable[[], None]], repeats: int, warmup: int = 1
) -> dict[str, list[float]]:
    """Seconds per call of each run, repetitions interleaved, the order alternating."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(warmup + repeats):
        for name in names if rep % 2 == 0 else reversed(names):
            start = time.perf_counter()
            runs[name]()
            elapsed = time.perf_counter() - start
            if rep >= warmup:
                times[name].append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="timed update steps of each loss")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--micro-batch-tokens", type=int, default=4096)
    parser.add_argument("--loss-repeats", type=int, default=200)
    parser.add_argument("--prep-repeats", type=int, default=10)
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (0: torch's default); see the module docstring",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    out = sys.stderr if args.json else sys.stdout

    def say(line: str = "") -> None:
        print(line, file=out, flush=True)

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    say(f"{machine()}, torch {torch.__version__}, {threads} thread{'s' if threads > 1 else ''}")
    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(tmp, hidden_size=args.hidden, layers=args.layers, heads=4)
        lm, tokenizer = load_policy(tmp, device="cpu", dtype="float32")
    pad_id = int(tokenizer.pad_token_id)
    budget = args.micro_batch_tokens
    samples = build_batch(
        lm,
        sequences=args.sequences,
        vocab=lm.config.vocab_size,
        pad_id=pad_id,
        budget=budget,
        seed=0,
    )
    params = sum(p.numel() for p in lm.parameters())
    lengths = [len(s) for s in samples]
    chunks = sum(s.num_chunks for s in samples)
    say(
        f"policy: Llama, hidden {args.hidden}, {args.layers} layers, {params / 1e6:.2f}M params; "
        f"batch: {len(samples)} sequences, {sum(lengths)} tokens ({min(lengths)}-{max(lengths)} "
        f"each), {sum(s.rl_tokens for s in samples)} policy tokens in {chunks} chunks, "
        f"{len(micro_batches(samples, budget))} micro-batches of <= {budget} tokens"
    )
    for line in check(lm, samples, pad_id=pad_id, budget=budget):
        say(line)

    # the batch preparation
    prep = interleaved(
        {
            mode.name: lambda mode=mode: prepare(samples, mode, pad_id=pad_id, budget=budget)
            for mode in (GRPO, IPA)
        },
        args.prep_repeats,
    )

    # the loss alone, on the first micro-batch's fixed log-probs (one copy of the batch per mode)
    fixed: dict[str, tuple[torch.Tensor, Any]] = {}
    for mode in (GRPO, IPA):
        mine = copy.deepcopy(samples)
        col = prepare(mine, mode, pad_id=pad_id, budget=budget)[0]
        with torch.no_grad():
            logp, _ = scored_logprobs(lm, col)
        fixed[mode.name] = (logp, col.tokens)

    def loss_only(mode: Mode) -> None:
        logp, tokens = fixed[mode.name]
        leaf = logp.clone().requires_grad_(True)
        loss, _ = policy_loss(leaf, tokens, mode.spec)
        loss.backward()

    loss = interleaved(
        {mode.name: lambda mode=mode: loss_only(mode) for mode in (GRPO, IPA)},
        args.loss_repeats,
        warmup=10,
    )

    # the update step: each mode its own copy of the policy, its own optimiser and batch
    updaters, batches = {}, {}
    for mode in (GRPO, IPA):
        batches[mode.name] = mine = copy.deepcopy(samples)
        assign_advantages(mine, mode.estimator, gamma=mode.gamma)  # type: ignore[arg-type]
        set_weights(mine, "token_mean")
        updaters[mode.name] = Updater(
            copy.deepcopy(lm),
            OptimConfig(lr=1e-5),
            total_steps=args.steps + 1,
            spec=mode.spec,
            pad_id=pad_id,
            micro_batch_tokens=budget,
            max_bad_steps=1,
        )
    results: dict[str, Any] = {}

    def step(name: str) -> None:
        result = updaters[name].step(batches[name])
        if result.skipped:
            raise SystemExit(f"{name}: the update was skipped (non-finite): {result.metrics}")
        results[name] = result.metrics

    steps = interleaved(
        {mode.name: lambda n=mode.name: step(n) for mode in (GRPO, IPA)}, args.steps
    )

    rows = [
        ("update step (Updater.step)", steps),
        ("loss alone (policy_loss fwd+bwd)", loss),
        ("batch prep (adv+weights+collate)", prep),
    ]
    say()
    say(f"{'medians, repetitions interleaved':<34} {'GRPO':>11} {'IPA':>11} {'IPA/GRPO':>9}  n")
    figures: dict[str, Any] = {}
    for label, times in rows:
        base = statistics.median(times[GRPO.name]) * 1000
        ipa = statistics.median(times[IPA.name]) * 1000
        say(f"{label:<34} {base:8.2f} ms {ipa:8.2f} ms {ipa / base:8.3f}x  {len(times[IPA.name])}")
        figures[label.split(" (")[0].replace(" ", "_")] = {
            "grpo_ms": base,
            "ipa_ms": ipa,
            "ratio": ipa / base,
            "grpo_all_ms": [t * 1000 for t in times[GRPO.name]],
            "ipa_all_ms": [t * 1000 for t in times[IPA.name]],
        }
    step_fig, loss_fig = figures["update_step"], figures["loss_alone"]
    fastest = {name: min(times) * 1000 for name, times in steps.items()}
    slowest = {name: max(times) * 1000 for name, times in steps.items()}
    parts = len(micro_batches(samples, budget))
    share = (loss_fig["ipa_ms"] - loss_fig["grpo_ms"]) * parts
    say(
        f"update step: fastest GRPO {fastest[GRPO.name]:.0f} ms, IPA {fastest[IPA.name]:.0f} ms "
        f"({fastest[IPA.name] / fastest[GRPO.name]:.3f}x); slowest GRPO "
        f"{slowest[GRPO.name]:.0f} ms, IPA {slowest[IPA.name]:.0f} ms (a shared machine's noise)"
    )
    say(
        f"the loss's own share of the step: (IPA - GRPO loss alone) x {parts} micro-batches = "
        f"{share:.2f} ms = {share / step_fig['grpo_ms'] * 100:.3f}% of the GRPO step"
    )
    say(
        f"IPA step's mismatch-masked tokens: {results[IPA.name]['train/masked_tokens']:.0f} of "
        f"{sum(s.rl_tokens for s in samples)}"
    )
    overhead = (step_fig["ratio"] - 1.0) * 100
    say(
        f"IPA update step: {step_fig['ipa_ms']:.1f} ms vs token-level GRPO: "
        f"{step_fig['grpo_ms']:.1f} ms -> overhead {overhead:+.1f}% (goal <= 10%)"
    )
    if args.json:
        record = {
            "machine": machine(),
            "hidden": args.hidden,
            "layers": args.layers,
            "threads": threads,
            "params": params,
            "tokens": sum(lengths),
            "policy_tokens": sum(s.rl_tokens for s in samples),
            "chunks": chunks,
            "micro_batches": parts,
            "figures": figures,
            "loss_share_pct": share / step_fig["grpo_ms"] * 100,
            "overhead_pct": overhead,
            "goal_pct": 10.0,
        }
        print(json.dumps(record))


if __name__ == "__main__":
    main()
