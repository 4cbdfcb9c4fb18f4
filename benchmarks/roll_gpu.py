"""roll on a GPU: generation tokens/s GPU vs CPU, and update tokens/s in bf16 autocast vs fp32.

Setup on a GPU machine (no internet and no model hub are needed: every model is built here
with random weights). Expected: a Python with torch (a CUDA build) and transformers 5.24 (the
version constraints.txt pins; the HF backend reads the ``cache`` output, which 5.24 has and
5.17 lacks), plus pydantic and pyyaml (roll's configuration); then, from the repository root:

    python -m pip install -e packages/ale-core -e packages/iflow-cli -e packages/roll --no-deps
    python benchmarks/roll_gpu.py

(Without the install the script puts packages/*/src on sys.path itself.) Nothing else is
needed, and the same command runs unchanged on a CPU-only machine.

Where CUDA is available:

1. Generation: the HF backend (``HFBackend.generate``, its own batched decode loop with a KV
   cache) samples 128 new tokens for each of 32 prompts (16-64 random ids) with a tiny Llama
   policy (hidden 256, 4 layers), in float32 on the GPU and on the CPU (the baseline, the
   same prompts; ``--cpu-prompts`` / ``--cpu-new-tokens`` shrink the CPU side if it is slow,
   the rates are per generated token either way), and in bfloat16 weights on the GPU. Figure:
   GPU tokens/s / CPU tokens/s.
2. Update: ``Updater.step`` (micro-batches by token budget, forward, token-level GRPO loss,
   backward, grad clip, AdamW) on 16 multi-turn sequences of ~1000 tokens, for a Qwen2-0.5B-
   shaped model with random weights (hidden 896, intermediate 4864, 24 layers, 14 heads,
   2 KV heads, a 32000-token vocabulary: 0.39B parameters; --vocab 151936 gives Qwen2-0.5B's
   0.49B), master weights in float32, in bf16 autocast and in plain fp32 (the baseline; torch's
   default, no TF32), steps interleaved. Figures: tokens/s, peak memory, bf16 / fp32. One
   more line times IPA's loss (chunk ratio, mismatch mask) against GRPO's in bf16 on the GPU.

Where CUDA is not available, each GPU measurement prints one line saying it was skipped, the
CPU generation still runs (the baseline figure) and the parameters of the update model are
counted on the meta device; the exit status is 0.

Before timing, a numerical check runs one forward/backward of the GRPO and the IPA loss (on
the GPU model in bf16 autocast; without CUDA on the tiny policy on the CPU) and prints that
the losses are finite and the gradients non-zero.

Usage: python benchmarks/roll_gpu.py [--prompts 32] [--new-tokens 128] [--update-steps 3]
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = "skipped: no CUDA device is visible (torch.cuda.is_available() is False)"


def _importable_repo() -> None:
    """Put the repository's packages on sys.path when they are not installed."""
    try:
        import roll  # noqa: F401
    except ImportError:
        for name in ("ale-core", "iflow-cli", "roll"):
            sys.path.insert(0, str(ROOT / "packages" / name / "src"))


def machine() -> str:
    import torch

    cpu = platform.processor() or "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )


def gpu_line() -> str:
    import torch

    props = torch.cuda.get_device_properties(0)
    return (
        f"GPU: {props.name}, {props.total_memory / 2**30:.1f} GiB, CUDA {torch.version.cuda}, "
        f"bf16 {'supported' if torch.cuda.is_bf16_supported() else 'NOT supported'}, "
        f"{torch.cuda.device_count()} visible"
    )


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_bytes(device: str) -> int:
    import torch

    return torch.cuda.max_memory_allocated() if device.startswith("cuda") else 0


def allocated_bytes(device: str) -> int:
    import torch

    return torch.cuda.memory_allocated() if device.startswith("cuda") else 0


def memory_line(device: str) -> str:
    import torch

    if not device.startswith("cuda"):
        return f"memory: not measured on {device}"
    total = torch.cuda.get_device_properties(0).total_memory
    return (
        f"memory: {torch.cuda.memory_allocated() / 2**30:.1f} GiB allocated after the steps "
        f"(weights, grads, 3 AdamW states), {torch.cuda.max_memory_reserved() / 2**30:.1f} GiB "
        f"reserved at most, of {total / 2**30:.1f} GiB"
    )


