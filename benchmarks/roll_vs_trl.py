"""roll's GRPO policy update against TRL's GRPOTrainer: training tokens per second on CPU.

Both sides train their own copy of the same tiny model (one directory written by
`iflow.models.tiny.build_tiny_model`, loaded twice in float32) on the same fixed batch:
P prompts x G completions of random token ids (no EOS inside, no padding), fixed 0/1
rewards with both values in every group, and the same GRPO advantages (roll's
`assign_advantages(..., "grpo")`, handed to TRL as they are). Generation is left out of
both: TRL's `_generate_and_score_completions` is replaced by one that returns the prepared
batch, so what runs is TRL's own loop: `training_step` (its `compute_loss`, backward),
gradient clipping, the optimizer and scheduler steps. Before any figure, the first updates
(same weights, same batch) must give the same gradient norm on both sides, and both
models' parameters must have moved.

Matched: TRL's default `loss_type="dapo"` (PPO clip 0.2 per token, summed over the
completion tokens of the whole batch / their count) against roll's `token_mean`
aggregation with `LossSpec()` (token-level PPO clip 0.2); beta 0 (no reference model);
one iteration per batch (old log-probs = current ones, detached); AdamW (plain
`torch.optim.AdamW` on both sides: TRL's `optim="adamw_torch"` rather than its fused
default), lr 1e-6, constant schedule, no weight decay, gradient norm clipped to 1.0;
activation checkpointing off (TRL's default is on); float32 (TRL's default is bf16
autocast: `--bf16` puts both sides under it); the same micro-batching (by default the
whole batch in one forward/backward; `--micro-batch` sequences per forward otherwise, as
TRL's per-device batch with gradient accumulation and roll's token budget).
Not matched, as it is part of TRL: it always computes the entropy of every scored token
(for its metrics) and gathers clip ratios each step.

roll runs with its default `run.share_prefix`: the prompt the G completions of a group share
goes through the model once (its key/value cache, with gradient, is expanded to the G rows),
the same gradient with less work; `--no-share-prefix` turns it off to compare like for like.

Timed: one optimizer update. roll: `Updater.step(samples)` (collate, forward, loss,
backward, clipping, non-finite check, AdamW). TRL: from its `on_step_begin` to its
`on_step_end` callback (`training_step` with the batch hand-off, clipping, AdamW,
scheduler, `zero_grad`); its logging after `on_step_end` is not timed. The two alternate
update by update (a roll update runs inside TRL's `on_step_begin`, before TRL's clock
starts), so both see the same state of this shared machine; the first `--warmup` updates
of each are dropped (the first AdamW steps take seconds) and medians reported, with the
median of the paired per-update ratios as a second, noise-robust estimate.
Figure: tokens/s of the policy update = prompt + completion tokens of the batch per
second of update wall time, the same count for both. Baseline: TRL. Goal: roll >= 1.5x.

TRL is not a project dependency: `.venv/bin/pip install trl==1.16.0` first.

Usage: .venv/bin/python benchmarks/roll_vs_trl.py [--steps 20] [--warmup 3] [--hidden 256]
    [--layers 4] [--prompts 4] [--generations 4] [--prompt-len 64] [--completion-len 128]
    [--micro-batch 0] [--threads 0] [--bf16] [--no-share-prefix] [--json]
    (--json: the results as one JSON object on stdout, the report on stderr)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from _rockbench import machine
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback

from ale.chunking import chunk_ids
from iflow.models.local import quiet_progress
from iflow.models.tiny import build_tiny_model
from roll.algo.batch import Sample, assign_advantages, set_weights
from roll.algo.losses import LossSpec
from roll.config import OptimConfig
from roll.update import Updater

TRL_VERSION = "1.16.0"
"""The TRL release this benchmark was written and run against."""


@dataclass(frozen=True)
class Batch:
    """The fixed training batch both sides see: row i is prompt ``i // G``'s i-th completion."""

    prompt_ids: torch.Tensor
    """(P*G, prompt_len) long."""
    completion_ids: torch.Tensor
    """(P*G, completion_len) long."""
    rewards: list[float]
    groups: list[int]

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens of the batch: what one update processes."""
        return self.prompt_ids.numel() + self.completion_ids.numel()


def make_batch(args: argparse.Namespace, tokenizer: Any) -> Batch:
    """Random ids (no special tokens, so no EOS inside) and 0/1 rewards with both in each group."""
    gen = torch.Generator().manual_seed(0)
    special = set(tokenizer.all_special_ids)
    allowed = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    rows = args.prompts * args.generations

    def draw(shape: tuple[int, ...]) -> torch.Tensor:
        return allowed[torch.randint(len(allowed), shape, generator=gen)]

    prompts = draw((args.prompts, args.prompt_len)).repeat_interleave(args.generations, dim=0)
    completions = draw((rows, args.completion_len))
    rewards: list[float] = []
    for _ in range(args.prompts):
        ones = int(torch.randint(1, args.generations, (1,), generator=gen))
        group = torch.zeros(args.generations)
        group[:ones] = 1.0
        rewards += group[torch.randperm(args.generations, generator=gen)].tolist()
    groups = [i // args.generations for i in range(rows)]
    return Batch(prompts, completions, rewards, groups)


def roll_samples(batch: Batch) -> list[Sample]:
    """The batch as roll samples: RL loss on the completion, GRPO advantages, token-mean weights."""
    samples = []
    for prompt, completion, reward, group in zip(
        batch.prompt_ids.tolist(),
        batch.completion_ids.tolist(),
        batch.rewards,
        batch.groups,
        strict=True,
    ):
        ids = prompt + completion
        mask = [False] * len(prompt) + [True] * len(completion)
        samples.append(
            Sample(
                input_ids=ids,
                rl_mask=mask,
                chunk_ids=chunk_ids(ids, mask),
                mu=[math.nan] * len(ids),
                reward=reward,
                group=group,
            )
        )
    assign_advantages(samples, "grpo")
    set_weights(samples, "token_mean")  # TRL's default loss_type "dapo"
    return samples


def load(model_dir: Path) -> Any:
    with quiet_progress():
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


class Alternate(TrainerCallback):
    """Times TRL's optimizer steps and runs one timed roll update before each of them."""

    def __init__(self, roll_update: Any) -> None:
        self.roll_update = roll_update
        self.roll: list[float] = []
        self.trl: list[float] = []
        self.roll_grad_norms: list[float] = []
        self.trl_grad_norms: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        start = time.perf_counter()
        result = self.roll_update()
        self.roll.append(time.perf_counter() - start)
        if result.skipped:
            raise RuntimeError("roll skipped an update (non-finite loss or gradient)")
        self.roll_grad_norms.append(result.metrics["train/grad_norm"])
        self._start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.trl.append(time.perf_counter() - self._start)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "grad_norm" in logs:
            self.trl_grad_norms.append(float(logs["grad_norm"]))


