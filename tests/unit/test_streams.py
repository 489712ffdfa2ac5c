"""Stream assignment and memory planning across streams, checked by simulation.

Random DAG schedules are assigned to several streams and planned; a simulator then runs
many random interleavings that the streams and events allow and asserts that no step
starts before the steps it reads from have finished, and that no two storages that are
live at the same moment share a byte.
"""

import random

import numpy as np
import pytest

from graphengine.engine.codegen.memory import plan_storages
from graphengine.engine.codegen.streams import START, StreamSchedule, assign_streams


def random_dag(rng: random.Random, n: int):
    deps, sizes, defined, uses = [], [], {}, {}
    inputs = rng.randint(1, 3)
    for sid in range(inputs):
        sizes.append(rng.choice([64, 256, 4096]))
        defined[sid] = START
    storage_of_step = []
    for step in range(n):
        live = list(range(len(sizes)))
        reads = rng.sample(live, k=min(len(live), rng.choice([1, 1, 2, 3])))
        if rng.random() < 0.5:  # mostly chains: read the newest storage
            reads = [len(sizes) - 1] + reads[:1]
        deps.append(sorted({defined[r] for r in reads}))
        for r in reads:
            uses.setdefault(r, set()).add(step)
        sid = len(sizes)
        sizes.append(rng.choice([64, 128, 1000, 4096, 20000]))
        defined[sid] = step
        storage_of_step.append(sid)
    outputs = rng.sample(storage_of_step, k=min(2, n))
    return deps, sizes, defined, uses, outputs


def simulate(sched: StreamSchedule, deps, sizes, defined, uses, plan, rng: random.Random):
    """Run one random interleaving; assert data order and memory safety."""
    n = len(deps)
    queues = [[i for i in range(n) if sched.stream[i] == s] for s in range(sched.num_streams)]
    recorded: set[int] = set()
    done: set[int] = set()
    running: dict[int, int] = {}  # stream -> step
    live = {sid for sid, d in defined.items() if d == START and uses.get(sid)}

    def check_live():
        spans = sorted((plan.offsets[s], plan.offsets[s] + sizes[s], s) for s in live)
        for (_, a1, sa), (b0, _, sb) in zip(spans, spans[1:]):
            assert a1 <= b0, f"storages {sa} and {sb} are live together and overlap"

    check_live()
    while len(done) < n:
        choices = []
        for s, q in enumerate(queues):
            if s in running:
                choices.append(("finish", s))
            elif q and all(e in recorded for e in sched.waits[q[0]]):
                choices.append(("start", s))
        assert choices, "deadlock: no stream can make progress"
        kind, s = rng.choice(choices)
        if kind == "start":
            step = queues[s].pop(0)
            for d in deps[step]:
                assert d == START or d in done, f"step {step} started before {d} finished"
            running[s] = step
            live.update(sid for sid, d in defined.items() if d == step)
            check_live()
        else:
            step = running.pop(s)
            done.add(step)
            recorded.update(sched.records[step])
            for sid in list(live):
                # a storage nobody reads dies when its writer finishes
                u = uses.get(sid) or {defined[sid]}
                if u <= done:
                    live.discard(sid)


@pytest.mark.parametrize("seed", range(25))
def test_random_dags_are_safe_on_every_interleaving(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 40)
    deps, sizes, defined, uses, outputs = random_dag(rng, n)
    costs = [rng.choice([1.0, 10.0, 100.0]) for _ in range(n)]
    sched = assign_streams(deps, costs, max_streams=rng.choice([2, 3, 4]))
    for sid in outputs:
        uses.setdefault(sid, set()).add(sched.end)
    plan = plan_storages(sizes, defined, uses, sched)
    for _ in range(30):
        simulate(sched, deps, sizes, defined, uses, plan, rng)
    assert plan.lower_bound <= plan.arena_bytes


def test_independent_branches_use_separate_streams_and_one_event_each():
    # four towers of three steps each from a shared input, then a join
    deps = []
    for _ in range(4):
        deps.append([START])
        deps.append([len(deps) - 1])
        deps.append([len(deps) - 1])
    tails = [2, 5, 8, 11]
    deps.append(tails)
    sched = assign_streams(deps, [1.0] * len(deps), max_streams=2)
    assert sched.num_streams == 2
    towers = [{sched.stream[t * 3 + i] for i in range(3)} for t in range(4)]
    assert all(len(t) == 1 for t in towers)  # a tower never hops streams
    assert max(len(w) for w in sched.waits) == 1
    assert sched.num_events == 1  # the join waits once for the other stream's last tower


def test_single_stream_has_no_events():
    sched = assign_streams([[START], [0], [0, 1]], [1, 1, 1], max_streams=1)
    assert sched.num_streams == 1 and sched.num_events == 0
    assert sched.happens_before(0, 2) and not sched.happens_before(2, 0)


def test_branchy_model_on_two_streams_matches_onnxruntime():
    import onnxruntime as ort

    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import CompileOptions, compile_graph
    from graphengine.engine.runtime import load
    from tests import zoo

    model = zoo.branchy(towers=4, channels=8, size=16)
    inputs = zoo.random_inputs(model, seed=2)
    compiled = compile_graph(load_model(model), CompileOptions(max_streams=2, lint=True))
    assert compiled.report.streams == 2 and compiled.report.events >= 1
    loaded = load(compiled)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, inputs)[0]
    for _ in range(20):  # many runs: a race would show up as a wrong value sooner or later
        out = list(loaded.execute(inputs).values())[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_hinted_steps_keep_their_streams_and_get_events():
    # two chains (0-1-2 and 3-4-5) and a join (6): hinted to streams 0, 1 and 0
    deps = [[START], [0], [1], [START], [3], [4], [2, 5]]
    hints = [0, 0, 0, 1, 1, 1, None]
    sched = assign_streams(deps, [1.0] * 7, 2, hints)
    assert sched.stream[:6] == [0, 0, 0, 1, 1, 1] and sched.num_streams == 2
    join = sched.stream[6]
    other = 5 if join == 0 else 2
    assert sched.waits[6] and sched.happens_before(other, 6)
    # without hints the least-loaded rule may interleave the chains differently
    free = assign_streams(deps, [1.0] * 7, 2)
    assert all(free.happens_before(p, s) for s, ps in enumerate(deps) for p in ps if p != START)