def amp_dtype(device: str) -> tuple[Any, str]:
    """bfloat16 where the GPU has it (float16 otherwise), and its name."""
    import torch

    if not device.startswith("cuda") or torch.cuda.is_bf16_supported():
        return torch.bfloat16, "bf16"
    return torch.float16, "fp16 (no bf16 on this GPU)"


# -- batches ------------------------------------------------------------------------------------


def multi_turn_batch(
    *, sequences: int, vocab: int, seed: int, chunk: tuple[int, int], prompt: tuple[int, int]
) -> list[Any]:
    """Random multi-turn samples: a prompt, 4-6 policy chunks, observations between them;
    0/1 rewards with both in every group of 4. mu, NaN off the policy's tokens, is about a
    random model's log-prob (-log(vocab), a little noise), 1.0 lower on ~12% of the chunks so
    that IPA's mismatch mask (exp(mean(old - mu)) > 2) drops those."""
    from ale.chunking import chunk_ids
    from roll.algo.batch import Sample

    rng = random.Random(seed)
    samples = []
    for index in range(sequences):
        mask = [False] * rng.randint(*prompt)
        turns = rng.randint(4, 6)
        for k in range(turns):
            mask += [True] * rng.randint(*chunk)
            if k < turns - 1:
                mask += [False] * rng.randint(chunk[0] // 3, chunk[1] // 2)
        ids = [rng.randrange(vocab) for _ in mask]
        chunks = chunk_ids(ids, mask)
        shifted = {c for c in range(turns) if rng.random() < 0.12}
        mu = [
            math.nan
            if c < 0
            else -math.log(vocab) + rng.gauss(0.0, 0.05) - (1.0 if c in shifted else 0.0)
            for c in chunks
        ]
        samples.append(
            Sample(input_ids=ids, rl_mask=mask, chunk_ids=chunks, mu=mu, group=index // 4)
        )
    for start in range(0, sequences, 4):
        group = samples[start : start + 4]
        wins = rng.randint(1, max(1, len(group) - 1))
        for i, sample in enumerate(rng.sample(group, len(group))):
            sample.reward = 1.0 if i < wins else 0.0
    return samples


GRPO = ("grpo", 1.0)
IPA = ("ipa", 0.95)


def specs() -> dict[str, tuple[Any, tuple[str, float]]]:
    from roll.algo.losses import LossSpec

    return {
        "GRPO": (LossSpec(), GRPO),
        "IPA": (LossSpec(loss="ipa", ratio_level="chunk", mismatch_threshold=2.0), IPA),
    }


def prepared(samples: list[Any], estimator: tuple[str, float]) -> list[Any]:
    """A copy of ``samples`` with the estimator's advantages and token-mean weights."""
    from roll.algo.batch import assign_advantages, set_weights

    mine = copy.deepcopy(samples)
    assign_advantages(mine, estimator[0], gamma=estimator[1])  # type: ignore[arg-type]
    set_weights(mine, "token_mean")
    return mine


# -- the numerical check ----------------------------------------------------------------------


def check_losses(
    lm: Any, samples: list[Any], *, pad_id: int, device: str, amp: Any, where: str
) -> None:
    """One forward/backward of each loss on one micro-batch: finite, non-zero gradient."""
    import contextlib

    import torch

    from roll.algo.batch import collate, micro_batches
    from roll.algo.losses import policy_loss
    from roll.models import scored_logprobs

    was_training = lm.training
    lm.train()
    try:
        for name, (spec, estimator) in specs().items():
            batch = micro_batches(prepared(samples, estimator), 4096)[0]
            col = collate(batch, pad_id=pad_id, device=device)
            lm.zero_grad(set_to_none=True)
            autocast = (
                torch.autocast(device_type=device.split(":")[0], dtype=amp)
                if amp is not None
                else contextlib.nullcontext()
            )
            with autocast:
                logp, _ = scored_logprobs(lm, col)
            loss, stats = policy_loss(logp, col.tokens, spec)
            loss.backward()
            norms = [p.grad.float().norm() for p in lm.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0
            value = float(loss.detach())
            ok = math.isfinite(value) and math.isfinite(norm) and norm > 0
            print(
                f"   check {name:<4} ({where}): loss {value:+.5f}, grad norm {norm:.4g}, "
                f"mismatch-masked tokens {int(stats['masked_tokens'])}/{int(col.tokens.rl.sum())}"
                f" -> {'OK (finite, non-zero gradient)' if ok else 'FAILED'}",
                flush=True,
            )
            if not ok:
                raise SystemExit(f"the {name} loss or its gradient is not usable")
    finally:
        lm.zero_grad(set_to_none=True)
        lm.train(was_training)


# -- generation ---------------------------------------------------------------------------------


def generation_rate(
    model: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int, repeats: int
) -> tuple[float, int, float]:
    """Median generated tokens/s of the HF backend over ``repeats`` calls, after a warm-up;
    also the tokens of one call and its median seconds."""
    from roll.generation.base import SamplingParams
    from roll.generation.hf import HFBackend

    backend = HFBackend(model, tokenizer)
    device = str(backend.device)
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=4, seed=1))  # warm-up
    rates, seconds, tokens = [], [], 0
    for rep in range(repeats):
        params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=rep)
        sync(device)
        start = time.perf_counter()
        out = backend.generate(prompts, params)
        sync(device)
        elapsed = time.perf_counter() - start
        tokens = sum(len(g.token_ids) for g in out)
        rates.append(tokens / elapsed)
        seconds.append(elapsed)
    return statistics.median(rates), tokens, statistics.median(seconds)


