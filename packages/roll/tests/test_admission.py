"""Held verifiers (roll.agentic.admission): which groups of a short round run their verifiers."""

from __future__ import annotations

import asyncio

import pytest

from roll.agentic.admission import Admission, EpisodeGate


async def _arrive(hold: EpisodeGate) -> str:
    await hold()
    return "verified"


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.asyncio
async def test_groups_are_admitted_in_the_order_they_finish_acting_up_to_keep() -> None:
    cut: list[int] = []
    admission = Admission(1, lambda: cut.append(1))
    first, second = admission.group(2), admission.group(2)
    a = [first.episode(), first.episode()]
    b = [second.episode(), second.episode()]
    waiting = [asyncio.ensure_future(_arrive(b[0])), asyncio.ensure_future(_arrive(a[0]))]
    await _settle()
    assert not any(w.done() for w in waiting)  # neither group is done acting yet
    waiting.append(asyncio.ensure_future(_arrive(a[1])))  # the first group is ready first
    await _settle()
    assert waiting[1].done() and waiting[2].done()
    assert first.admitted and admission.live == 1
    waiting.append(asyncio.ensure_future(_arrive(b[1])))  # the second is ready: keep is full
    await _settle()
    assert not waiting[0].done() and not waiting[3].done() and not second.admitted
    for w in (waiting[0], waiting[3]):  # the round is over: the held group is cut
        w.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)
    assert len(cut) == 2  # two episodes cut before their verifier


@pytest.mark.asyncio
async def test_an_admitted_group_that_fails_whole_frees_its_place() -> None:
    admission = Admission(1, lambda: None)
    first, second = admission.group(1), admission.group(1)
    one, two = first.episode(), second.episode()
    assert await _arrive(one) == "verified"
    held = asyncio.ensure_future(_arrive(two))
    await _settle()
    assert not held.done()
    admission.failed(first)  # every episode of the first failed for infrastructure reasons
    assert await held == "verified" and second.admitted and not first.admitted
    assert await _arrive(two) == "verified"  # run again after a failure: straight on
    admission.failed(second)
    assert admission.live == 0


@pytest.mark.asyncio
async def test_a_group_whose_episodes_never_reach_their_verifier_takes_no_place() -> None:
    admission = Admission(1, lambda: None)
    lost, kept = admission.group(2), admission.group(1)
    for hold in (lost.episode(), lost.episode()):
        hold.ended()  # abandoned before their verifier
    assert not lost.admitted and admission.live == 0
    assert await _arrive(kept.episode()) == "verified"
    assert admission.live == 1


@pytest.mark.asyncio
async def test_a_group_reported_done_acting_by_its_worker_is_admitted_like_a_local_one() -> None:
    admission = Admission(1, lambda: None)
    empty, remote, local = admission.group(2), admission.group(2), admission.group(1)
    empty.acted(0)  # every episode abandoned before its verifier: no place taken
    remote.acted(2)  # a rollout worker's group: both episodes wait there
    assert remote.admitted and remote.opened.is_set() and not empty.admitted
    held = asyncio.ensure_future(_arrive(local.episode()))
    await _settle()
    assert not held.done()
    admission.failed(remote)
    assert await held == "verified"