def trl_trainer(
    trl: Any, model: Any, tokenizer: Any, batch: Batch, advantages: torch.Tensor, **config: Any
) -> Any:
    """A real GRPOTrainer whose generate-and-score step hands back ``batch`` as generated."""
    from datasets import Dataset

    rows = batch.prompt_ids.shape[0]
    prompts = Dataset.from_dict(
        {"prompt": [f"prompt {i}" for i in range(rows // config["num_generations"])]}
    )
    rewards = batch.rewards

    def reward(completions: list[Any], **kwargs: Any) -> list[float]:
        return rewards[: len(completions)]  # never called: generation is replaced below

    trainer = trl.GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=trl.GRPOConfig(**config),
        train_dataset=prompts,
        processing_class=tokenizer,
    )
    generated = {
        "prompt_ids": batch.prompt_ids,
        "prompt_mask": torch.ones_like(batch.prompt_ids),
        "completion_ids": batch.completion_ids,
        "completion_mask": torch.ones_like(batch.completion_ids),
        "advantages": advantages,
        "num_items_in_batch": torch.tensor(batch.completion_ids.numel()),
    }

    def generate_and_score(inputs: list[dict[str, Any]]) -> dict[str, Any]:
        return dict(generated)

    trainer._generate_and_score_completions = generate_and_score
    return trainer


def snapshot(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def changed(model: torch.nn.Module, before: list[torch.Tensor]) -> bool:
    return any(not torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


def run(args: argparse.Namespace, trl: Any, tmp: Path) -> dict[str, Any]:
    model_dir = build_tiny_model(
        tmp / "model",
        seed=0,
        vocab_size=512,
        hidden_size=args.hidden,
        layers=args.layers,
        heads=4,
        max_position_embeddings=max(2048, args.prompt_len + args.completion_len),
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = make_batch(args, tokenizer)
    samples = roll_samples(batch)
    advantages = torch.tensor([s.advantages[-1] for s in samples])
    rows = len(samples)
    micro = args.micro_batch or rows
    if rows % micro:
        raise SystemExit(f"--micro-batch ({micro}) must divide prompts x generations ({rows})")
    if micro % args.generations and args.generations % micro:
        raise SystemExit("--micro-batch must be a multiple or a divisor of --generations (TRL)")
    total = args.warmup + args.steps

    roll_model, trl_model = load(model_dir), load(model_dir)
    updater = Updater(
        roll_model,
        OptimConfig(lr=1e-6, max_grad_norm=1.0),
        total_steps=total,
        spec=LossSpec(),
        pad_id=tokenizer.pad_token_id,
        micro_batch_tokens=micro * (args.prompt_len + args.completion_len),
        max_bad_steps=5,
        amp_dtype=torch.bfloat16 if args.bf16 else None,
        share_prefix=not args.no_share_prefix,
    )
    trainer = trl_trainer(
        trl,
        trl_model,
        tokenizer,
        batch,
        advantages,
        output_dir=str(tmp / "trl"),
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=rows // micro,
        num_generations=args.generations,
        max_completion_length=args.completion_len,
        num_iterations=1,
        beta=0.0,
        loss_type="dapo",
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        optim="adamw_torch",
        max_grad_norm=1.0,
        activation_checkpointing=False,
        bf16=args.bf16,
        use_cpu=True,
        max_steps=total,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=0,
    )
    clock = Alternate(lambda: updater.step(samples))
    trainer.add_callback(clock)
    trainer.remove_callback(PrinterCallback)  # log lines; Alternate.on_log still sees them
    roll_before, trl_before = snapshot(roll_model), snapshot(trl_model)
    trainer.train()
    if not (changed(roll_model, roll_before) and changed(trl_model, trl_before)):
        raise RuntimeError("an update left the parameters unchanged: no gradient reached them")

    def side(times: list[float]) -> dict[str, Any]:
        kept = times[args.warmup :]
        median = statistics.median(kept)
        return {
            "step_s_median": median,
            "step_s_min": min(kept),
            "step_s_max": max(kept),
            "tokens_per_s": batch.tokens / median,
            "steps": len(kept),
        }

    grads = {"roll": clock.roll_grad_norms[0], "trl": clock.trl_grad_norms[0]}
    if not math.isclose(grads["roll"], grads["trl"], rel_tol=2e-2 if args.bf16 else 1e-3):
        raise RuntimeError(
            f"the first updates differ (gradient norm roll {grads['roll']}, TRL {grads['trl']}): "
            "the two sides are not computing the same loss, so their speeds do not compare"
        )
    roll_side, trl_side = side(clock.roll), side(clock.trl)
    per_step_ratio = [t / r for r, t in zip(clock.roll, clock.trl, strict=True)][args.warmup :]
    return {
        "machine": f"{machine()}, torch threads {torch.get_num_threads()}",
        "precision": "bfloat16 autocast" if args.bf16 else "float32",
        "versions": {"torch": torch.__version__, "trl": trl.__version__},
        "model": {
            "hidden": args.hidden,
            "layers": args.layers,
            "parameters": sum(p.numel() for p in roll_model.parameters()),
        },
        "batch": {
            "prompts": args.prompts,
            "generations": args.generations,
            "prompt_len": args.prompt_len,
            "completion_len": args.completion_len,
            "micro_batch": micro,
            "tokens_per_step": batch.tokens,
        },
        "roll": roll_side,
        "trl": trl_side,
        "ratio": roll_side["tokens_per_s"] / trl_side["tokens_per_s"],
        "ratio_of_paired_steps_median": statistics.median(per_step_ratio),
        "first_step_grad_norm": grads,
    }


def report(result: dict[str, Any], out: TextIO) -> None:
    b, m = result["batch"], result["model"]
    print(result["machine"], file=out)
    print(
        f"model: hidden {m['hidden']}, layers {m['layers']}, {m['parameters'] / 1e6:.2f}M params; "
        f"batch: {b['prompts']} prompts x {b['generations']} completions, "
        f"{b['prompt_len']}+{b['completion_len']} tokens = {b['tokens_per_step']} tokens/update, "
        f"{b['micro_batch']} sequences per forward, {result['precision']}",
        file=out,
    )
    grads = result["first_step_grad_norm"]
    print(
        f"first-update gradient norm (same weights, same batch): roll {grads['roll']:.6f}, TRL {grads['trl']:.6f}",
        file=out,
    )
    print(f"{'':<22}{'median s/update':>16}{'min':>9}{'max':>9}{'tokens/s':>11}", file=out)
    for label, key in (
        ("roll GRPO", "roll"),
        (f"TRL {result['versions']['trl']} GRPOTrainer", "trl"),
    ):
        s = result[key]
        print(
            f"{label:<22}{s['step_s_median']:>16.3f}{s['step_s_min']:>9.3f}{s['step_s_max']:>9.3f}"
            f"{s['tokens_per_s']:>11.0f}",
            file=out,
        )
    paired = result["ratio_of_paired_steps_median"]
    print(f"median of the paired per-update ratios (TRL time / roll time): {paired:.2f}x", file=out)
    if abs(paired / result["ratio"] - 1) > 0.1:
        print(
            "the two estimates of the ratio disagree by over 10%: the machine was busy; rerun with "
            "more --steps, or --threads 1 (threads that wait on each other suffer most)",
            file=out,
        )
    print(
        f"roll GRPO update: {result['roll']['tokens_per_s']:.0f} tok/s; TRL GRPOTrainer update: "
        f"{result['trl']['tokens_per_s']:.0f} tok/s; ratio roll/TRL = {result['ratio']:.2f}x (goal >= 1.5x)",
        file=out,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="timed updates per side")
    parser.add_argument(
        "--no-share-prefix",
        action="store_true",
        help="run each sequence's prompt separately on roll's side too (roll's default, "
        "run.share_prefix, runs a group's shared prompt once)",
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates per side first")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--completion-len", type=int, default=128)
    parser.add_argument(
        "--micro-batch",
        type=int,
        default=0,
        help="sequences per forward/backward (0: the whole batch)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="torch threads (0: torch's default, one per core)"
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="both sides under bfloat16 autocast (TRL's bf16=True, roll's amp_dtype)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="the results as one JSON object on stdout (the report goes to stderr)",
    )
    args = parser.parse_args()
    if args.generations < 2:
        parser.error("--generations must be at least 2 (a group needs both rewards)")
    try:
        import trl
    except ImportError:
        print(f"TRL is not installed; run `.venv/bin/pip install trl=={TRL_VERSION}` first.")
        sys.exit(2)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, trl, Path(tmp))
    report(result, sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