def generation(args: argparse.Namespace, gpu: str | None) -> tuple[Any, Any]:
    """Part 1 (``gpu``: the CUDA device, None when there is none); returns the tiny policy
    and its tokenizer (for the CPU-only check)."""
    import torch

    from iflow.models.tiny import build_tiny_model
    from roll.models import load_policy

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_model(tmp, hidden_size=args.gen_hidden, layers=args.gen_layers, heads=4)
        lm, tokenizer = load_policy(tmp, device="cpu", dtype="float32")
    rng = random.Random(0)
    vocab = lm.config.vocab_size
    prompts = [
        [rng.randrange(vocab) for _ in range(rng.randint(16, 64))] for _ in range(args.prompts)
    ]
    params = sum(p.numel() for p in lm.parameters())
    print(
        f"\n1. generation, HF backend: tiny Llama (hidden {args.gen_hidden}, {args.gen_layers} "
        f"layers, {params / 1e6:.2f}M params), temperature 1, EOS ends a row early"
    )
    cpu_prompts = prompts[: args.cpu_prompts or args.prompts]
    cpu_new = args.cpu_new_tokens or args.new_tokens
    cpu_rate, cpu_tokens, cpu_s = generation_rate(lm, tokenizer, cpu_prompts, cpu_new, 3)
    shrunk = cpu_new != args.new_tokens or len(cpu_prompts) != len(prompts)
    print(
        f"   CPU  fp32  {len(cpu_prompts)} prompts x {cpu_new} new tokens: {cpu_tokens} tokens "
        f"in {cpu_s:.2f} s -> {cpu_rate:8.0f} tokens/s (baseline"
        f"{', fewer prompts/tokens than the GPU: compare per-token rates' if shrunk else ''})"
    )
    if gpu is None:
        print(f"   GPU  fp32  generation: {SKIPPED}")
        print(f"   GPU  bf16  generation: {SKIPPED}")
        print(f"   ratio GPU / CPU tokens/s: {SKIPPED}")
        return lm, tokenizer
    for label, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        model = copy.deepcopy(lm).to(device=gpu, dtype=dtype)
        rate, tokens, seconds = generation_rate(model, tokenizer, prompts, args.new_tokens, 3)
        print(
            f"   GPU  {label}  {len(prompts)} prompts x {args.new_tokens} new tokens: {tokens} "
            f"tokens in {seconds:.2f} s -> {rate:8.0f} tokens/s  ({rate / cpu_rate:.1f}x CPU)"
        )
        if label == "fp32":
            fp32_rate = rate
        del model
        if gpu.startswith("cuda"):
            torch.cuda.empty_cache()
    print(
        f"   ratio GPU / CPU tokens/s (fp32 both): {fp32_rate / cpu_rate:.1f}x "
        f"({fp32_rate:.0f} vs {cpu_rate:.0f} tokens/s)"
    )
    return lm, tokenizer


