import random

import numpy as np
import pytest

from graphengine.engine.codegen import memory
from graphengine.engine.codegen.memory import ALIGN, Buffer, check_plan, lower_bound, plan_memory


def test_disjoint_lifetimes_share_memory():
    bufs = [Buffer(0, 1000, 0, 1), Buffer(1, 1000, 2, 3), Buffer(2, 1000, 4, 5)]
    plan = plan_memory(bufs)
    check_plan(bufs, plan)
    assert plan.arena_bytes == plan.lower_bound == 1024


def test_overlapping_lifetimes_do_not_share():
    bufs = [Buffer(0, 100, 0, 2), Buffer(1, 100, 1, 3), Buffer(2, 100, 2, 4)]
    plan = plan_memory(bufs)
    check_plan(bufs, plan)
    assert plan.arena_bytes == 3 * ALIGN * 2  # 100 B rounds up to 128
    assert lower_bound(bufs) == plan.arena_bytes


def test_checker_catches_an_overlap():
    bufs = [Buffer(0, 100, 0, 2), Buffer(1, 100, 1, 3)]
    plan = plan_memory(bufs)
    bad = type(plan)({0: 0, 1: 0}, plan.arena_bytes, plan.lower_bound, "bad")
    with pytest.raises(AssertionError):
        check_plan(bufs, bad)


@pytest.mark.parametrize("seed", range(20))
def test_random_schedules_are_safe_and_near_the_bound(seed):
    rng = random.Random(seed)
    steps = rng.randint(5, 60)
    bufs = []
    for i in range(rng.randint(1, 80)):
        start = rng.randrange(steps)
        end = min(steps - 1, start + rng.choice([0, 1, 1, 2, 3, 8, 30]))
        bufs.append(Buffer(i, rng.choice([64, 100, 4096, 50_000, 1 << 20]), start, end))
    plan = plan_memory(bufs)
    check_plan(bufs, plan)
    assert plan.lower_bound <= plan.arena_bytes
    # best-fit greedy stays close to the bound on chain-like schedules like these
    assert plan.arena_bytes <= 2 * plan.lower_bound


def test_chain_schedule_hits_the_lower_bound():
    # a typical CNN: each op reads the previous output and writes a new one
    sizes = [800, 800, 400, 400, 200, 200, 100]
    bufs = [Buffer(i, s * 1000, i, i + 1) for i, s in enumerate(sizes)]
    plan = plan_memory(bufs)
    check_plan(bufs, plan)
    assert plan.arena_bytes <= 1.05 * plan.lower_bound


@pytest.mark.parametrize("seed", range(4))
def test_interval_placement_is_the_generic_best_fit(seed):
    """One stream's placement runs natively (memory._place_intervals); it must give the
    offsets of the generic best-fit loop over the same overlap test, in every strategy,
    ties included (equal sizes, equal lifetimes, zero-byte buffers)."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        n = int(rng.integers(1, 90))
        starts = rng.integers(0, 50, n)
        bufs = [Buffer(i, int(rng.choice([0, 1, 64, 100, 128, 4096, 64 * int(rng.integers(1, 9))])),
                       int(s), int(s + rng.integers(0, 25))) for i, s in enumerate(starts)]
        for name, strategy in memory.STRATEGIES.items():
            fast = strategy(bufs, memory._overlap)
            generic = strategy(bufs, lambda a, b: a.overlaps(b))  # not _overlap: the loop
            assert fast == generic, name


def test_native_placement_refuses_what_is_not_a_plan():
    from graphengine import _runtime

    col = np.array([0, 1], np.int64)
    with pytest.raises(ValueError, match="differ in length"):
        _runtime.place_intervals(col, col, np.array([64], np.int64))
    with pytest.raises(ValueError, match="buffer 1 has size -64"):
        _runtime.place_intervals(col, col, np.array([64, -64], np.int64))
    with pytest.raises(OverflowError, match="overflow"):
        _runtime.place_intervals(np.zeros(3, np.int64), np.full(3, 5, np.int64),
                                 np.full(3, 2**62, np.int64))
    # best fit: the gap left by an early, dead buffer is taken by a later one that fits it
    offs = _runtime.place_intervals(np.array([0, 0, 2], np.int64), np.array([1, 3, 3], np.int64),
                                    np.array([128, 64, 128], np.int64))
    assert offs.tolist() == [0, 128, 0]
