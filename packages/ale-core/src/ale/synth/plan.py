"""The plan of a synthesis run: which candidate tasks a config generates (family,
difficulty and seed each), fixed by the config alone so a run started again plans the
same candidates."""

from __future__ import annotations

import hashlib
import math
import random

from ale.synth.config import SynthConfig
from ale.synth.family import get_family
from ale.synth.mix import quotas


class Candidate:
    """One planned task: family, difficulty and seed fix everything else."""

    def __init__(self, family: str, category: str, difficulty: str, seed: int, multi: bool):
        self.family, self.category, self.difficulty, self.seed = family, category, difficulty, seed
        self.multi_turn = multi
        self.id = f"{family}-{seed:08x}"

    def attrs(self) -> dict[str, str]:
        return {"family": self.family, "category": self.category, "difficulty": self.difficulty}


def family_shares(config: SynthConfig) -> dict[str, float]:
    """Each family's share of the dataset: declared, else its category's share split
    evenly among the config's families of that category, else even."""
    names = list(config.families)
    if config.mix.family:
        return {n: config.mix.family.get(n, 0.0) for n in names}
    if config.mix.category:
        by_cat: dict[str, list[str]] = {}
        for n in names:
            by_cat.setdefault(get_family(n).category, []).append(n)
        return {
            n: config.mix.category.get(cat, 0.0) / len(members)
            for cat, members in by_cat.items()
            for n in members
        }
    return {n: 1 / len(names) for n in names}


def plan(config: SynthConfig) -> list[Candidate]:
    """The candidates a config generates, in a fixed order (a function of the config)."""
    out: list[Candidate] = []
    seen: set[int] = set()
    for name, share in family_shares(config).items():
        family = get_family(name)
        count = math.ceil(config.target * share * config.oversample) if share > 0 else 0
        spread = (
            config.families[name].difficulty
            or config.mix.difficulty
            or {d: 1 / len(family.difficulties) for d in family.difficulties}
        )
        spread = {d: p for d, p in spread.items() if d in family.difficulties} or {
            d: 1 / len(family.difficulties) for d in family.difficulties
        }
        levels = [d for d, k in quotas(spread, count).items() for _ in range(k)]
        random.Random(f"{config.seed}|{name}|difficulty").shuffle(levels)
        for i, level in enumerate(levels):
            digest = hashlib.sha256(f"{config.seed}|{name}|{i}".encode()).hexdigest()
            seed = int(digest[:8], 16)
            while seed in seen:
                seed = (seed + 1) & 0xFFFFFFFF
            seen.add(seed)
            out.append(Candidate(name, family.category, level, seed, family.multi_turn))
    return out