# -- the update ---------------------------------------------------------------------------------


def qwen2_config(vocab: int, layers: int = 24) -> Any:
    from transformers import Qwen2Config

    return Qwen2Config(
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=layers,
        num_attention_heads=14,
        num_key_value_heads=2,
        vocab_size=vocab,
        tie_word_embeddings=True,
        max_position_embeddings=4096,
    )


def build_update_model(config: Any, device: str) -> Any:
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM(config)  # float32: the master weights


def update_rates(
    lm: Any,
    samples: list[Any],
    *,
    device: str,
    steps: int,
    micro_batch_tokens: int,
    runs: dict[str, tuple[Any, Any, tuple[str, float]]],
) -> dict[str, dict[str, float]]:
    """Per run (name -> (LossSpec, amp dtype or None, estimator)): median step seconds,
    tokens/s and peak memory, the runs' steps interleaved after one warm-up step each."""
    from roll.config import OptimConfig
    from roll.update import Updater

    updaters, batches = {}, {}
    for name, (spec, amp, estimator) in runs.items():
        updaters[name] = Updater(
            lm,
            OptimConfig(lr=1e-6),
            total_steps=steps + 1,
            spec=spec,
            pad_id=0,
            micro_batch_tokens=micro_batch_tokens,
            max_bad_steps=steps + 1,
            device=device,
            amp_dtype=amp,
        )
        batches[name] = prepared(samples, estimator)
    times: dict[str, list[float]] = {name: [] for name in runs}
    peaks: dict[str, int] = dict.fromkeys(runs, 0)
    extra: dict[str, int] = dict.fromkeys(runs, 0)
    tokens: dict[str, float] = {}
    skipped: dict[str, int] = dict.fromkeys(runs, 0)
    names = list(runs)
    for rep in range(1 + steps):
        for name in names if rep % 2 == 0 else reversed(names):
            reset_peak(device)
            before = allocated_bytes(device)
            sync(device)
            start = time.perf_counter()
            result = updaters[name].step(batches[name])
            sync(device)
            elapsed = time.perf_counter() - start
            skipped[name] += int(result.skipped)
            tokens[name] = result.metrics["train/tokens"]
            if rep:  # the warm-up step also allocates the optimiser's state
                times[name].append(elapsed)
                peaks[name] = max(peaks[name], peak_bytes(device))
                extra[name] = max(extra[name], peak_bytes(device) - before)
    out = {}
    for name in runs:
        median = statistics.median(times[name])
        out[name] = {
            "seconds": median,
            "tokens": tokens[name],
            "tokens_per_s": tokens[name] / median,
            "peak_gib": peaks[name] / 2**30,
            "step_gib": extra[name] / 2**30,
            "skipped": skipped[name],
        }
    return out


