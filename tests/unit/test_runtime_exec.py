"""Tests of the runtime's execution model: the device's lanes and thread budget, instances,
zero-copy binding, sink mode, statistics, tensor formats and TransData, kernel_info.

Specs are built by hand with test_runtime.SpecBuilder; results are compared with numpy.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import SpecBuilder, close, conv_ref, randn


def _chain(n: int = 3, shape=(8, 16), streams: int = 1, name: str = "chain") -> SpecBuilder:
    """x -> Tanh -> Mul(.,2) -> ... on `streams` streams (alternating, with events)."""
    b = SpecBuilder(name, num_streams=streams, num_events=max(0, n - 1))
    x = b.input("x", "float32", shape)
    two = b.const("two", np.array(2.0, np.float32))
    cur = x
    for i in range(n):
        s = i % streams
        if i and streams > 1:
            b.record(i - 1, stream=(i - 1) % streams)
            b.wait(i - 1, stream=s)
        y = b.tensor(f"t{i}", "float32", shape)
        if i == 0:
            b.kernel("Tanh", [cur], [y], stream=s)
        else:
            b.kernel("Mul", [cur, two], [y], stream=s)
        cur = y
    b.outputs = [cur]
    return b


def _chain_ref(x: np.ndarray, n: int = 3) -> np.ndarray:
    return np.tanh(x) * 2.0 ** (n - 1)


# ---- device, lanes, thread budget --------------------------------------------------------


def test_a_model_alone_tries_its_single_threaded_kernels_and_keeps_the_faster_set():
    # Every model of width > 1 has a second, single-threaded kernel set: a launch alone
    # runs it on its second launch, then once in a while (more rarely while the wide set
    # stays the faster), so the model can leave an OpenMP team whose helper other processes
    # deschedule. Which set wins depends on the machine's load; both give the same outputs.
    dev = rt.Device(threads=2)
    m = _chain(n=6, shape=(64, 256)).load(dev)
    assert m.threads_per_stream == 2
    x = randn(64, 256)
    want = _chain_ref(x, 6)
    runs = 300
    for _ in range(runs):
        close(m.execute([x])[0], want)
    stats = m.stats()
    assert stats["runs"] == runs
    # at least the first probe; at most every launch (when the narrow set was the faster)
    assert 1 <= stats["narrow_runs"] <= runs


def test_the_narrow_set_is_built_when_a_launch_first_wants_it_not_at_load():
    # Building the single-threaded set at load doubled the kernel preparation compile+load
    # pays (oneDNN primitive creation and its JIT) for a set the first launch never runs:
    # the second launch (its first probe) builds it, and runs it, with the same outputs.
    dev = rt.Device(threads=2)
    m = _chain(n=6, shape=(64, 256)).load(dev)
    assert m.threads_per_stream == 2
    assert m.stats()["narrow_built"] is False
    x = randn(64, 256)
    want = _chain_ref(x, 6)
    close(m.execute([x])[0], want)
    stats = m.stats()
    assert stats["runs"] == 1 and stats["narrow_runs"] == 0 and not stats["narrow_built"]
    close(m.execute([x])[0], want)
    stats = m.stats()
    assert stats["narrow_built"] and stats["runs"] == 2 and stats["narrow_runs"] == 1
    for _ in range(20):
        close(m.execute([x])[0], want)
    assert m.stats()["runs"] == 22


def test_a_probe_of_the_other_kernel_set_is_a_warm_up_then_a_timed_launch():
    # After a streak on one set, the other's first launch pays for waking its idle threads;
    # timed alone it always looked slower (byte_cnn and hf_llama stayed on the narrow set
    # for 96-100% of launches on a quiet machine). The probe's first launch is not timed.
    dev = rt.Device(threads=2)
    m = _chain(n=6, shape=(64, 256)).load(dev)
    x = randn(64, 256)
    want = _chain_ref(x, 6)
    close(m.execute([x])[0], want)  # wide: its first time
    stats = m.stats()
    assert stats["probe_warmups"] == 0 and stats["narrow_runs"] == 0
    close(m.execute([x])[0], want)  # the narrow set's warm-up (not timed)
    stats = m.stats()
    assert stats["probe_warmups"] == 1 and stats["narrow_runs"] == 1
    close(m.execute([x])[0], want)  # its timed run: still the narrow set
    stats = m.stats()
    assert stats["probe_warmups"] == 1 and stats["narrow_runs"] == 2
    # later probes come at least kProbeMin launches and 16 times their cost apart (a loaded
    # machine's wide launches can take 100 times a narrow one): give them a few seconds
    end = time.monotonic() + 5.0
    while m.stats()["probe_warmups"] < 3 and time.monotonic() < end:
        close(m.execute([x])[0], want)
    stats = m.stats()
    # every later probe is a pair too: at most one untimed launch per timed probe
    assert 2 <= stats["probe_warmups"] <= 1 + (stats["runs"] - 3) // 16, stats


def _heavy(name: str) -> SpecBuilder:
    """A [1024, 4096] x [4096, 2048] product: 17 GFLOP, over 38 ms on 2 threads here."""
    b = SpecBuilder(name)
    a = b.input("a", "float32", (1024, 4096))
    w = b.const("w", (randn(4096, 2048) * 0.02).astype(np.float32))
    y = b.tensor("y", "float32", (1024, 2048))
    b.kernel("MatMul", [a, w], [y])
    b.outputs = [y]
    return b


def test_a_long_launch_probes_its_narrow_set_only_after_a_streak():
    """A launch of tens of milliseconds (here a 17-GFLOP product on 2 threads: over 38 ms
    even at this CPU's FMA peak) does not build and probe its single-threaded set on its
    second launch: the probe's two narrow launches made the first requests of a heavy
    model 2-4 times slower. It waits kProbeMin (16) launches, then probes as usual."""
    dev = rt.Device(threads=2)
    m = _heavy("heavy").load(dev)
    x = randn(1024, 4096)
    for _ in range(15):
        m.execute([x])
    stats = m.stats()
    assert stats["probe_warmups"] == 0 and stats["narrow_runs"] == 0, stats
    for _ in range(3):
        m.execute([x])
    stats = m.stats()  # the 17th launch builds it and warms it up, the 18th is timed
    assert stats["probe_warmups"] == 1 and stats["narrow_runs"] >= 2, stats


def test_probes_are_spaced_by_their_own_cost():
    """After the first probe, the next waits for kProbeMin launches and for 16 times its
    own cost (two launches of the set it runs, the slower one) to have passed: by launch
    20 only the first has run (counted in launches alone, the second began at launch 19).
    """
    dev = rt.Device(threads=2)
    m = _chain(n=6, shape=(64, 256)).load(dev)
    x = randn(64, 256)
    want = _chain_ref(x, 6)
    for _ in range(20):
        close(m.execute([x])[0], want)
    assert m.stats()["probe_warmups"] == 1, m.stats()


@pytest.mark.parametrize("work_flops,waits", [(17_179_869_184, True), (1_000_000, False)])
def test_a_long_launch_of_little_work_probes_at_once(work_flops, waits):
    """A launch long for its work waits kProbeMin launches; one long although its work is
    small (ModelSpec.work_flops below 2 GFLOP a thread) is long because the machine is
    loaded, where the narrow set helps most: it builds and probes it on its second launch.
    Here the same 38+ ms product, declared heavy (its real count) or light."""
    dev = rt.Device(threads=2)
    spec = _heavy("declared").spec()
    spec["work_flops"] = work_flops
    m = rt.Model(dev, spec)
    x = randn(1024, 4096)
    for _ in range(3):
        m.execute([x])
    stats = m.stats()
    if waits:
        assert stats["probe_warmups"] == 0 and stats["narrow_runs"] == 0, stats
    else:  # the 2nd launch builds the set and warms it up, the 3rd is timed
        assert stats["probe_warmups"] == 1 and stats["narrow_runs"] == 2, stats


def test_a_compiled_program_carries_the_flops_of_its_launch():
    """codegen writes engine/flops.py's count of the program's tasks into its spec (the
    runtime's early-probe rule reads it)."""
    from onnx import TensorProto, helper, numpy_helper

    from graphengine.engine.importers import load_model
    from graphengine.engine.model import DeviceProgram
    from graphengine.engine.pipeline import compile_graph

    w = numpy_helper.from_array((randn(64, 32) * 0.1).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    compiled = compile_graph(load_model(model))
    progs = [p for p in compiled.programs if isinstance(p, DeviceProgram)]
    assert [p.work_flops for p in progs] == [2 * 16 * 64 * 32]
    assert progs[0].spec("mm")["work_flops"] == 2 * 16 * 64 * 32


def test_a_width_one_model_has_no_narrow_set():
    dev = rt.Device(threads=1)
    m = _chain().load(dev)
    x = randn(8, 16)
    for _ in range(40):
        close(m.execute([x])[0], _chain_ref(x))
    assert m.threads_per_stream == 1 and m.stats()["narrow_runs"] == 0


def test_device_lanes_are_shared_and_sized_to_the_budget():
    dev = rt.Device(threads=2)
    assert dev.threads == 2 and dev.cores >= 1
    assert dev.lanes_started == 0  # lanes start on first use
    m1 = _chain().load(dev)  # one stream: kernels get the whole budget
    assert m1.threads_per_stream == 2
    # its lane of width 2 (its single-threaded set waits for a launch that wants it)
    assert dev.lanes_started == 1
    m2 = _chain(name="other").load(dev)  # same width: no new threads
    assert dev.lanes_started == 1
    m3 = _chain(n=4, streams=2).load(dev)  # 2 streams share the budget: 1 thread each
    assert m2.threads_per_stream == 2 and m3.threads_per_stream == 1
    assert dev.lanes_started == 1 + 2
    x = randn(8, 16)
    for m in (m1, m2, m1, m2):  # the second launches build the single-threaded sets
        close(m.execute([x])[0], _chain_ref(x))
    close(m3.execute([x])[0], _chain_ref(x, 4))
    assert dev.lanes_started == 1 + 2  # on the lanes of width 1 there are


def test_threads_per_stream_override_is_clamped_to_the_budget():
    dev = rt.Device(threads=2)
    spec = _chain().spec()
    spec["threads_per_stream"] = 1
    assert rt.Model(dev, spec).threads_per_stream == 1
    spec["threads_per_stream"] = 8
    assert rt.Model(dev, spec).threads_per_stream == 2
    spec["threads_per_stream"] = -1
    with pytest.raises(rt.InvalidArgument, match="threads_per_stream"):
        rt.Model(dev, spec)


# ---- instances ---------------------------------------------------------------------------


def test_instances_share_weights_and_run_concurrently():
    b = SpecBuilder("inst")
    x = b.input("x", "float32", [16, 32])
    w = randn(32, 24)
    y = b.tensor("y", "float32", [16, 24])
    b.kernel("MatMul", [x, b.const("w", w)], [y])
    b.outputs = [y]
    one = rt.Model(rt.Device(2), b.spec())
    three = rt.Model(rt.Device(2), b.spec(), instances=3)
    assert three.instances == 3
    s1, s3 = one.stats(), three.stats()
    assert s3["arena_bytes"] == 3 * s1["arena_bytes"]
    assert s3["weight_bytes"] == s1["weight_bytes"] and s3["instances"] == 3
    # With instances, concurrent launches may run single-threaded kernels: a second kernel
    # set, which shares the first one's reordered weights (built when first wanted).
    assert s3["prepared_bytes"] == s1["prepared_bytes"] > 0
    errors: list[BaseException] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(30):
                xv = rng.standard_normal((16, 32)).astype(np.float32)
                close(three.execute([xv])[0], xv @ w, atol=1e-4)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    s = three.stats()
    assert s["runs"] == 240 and s["failures"] == 0
    assert s["peak_waiting"] <= 8
    # built by the first launch that wanted it, while others ran the wide set
    assert s["narrow_built"] and not one.stats()["narrow_built"]


def test_queued_launches_start_on_the_lane_that_frees_the_instance():
    """One instance, a long sink-mode launch holding it, and callers queued behind it with
    their own iteration counts and return_all: each is started by the lane that completes
    the launch before it, with its own bindings, and gets its own outputs."""
    m = _chain(n=3, shape=(64, 64)).load(rt.Device(2))
    x_long = randn(64, 64)
    results: dict[int, object] = {}
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            xs = [randn(64, 64) for _ in range(i + 1)]
            feeds = [[x] for x in xs] if i else [xs[0]]  # one iteration: one list of inputs
            out = m.execute(feeds, iterations=i + 1, return_all=i % 2 == 1)
            results[i] = (xs, out)
        except BaseException as e:  # reported below
            errors.append(e)

    blocker = threading.Thread(target=lambda: m.execute([x_long], iterations=20000))
    blocker.start()
    time.sleep(0.05)  # the blocker holds the only instance for well over this
    threads = [threading.Thread(target=caller, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads + [blocker]:
        t.join()
    assert not errors, errors[0]
    for i, (xs, out) in results.items():
        if i % 2:  # every iteration's outputs, each from its own input
            assert len(out) == i + 1
            for x, o in zip(xs, out):
                close(o[0], _chain_ref(x))
        else:
            close(out[0], _chain_ref(xs[-1]))
    s = m.stats()
    assert s["runs"] == 6 and s["failures"] == 0 and s["peak_waiting"] >= 1


def test_a_queued_launch_leaves_the_queue_on_its_deadline_or_cancel_token():
    """Behind a long launch holding the only instance: a caller's deadline or cancel token
    ends its wait (nothing of it runs, the queue and the long launch go on), the queue time
    is reported, and a caller queued behind the one that left still runs."""
    m = _chain(n=3, shape=(64, 64)).load(rt.Device(2))
    x = randn(64, 64)
    blocker = threading.Thread(target=lambda: m.execute([x], iterations=150000))
    blocker.start()
    time.sleep(0.05)
    later: list = []
    behind = threading.Thread(target=lambda: later.append(m.execute([x], deadline=60.0)))
    try:
        timing: dict = {}
        with pytest.raises(rt.DeadlineExceeded, match="waited for a free instance"):
            m.execute([x], deadline=0.02, timing=timing)
        assert timing["queue_seconds"] > 0  # it waited, and says so
        token = rt.CancelToken()
        threading.Timer(0.03, token.cancel).start()
        behind.start()
        with pytest.raises(rt.Cancelled, match="cancelled"):
            m.execute([x], cancel=token)
        assert token.cancelled
        with pytest.raises(rt.DeadlineExceeded):  # a passed deadline: no wait at all
            m.execute([x], deadline=-5.0)
    finally:
        blocker.join()
        behind.join()
    close(later[0][0], _chain_ref(x))
    s = m.stats()
    assert s["runs"] == 2 and s["failures"] == 0  # the blocker and the one behind


def test_failure_in_one_instance_leaves_the_others_alone():
    b = SpecBuilder("emb", num_streams=2, num_events=1)
    ids = b.input("ids", "int64", [4])
    table = np.arange(100 * 3, dtype=np.float32).reshape(100, 3)
    g = b.tensor("g", "float32", [4, 3])
    out = b.tensor("out", "float32", [4, 3])
    b.kernel("Gather", [b.const("table", table), ids], [g], name="emb", axis=0)
    b.record(0, stream=0)
    b.wait(0, stream=1)
    b.kernel("Relu", [g], [out], stream=1)
    b.outputs = [out]
    m = rt.Model(rt.Device(2), b.spec(), instances=2)
    errors: list[BaseException] = []

    def caller(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for i in range(40):
                idx = rng.integers(0, 100, 4)
                if (i + seed) % 2:
                    idx[1] = 100 + i
                    with pytest.raises(rt.InvalidArgument, match=r"node 'emb'.*out of range"):
                        m.execute([idx])
                else:
                    np.testing.assert_array_equal(m.execute([idx])[0], table[idx])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert m.stats()["failures"] == 80 and m.stats()["runs"] == 80


def test_bad_instance_count():
    with pytest.raises(rt.InvalidArgument, match="instances"):
        rt.Model(rt.Device(1), _chain().spec(), instances=0)


def test_profile_counts_every_task_of_every_run():
    m = _chain(n=3, streams=2).load(rt.Device(2))
    x = randn(8, 16)
    m.execute([x])
    m.execute([[x], [x]], iterations=2)
    prof = m.profile()
    kernels = [p for p in prof if p["op"] in ("Tanh", "Mul")]
    assert len(kernels) == 3 and all(p["calls"] == 3 and p["seconds"] > 0 for p in kernels)
    assert {p["stream"] for p in kernels} == {0, 1}
    assert [p["op"] for p in prof if p["op"] in ("record", "wait")] == ["record", "wait"] * 2
    # what making each kernel took at load (a load profile); none for events
    assert all(p["build_seconds"] > 0 for p in kernels)
    assert all(p["build_seconds"] == 0 for p in prof if p["op"] in ("record", "wait"))


# ---- zero copy ---------------------------------------------------------------------------


def test_zero_copy_inputs_and_outputs_and_the_copies_counted():
    m = _chain().load()
    assert m.zero_copy == {"inputs": ["x"], "outputs": ["t2"]}
    x = randn(8, 16)
    r1 = m.execute([x])[0]
    r2 = m.execute([x * 0])[0]
    close(r1, _chain_ref(x))  # each output is its own array, not reused by the next run
    assert np.all(r2 == 0) and r1.flags.writeable and r1.flags.c_contiguous
    s = m.stats()
    assert s["bytes_copied"] == 0 and s["bytes_zero_copy"] == 2 * 2 * x.nbytes
    xt = randn(16, 8).T  # not C-contiguous: converted once, counted
    close(m.execute([xt])[0], _chain_ref(xt))
    assert m.stats()["bytes_copied"] == xt.nbytes
    raw = np.zeros(x.nbytes + 1, np.uint8)  # misaligned float32 data: copied into the arena
    mis = np.frombuffer(raw.data, dtype=np.uint8, count=x.nbytes, offset=1).view(np.float32)
    mis = mis.reshape(8, 16)
    mis[...] = x
    close(m.execute([mis])[0], _chain_ref(x))
    assert m.stats()["bytes_copied"] == 2 * xt.nbytes


def test_input_written_by_a_task_is_copied_not_clobbered():
    b = SpecBuilder()
    x = b.input("x", "float32", [4, 4])
    y = b.tensor("y", "float32", [4, 4])
    b.kernel("Relu", [x], [x], name="inplace")  # writes the model input
    b.kernel("Neg", [x], [y])
    b.outputs = [y]
    m = b.load()
    assert m.zero_copy["inputs"] == []
    xv = randn(4, 4)
    keep = xv.copy()
    close(m.execute([xv])[0], -np.maximum(keep, 0))
    np.testing.assert_array_equal(xv, keep)  # the caller's array is untouched


def test_views_of_inputs_and_outputs_follow_their_binding():
    b = SpecBuilder()
    x = b.input("x", "float32", [2, 6])
    xv = b.tensor("xv", "float32", [3, 4], offset=b.tensors[x]["offset"])  # Reshape of x
    y = b.tensor("y", "float32", [3, 4])
    b.kernel("Exp", [xv], [y])
    yv = b.tensor("yv", "float32", [12], offset=b.tensors[y]["offset"])  # Reshape of y
    z = b.tensor("z", "float32", [12])
    b.kernel("Neg", [yv], [z])
    # outputs: y (written in place), the view of y, z, and a view of the input
    b.outputs = [y, yv, z, xv]
    m = b.load()
    assert m.zero_copy == {"inputs": ["x"], "outputs": ["y", "z"]}
    a = randn(2, 6)
    y_out, yv_out, z_out, xv_out = m.execute([a])
    close(y_out, np.exp(a).reshape(3, 4))
    close(yv_out, np.exp(a).reshape(12))
    close(z_out, -np.exp(a).reshape(12))
    np.testing.assert_array_equal(xv_out, a.reshape(3, 4))
    for arr in (y_out, yv_out, z_out, xv_out):  # four distinct arrays
        assert not any(np.shares_memory(arr, o) for o in (y_out, yv_out, z_out, xv_out)
                       if o is not arr)


def test_duplicate_outputs_are_distinct_arrays():
    b = SpecBuilder()
    x = b.input("x", "float32", [5])
    y = b.tensor("y", "float32", [5])
    b.kernel("Abs", [x], [y])
    b.outputs = [y, y]
    a, c = b.load().execute([-np.arange(5, dtype=np.float32)])
    np.testing.assert_array_equal(a, np.arange(5)) and np.testing.assert_array_equal(c, a)
    assert not np.shares_memory(a, c)


# ---- sink mode ---------------------------------------------------------------------------


@pytest.mark.parametrize("streams", [1, 2])
def test_sink_mode_runs_n_iterations_in_one_launch(streams):
    m = _chain(n=4, streams=streams).load(rt.Device(2))
    xs = [randn(8, 16) for _ in range(5)]
    last = m.execute([[x] for x in xs], iterations=5)
    close(last[0], _chain_ref(xs[-1], 4))
    every = m.execute([[x] for x in xs], iterations=5, return_all=True)
    assert len(every) == 5
    for out, x in zip(every, xs):
        close(out[0], _chain_ref(x, 4))
    assert not np.shares_memory(every[0][0], every[1][0])
    same = m.execute([xs[0]], iterations=3, return_all=True)  # one list for every iteration
    for out in same:
        close(out[0], _chain_ref(xs[0], 4))
    s = m.stats()
    assert s["runs"] == 3 and s["iterations"] == 13
    assert len(s["stream_seconds"]) == streams and all(t > 0 for t in s["stream_seconds"])


def test_sink_mode_copies_outputs_that_are_not_written_in_place():
    b = SpecBuilder()
    x = b.input("x", "float32", [6])
    y = b.tensor("y", "float32", [6])
    b.kernel("Sqrt", [x], [y])
    xv = b.tensor("xv", "float32", [2, 3], offset=b.tensors[x]["offset"])
    b.outputs = [y, xv]  # xv reads the input's bytes
    m = b.load()
    xs = [np.arange(6, dtype=np.float32) + i for i in range(4)]
    outs = m.execute([[x] for x in xs], iterations=4, return_all=True)
    for (yo, xo), x in zip(outs, xs):
        close(yo, np.sqrt(x))
        np.testing.assert_array_equal(xo, x.reshape(2, 3))


def test_sink_mode_failure_stops_the_launch_and_the_model_recovers():
    b = SpecBuilder()
    ids = b.input("ids", "int64", [2])
    table = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = b.tensor("y", "float32", [2, 2])
    b.kernel("Gather", [b.const("t", table), ids], [y], name="emb")
    b.outputs = [y]
    m = b.load()
    good, bad = np.array([1, 2]), np.array([3, 10])
    with pytest.raises(rt.InvalidArgument, match="node 'emb'.*index 10"):
        m.execute([[good], [good], [bad], [good]], iterations=4)
    np.testing.assert_array_equal(m.execute([[good], [good]], iterations=2)[0], table[good])
    with pytest.raises(rt.InvalidArgument, match="iterations"):
        m.execute([good], iterations=0)
    with pytest.raises(rt.InvalidArgument, match="one per iteration"):
        m.execute([[good], [good]], iterations=3)
    with pytest.raises(rt.InvalidArgument, match=r"expected int64\[2\]"):
        m.execute([[good], [good.astype(np.int32)]], iterations=2)
    assert m.stats()["failures"] == 1


# ---- formats and TransData ---------------------------------------------------------------


def _fmt(b: SpecBuilder, t: int, fmt: str) -> int:
    b.tensors[t]["format"] = fmt
    return t


@pytest.mark.parametrize("fmt", ["nhwc", "nChw8c", "nChw16c"])
def test_explicit_formats_conv_pool_relu_add_concat(fmt):
    c, hw = 16, 8
    b = SpecBuilder("fmt")
    x = _fmt(b, b.input("x", "float32", [1, c, hw, hw]), "nchw")
    xt = _fmt(b, b.tensor("xt", "float32", [1, c, hw, hw]), fmt)
    b.kernel("TransData", [x], [xt], src_format="nchw", dst_format=fmt)
    w1, w2 = randn(c, c, 3, 3) * 0.2, randn(c, c, 1, 1) * 0.2
    c1 = _fmt(b, b.tensor("c1", "float32", [1, c, hw, hw]), fmt)
    b.kernel("Conv", [xt, b.const("w1", w1)], [c1], pads=[1, 1, 1, 1])
    r1 = _fmt(b, b.tensor("r1", "float32", [1, c, hw, hw]), fmt)
    b.kernel("Relu", [c1], [r1])
    c2 = _fmt(b, b.tensor("c2", "float32", [1, c, hw, hw]), fmt)
    b.kernel("Conv", [r1, b.const("w2", w2)], [c2])
    s = _fmt(b, b.tensor("s", "float32", [1, c, hw, hw]), fmt)
    b.kernel("Add", [c2, r1], [s])
    p = _fmt(b, b.tensor("p", "float32", [1, c, hw // 2, hw // 2]), fmt)
    b.kernel("MaxPool", [s], [p], kernel_shape=[2, 2], strides=[2, 2])
    cat = _fmt(b, b.tensor("cat", "float32", [1, 2 * c, hw // 2, hw // 2]), fmt)
    b.kernel("Concat", [p, p], [cat], axis=1)
    out = _fmt(b, b.tensor("out", "float32", [1, 2 * c, hw // 2, hw // 2]), "nchw")
    b.kernel("TransData", [cat], [out], src_format=fmt, dst_format="nchw")
    b.outputs = [out]
    m = b.load()
    assert m.channels_last == []  # the spec's formats, not the runtime's choice
    assert m.formats == {n: fmt for n in ("xt", "c1", "r1", "c2", "s", "p", "cat")}
    xv = randn(1, c, hw, hw)
    r = np.maximum(conv_ref(xv, w1, pads=(1, 1, 1, 1)), 0)
    sref = conv_ref(r, w2) + r
    pref = sref.reshape(1, c, hw // 2, 2, hw // 2, 2).max(axis=(3, 5))
    close(m.execute([xv])[0], np.concatenate([pref, pref], axis=1), atol=1e-4)


def test_transdata_really_reorders_the_bytes():
    b = SpecBuilder()
    x = _fmt(b, b.input("x", "float32", [2, 3, 4, 5]), "nchw")
    t = _fmt(b, b.tensor("t", "float32", [2, 3, 4, 5]), "nhwc")
    b.kernel("TransData", [x], [t], src_format="nchw", dst_format="nhwc")
    # A plain view of t's bytes (views are the compiler's business in explicit mode).
    v = b.tensor("v", "float32", [2, 4, 5, 3], offset=b.tensors[t]["offset"])
    y = b.tensor("y", "float32", [2, 4, 5, 3])
    b.kernel("Identity", [v], [y])
    back = _fmt(b, b.tensor("back", "float32", [2, 3, 4, 5]), "nchw")
    b.kernel("TransData", [t], [back], src_format="nhwc", dst_format="nchw")
    b.outputs = [y, back]
    xv = randn(2, 3, 4, 5)
    y_out, back_out = b.load().execute([xv])
    np.testing.assert_array_equal(y_out, xv.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(back_out, xv)


def test_format_errors_name_the_tensor_or_node():
    def base(fmt="nhwc"):
        b = SpecBuilder()
        x = b.input("x", "float32", [1, 8, 4, 4])
        t = _fmt(b, b.tensor("t", "float32", [1, 8, 4, 4]), fmt)
        b.kernel("TransData", [x], [t], name="td", src_format="nchw", dst_format=fmt)
        y = b.tensor("y", "float32", [1, 8, 4, 4])
        b.kernel("TransData", [t], [y], name="back", src_format=fmt, dst_format="nchw")
        b.outputs = [y]
        return b, t, y

    b, t, y = base()
    b.load()
    b.tensors[t]["format"] = "nhwcx"
    with pytest.raises(rt.InvalidArgument, match="tensor 't': unknown format 'nhwcx'"):
        b.load()
    b, t, y = base("nChw16c")  # 8 channels: a padded block, which TransData may convert
    x = np.arange(128, dtype=np.float32).reshape(1, 8, 4, 4)
    np.testing.assert_array_equal(b.load().execute([x])[0], x)
    b.tasks[1] = {"kind": "kernel", "name": "act", "op": "Relu", "stream": 0,
                  "inputs": [t], "outputs": [y], "attrs": {}}
    with pytest.raises(rt.InvalidArgument, match=r"node 'act' \(Relu\): tensor 't' is stored "
                       r"nChw16c with padded channels \(8\); only Conv and TransData"):
        b.load()
    b, t, y = base()
    b.tasks[0]["attrs"]["dst_format"] = "nChw8c"
    with pytest.raises(rt.InvalidArgument, match=r"node 'td' \(TransData\): attribute dst_format"):
        b.load()
    b, t, y = base()
    b.tensors[y]["format"] = "nhwc"
    with pytest.raises(rt.InvalidArgument, match="model output 'y' must be stored nchw"):
        b.load()
    b, t, y = base()
    b.tasks[1] = {"kind": "kernel", "name": "sm", "op": "Softmax", "stream": 0,
                  "inputs": [t], "outputs": [y], "attrs": {}}
    with pytest.raises(rt.InvalidArgument,
                       match=r"node 'sm' \(Softmax\): tensor 't' is stored nhwc"):
        b.load()


def test_heuristic_layouts_stay_when_no_format_is_given():
    b = SpecBuilder()
    x = b.input("x", "float32", [1, 8, 6, 6])
    c1 = b.tensor("c1", "float32", [1, 8, 6, 6])
    b.kernel("Conv", [x, b.const("w", randn(8, 8, 1, 1))], [c1])
    r = b.tensor("r", "float32", [1, 8, 6, 6])
    b.kernel("Relu", [c1], [r])
    c2 = b.tensor("c2", "float32", [1, 8, 6, 6])
    b.kernel("Conv", [r, b.const("w2", randn(8, 8, 1, 1))], [c2])
    b.outputs = [c2]
    m = b.load()
    assert set(m.channels_last) == {"c1", "r"} and m.formats == {"c1": "nhwc", "r": "nhwc"}


# ---- kernel_info -------------------------------------------------------------------------


def test_kernel_info_answers_for_convs_from_onednn():
    info = rt.kernel_info("Conv", ["float32", "float32"], [[1, 64, 56, 56], [64, 64, 3, 3]],
                          {"pads": [1, 1, 1, 1]})
    assert info["supported"] and info["reason"] == ""
    assert info["preferred_format"] in info["formats"]
    assert set(info["formats"]) == {"nchw", "nhwc", "nChw8c", "nChw16c"}
    bad = rt.kernel_info("Conv", ["float32", "float32"], [[1, 64, 56, 56], [64, 32, 3, 3]], {})
    assert not bad["supported"] and "does not match input channels 64" in bad["reason"]
    f64 = rt.kernel_info("Conv", ["float64", "float64"], [[1, 4, 8, 8], [4, 4, 3, 3]], {})
    assert not f64["supported"] and "float32" in f64["reason"]


def test_kernel_info_per_op_dtype_and_rank():
    ki = rt.kernel_info
    assert ki("Relu", ["float32"], [[1, 16, 8, 8]])["preferred_format"] == "any"
    assert ki("Add", ["int64", "int64"], [[3], [3]])["supported"]
    # a per-pixel map (one channel: the same bytes plain and NHWC) broadcasts in NHWC too
    add_b = ki("Add", ["float32", "float32"], [[1, 16, 8, 8], [1, 1, 8, 8]])
    assert add_b["supported"] and add_b["formats"] == ["nchw", "nhwc"]
    add_r = ki("Add", ["float32", "float32"], [[1, 16, 8, 8], [1, 1, 1, 8]])
    assert add_r["supported"] and add_r["formats"] == ["nchw"]
    # a per-channel operand (a squeeze-excitation's scale) broadcasts in any format
    add_c = ki("Add", ["float32", "float32"], [[1, 16, 8, 8], [1, 16, 1, 1]])
    assert add_c["supported"] and "nhwc" in add_c["formats"] and "nChw16c" in add_c["formats"]
    assert not ki("Add", ["float32", "float32"], [[3], [4]])["supported"]
    assert not ki("Pow", ["int32", "int32"], [[3], [3]])["supported"]
    assert not ki("Softmax", ["float64"], [[2, 3]])["supported"]
    assert ki("Softmax", ["float32"], [[2, 3]])["formats"] == ["nchw"]
    assert not ki("Gather", ["float32", "float32"], [[10, 4], [3]])["supported"]
    assert ki("Gather", ["float32", "int64"], [[10, 4], [3]])["supported"]
    assert not ki("Gemm", ["float32", "float32"], [[2, 3, 4], [4, 5]])["supported"]
    assert ki("Gemm", ["float32", "float32"], [[2, 4], [5, 4]], {"transB": 1})["supported"]
    assert not ki("MatMul", ["float32", "float32"], [[2, 3], [4, 5]])["supported"]
    assert not ki("Cast", ["float32"], [[2]], {})["supported"]
    assert ki("Cast", ["float32"], [[2]], {"to": "int64"})["supported"]
    assert not ki("NoSuchOp", ["float32"], [[2]])["supported"]
    assert not ki("Relu", ["float32", "float32"], [[2], [2]])["supported"]
    assert not ki("Relu", ["complex64"], [[2]])["supported"]
    assert ki("TransData", ["float32"], [[1, 16, 4, 4]], {"src_format": "nchw",
                                                          "dst_format": "nChw16c"})["supported"]
    assert ki("MaxPool", ["float32"], [[1, 24, 8, 8]])["formats"] == ["nchw", "nhwc", "nChw8c"]


def test_kernel_info_knows_every_device_op():
    dtypes = {"Where": ["bool", "float32", "float32"], "Gather": ["float32", "int64"],
              "GatherND": ["float32", "int64"],
              "BatchNormalization": ["float32"] * 5, "MatMulInteger": ["uint8", "int8"],
              "MatMulQWeight": ["float32", "int8", "float32", "int8", "float32"],
              "DynamicQuantizeLSTM": ["float32", "int8", "int8"] + [None] * 5
              + ["float32", "int8", "float32", "int8"]}
    shapes = {"Conv": [[1, 4, 8, 8], [4, 4, 3, 3]], "Gemm": [[2, 4], [4, 3]],
              "MatMul": [[2, 4], [4, 3]], "MatMulInteger": [[2, 4], [4, 3]],
              "MatMulQWeight": [[2, 4], [4, 3], [3], [3], [3]],
              "GatherND": [[5, 4], [3, 1]],
              "BatchNormalization": [[1, 4, 2, 2]] + [[4]] * 4,
              "LayerNormalization": [[2, 4], [4]], "RMSNormalization": [[2, 4], [4]],
              "Gather": [[5, 4], [3]],
              "FusedAttention": [[1, 4, 8, 8]] * 3, "ConvTranspose": [[1, 4, 8, 8], [4, 4, 3, 3]],
              "ConvDw": [[1, 4, 8, 8], [8, 4, 1, 1], [8], [8, 1, 3, 3], [8]],
              "ConvBlock": [[1, 16, 8, 8], [32, 16, 1, 1], [32], [32, 1, 3, 3], [32],
                            [16, 32, 1, 1], [16]],
              "ConvHead": [[1, 16, 4, 4], [32, 16, 1, 1], [32], [10, 32], [10]],
              "Rope": [[1, 4, 8, 8], [1, 1, 8, 8], [1, 1, 8, 8]],
              "RNN": [[5, 2, 4], [1, 3, 4], [1, 3, 3]], "GRU": [[5, 2, 4], [1, 9, 4], [1, 9, 3]],
              "LSTM": [[5, 2, 4], [1, 12, 4], [1, 12, 3]],
              "TreeEnsembleClassifier": [[3, 4]], "TreeEnsembleRegressor": [[3, 4]],
              "DynamicQuantizeLSTM": [[5, 2, 4], [1, 4, 12], [1, 3, 12]] + [[]] * 5
              + [[1]] * 4}
    attrs = {"Cast": {"to": "float32"}, "TransData": {"src_format": "nchw",
                                                      "dst_format": "nhwc"},
             "FusedAttention": {"scale": 0.125, "k_perm": [0, 1, 3, 2]},
             "ConvBlock": {"expand": 1}, "ConvHead": {"trans_b": 1},
             "EltwiseChain": {"ops": "Sigmoid,Mul", "operands": [-1, 0], "alphas": [0.0, 0.0],
                              "betas": [0.0, 0.0]},
             "EltwiseGraph": {"ops": "Exp,Mul", "args": [0, -1, -1, 1, 0, -1],
                              "alphas": [0.0, 0.0], "betas": [0.0, 0.0], "results": [2]}}
    binary = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Mod", "Equal", "Less", "Greater",
              "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "PRelu"}
    shapes["GridSample"] = [[1, 4, 8, 8], [1, 3, 5, 2]]  # X, grid [N, Ho, Wo, 2]
    for op in ("And", "Or", "Xor", "Not"):
        dtypes[op] = ["bool"] * (1 if op == "Not" else 2)
    # element indexing and scans (kernels_scatter.cc, kernels_sequence.cc)
    dtypes.update({"GatherElements": ["float32", "int64"], "ReverseSequence": ["float32", "int64"],
                   "ScatterElements": ["float32", "int64", "float32"],
                   "ScatterND": ["float32", "int64", "float32"]})
    shapes.update({"GatherElements": [[5, 4], [3, 4]], "ScatterElements": [[5, 4], [3, 4], [3, 4]],
                   "ScatterND": [[5, 4], [3, 1], [3, 4]],
                   "ReverseSequence": [[5, 2, 4], [2]]})
    attrs["CumSum"] = {"axis": 1}
    # writes to a session variable (kernels_variable.cc): the variable, then its operands
    shapes.update({"Assign": [[2, 3]] * 2, "AssignAdd": [[2, 3], [1]],
                   "AssignSlice": [[1, 2, 8, 4], [1, 2, 1, 4], [1]]})
    dtypes["AssignSlice"] = ["float32", "float32", "int64"]
    attrs["AssignSlice"] = {"axis": 2}
    shapes["PaddedNonMaxSuppression"] = [[1, 6, 4], [1, 2, 6]]  # boxes, scores
    shapes["GroupNorm"] = [[1, 4, 8, 8], [4], [4]]  # x, per-channel scale and bias
    attrs["GroupNorm"] = {"num_groups": 2}
    shapes["Col2Im"] = [[1, 8, 9]]  # 2 channels of 2x2 blocks over a 4x4 image, stride 1
    attrs["Col2Im"] = {"image": [4, 4], "block": [2, 2]}
    shapes["SegmentMatMul"] = [[6, 4], [2], [2, 4, 3]]  # x, sizes, the experts' matrices
    dtypes["SegmentMatMul"] = ["float32", "int64", "float32"]
    for op in rt.supported_ops():
        n = 3 if op == "Where" else 2 if op in binary else 1
        shp = shapes.get(op, [[1, 4, 8, 8]] * n)
        dts = dtypes.get(op, ["float32"] * len(shp))
        info = rt.kernel_info(op, dts, shp, attrs.get(op, {}))
        if op in ("ConvBlock", "ConvHead", "MatMulQWeight") and not rt.conv_block_available():
            assert not info["supported"] and "AVX-512" in info["reason"], (op, info)
            continue
        assert info["supported"], (op, info["reason"])