def update(args: argparse.Namespace, gpu: str | None, tiny: tuple[Any, Any]) -> None:
    """Part 2 (and the numerical check); ``gpu`` as in :func:`generation`."""
    import torch

    config = qwen2_config(args.vocab, args.update_layers)
    lm = build_update_model(config, gpu or "meta")
    params = sum(p.numel() for p in lm.parameters())
    print(
        f"\n2. update, Updater.step: Qwen2-shaped model, hidden 896, intermediate 4864, "
        f"{args.update_layers} layers, 14 heads / 2 KV heads, vocab {args.vocab}: "
        f"{params:,} parameters ({params / 1e9:.2f}B), random weights (seed 0)"
        + ("" if gpu else ", counted on the meta device")
    )
    samples = multi_turn_batch(
        sequences=args.update_sequences, vocab=args.vocab, seed=0, chunk=(80, 180), prompt=(64, 128)
    )
    lengths = [len(s) for s in samples]
    print(
        f"   batch: {len(samples)} sequences, {sum(lengths)} tokens ({min(lengths)}-"
        f"{max(lengths)} each), {sum(s.rl_tokens for s in samples)} policy tokens; micro-batches "
        f"of <= {args.micro_batch_tokens} tokens; AdamW, grad clip 1.0"
    )
    if gpu is None:
        for line in ("bf16 autocast", "fp32", "ratio bf16 / fp32", "IPA vs GRPO (bf16)"):
            print(f"   GPU update {line}: {SKIPPED}")
        tiny_lm, tokenizer = tiny
        check_losses(
            tiny_lm,
            multi_turn_batch(
                sequences=8, vocab=tiny_lm.config.vocab_size, seed=1, chunk=(20, 40), prompt=(8, 16)
            ),
            pad_id=int(tokenizer.pad_token_id),
            device="cpu",
            amp=None,
            where="CPU, tiny policy, fp32",
        )
        return
    amp, amp_name = amp_dtype(gpu)
    check_losses(lm, samples, pad_id=0, device=gpu, amp=amp, where=f"GPU, {amp_name} autocast")
    grpo, ipa = specs()["GRPO"], specs()["IPA"]
    results = update_rates(
        lm,
        samples,
        device=gpu,
        steps=args.update_steps,
        micro_batch_tokens=args.micro_batch_tokens,
        runs={
            "bf16": (grpo[0], amp, grpo[1]),
            "fp32": (grpo[0], None, grpo[1]),
            "bf16 IPA": (ipa[0], amp, ipa[1]),
        },
    )
    precision = torch.get_float32_matmul_precision()  # "highest": no TF32
    fp32_label = f"fp32 (baseline, {precision})"
    for name, label in (("bf16", f"{amp_name} autocast"), ("fp32", fp32_label)):
        r = results[name]
        print(
            f"   GPU update {label:<26} {r['seconds'] * 1000:8.1f} ms/step "
            f"{r['tokens_per_s']:9.0f} tokens/s  peak memory {r['peak_gib']:5.1f} GiB "
            f"(the step's own +{r['step_gib']:.1f} GiB)"
            + (f"  ({r['skipped']} steps skipped: non-finite)" if r["skipped"] else "")
        )
    bf16, fp32, ipa_r = results["bf16"], results["fp32"], results["bf16 IPA"]
    print(
        f"   GPU update IPA vs GRPO ({amp_name}): {ipa_r['seconds'] * 1000:.1f} vs "
        f"{bf16['seconds'] * 1000:.1f} ms/step -> overhead "
        f"{(ipa_r['seconds'] / bf16['seconds'] - 1) * 100:+.1f}% (goal <= 10%)"
    )
    print(f"   {memory_line(gpu)}")
    print(
        f"   ratio {amp_name} / fp32 update tokens/s: "
        f"{bf16['tokens_per_s'] / fp32['tokens_per_s']:.2f}x "
        f"({bf16['tokens_per_s']:.0f} vs {fp32['tokens_per_s']:.0f} tokens/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--cpu-prompts", type=int, default=0, help="0: as many as the GPU")
    parser.add_argument("--cpu-new-tokens", type=int, default=0, help="0: as many as the GPU")
    parser.add_argument("--gen-hidden", type=int, default=256)
    parser.add_argument("--gen-layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000, help="the update model's vocabulary")
    parser.add_argument("--update-layers", type=int, default=24)
    parser.add_argument("--update-sequences", type=int, default=16)
    parser.add_argument("--update-steps", type=int, default=3, help="timed steps of each run")
    parser.add_argument("--micro-batch-tokens", type=int, default=8192)
    args = parser.parse_args()
    _importable_repo()
    import torch

    gpu = "cuda" if torch.cuda.is_available() else None
    print(machine())
    print(gpu_line() if gpu else "GPU: none visible (torch.cuda.is_available() is False)")
    tiny = generation(args, gpu)
    update(args, gpu, tiny)


if __name__ == "__main__":
    main()
