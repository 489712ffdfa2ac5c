"""The serial fallback of multi-stream programs on one-thread lanes (Model::has_serial_).

A batch split into one chunk per core (engine/optimize/batch_split.py, data-parallel mode)
loads as a program of two streams, each on a lane of one thread. It has no single-threaded
kernel set to fall back to on a busy machine (its kernels are single-threaded already);
its fallback is a serial launch: the streams run one after another, each submitted when
the one before it waits, passes a barrier or ends. The choice is the narrow set's
(kernel_sets.h): the second launch alone is a probe's warm-up, the third its timed launch.

Specs are built by hand with test_runtime.SpecBuilder; results are compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from graphengine import _runtime as rt
from tests.unit.test_runtime import SpecBuilder, close, randn

SHAPE = (64, 256)


def _two_chunks() -> SpecBuilder:
    """x0 -> Tanh -> Mul(.,2) on stream 0, x1 -> Tanh -> Mul(.,2) on stream 1, and
    Concat on stream 0 after waiting for stream 1's event: a data-parallel split's shape."""
    b = SpecBuilder("chunks", num_streams=2, num_events=1)
    two = b.const("two", np.array(2.0, np.float32))
    outs = []
    for s in (0, 1):
        x = b.input(f"x{s}", "float32", SHAPE)
        t = b.tensor(f"t{s}", "float32", SHAPE)
        y = b.tensor(f"y{s}", "float32", SHAPE)
        b.kernel("Tanh", [x], [t], stream=s)
        b.kernel("Mul", [t, two], [y], stream=s)
        outs.append(y)
    b.record(0, stream=1)
    b.wait(0, stream=0)
    cat = b.tensor("cat", "float32", (2 * SHAPE[0], SHAPE[1]))
    b.kernel("Concat", outs, [cat], stream=0, axis=0)
    b.outputs = [cat]
    return b


def _want(x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    return np.concatenate([np.tanh(x0) * 2, np.tanh(x1) * 2])


def test_a_split_program_probes_running_its_streams_one_after_another():
    m = _two_chunks().load(rt.Device(threads=2))
    assert m.threads_per_stream == 1 and m.num_streams == 2
    x0, x1 = randn(*SHAPE), randn(*SHAPE)
    want = _want(x0, x1)
    close(m.execute([x0, x1])[0], want)  # both streams at once: its first time
    stats = m.stats()
    assert stats["serial_runs"] == 0 and stats["probe_warmups"] == 0
    close(m.execute([x0, x1])[0], want)  # the serial launch's warm-up (not timed)
    stats = m.stats()
    assert stats["serial_runs"] == 1 and stats["probe_warmups"] == 1
    close(m.execute([x0, x1])[0], want)  # its timed launch: serial again
    stats = m.stats()
    assert stats["serial_runs"] == 2 and stats["narrow_runs"] == 0 and not stats["narrow_built"]
    for _ in range(50):  # whichever the machine's load makes faster: the same outputs
        close(m.execute([x0, x1])[0], want)
    assert m.stats()["runs"] == 53


def test_a_serial_launch_runs_every_iteration_of_sink_mode():
    # The hand-off happens once per launch: a stream that ends an iteration submits the
    # next one before it waits at the barrier, and later iterations run as usual.
    m = _two_chunks().load(rt.Device(threads=2))
    x0, x1 = randn(*SHAPE), randn(*SHAPE)
    feeds = [[x0 + i, x1 - i] for i in range(3)]
    for _ in range(3):  # the second and third launches are serial
        outs = m.execute(feeds, iterations=3, return_all=True)
        assert len(outs) == 3
        for i, out in enumerate(outs):
            close(out[0], _want(x0 + i, x1 - i))
    assert m.stats()["serial_runs"] == 2


def test_a_failure_in_a_serial_launch_ends_it_and_the_model_stays_usable():
    # Stream 0 fails (an index out of range) before it waits: the failed stream still
    # hands off, so stream 1 runs (drains) and the launch ends with the error.
    b = SpecBuilder("emb2", num_streams=2, num_events=1)
    table = np.arange(100 * 3, dtype=np.float32).reshape(100, 3)
    t = b.const("table", table)
    ids0, ids1 = b.input("ids0", "int64", [4]), b.input("ids1", "int64", [4])
    g0, g1 = b.tensor("g0", "float32", [4, 3]), b.tensor("g1", "float32", [4, 3])
    out = b.tensor("out", "float32", [4, 3])
    b.kernel("Gather", [t, ids0], [g0], name="emb0", stream=0, axis=0)
    b.kernel("Gather", [t, ids1], [g1], name="emb1", stream=1, axis=0)
    b.record(0, stream=1)
    b.wait(0, stream=0)
    b.kernel("Add", [g0, g1], [out], stream=0)
    b.outputs = [out]
    m = b.load(rt.Device(threads=2))
    good = np.array([1, 2, 3, 4]), np.array([5, 6, 7, 8])
    np.testing.assert_array_equal(m.execute(list(good))[0], table[good[0]] + table[good[1]])
    with pytest.raises(rt.InvalidArgument, match=r"node 'emb0'.*out of range"):
        m.execute([np.array([1, 200, 3, 4]), good[1]])  # the second launch: serial
    assert m.stats()["failures"] == 1  # a failed launch is not counted as a warm-up
    # the probe goes on: its timed launch is serial, and succeeds
    np.testing.assert_array_equal(m.execute(list(good))[0], table[good[0]] + table[good[1]])
    stats = m.stats()
    assert stats["serial_runs"] == 1 and stats["runs"] == 2 and stats["probe_warmups"] == 0
    for _ in range(5):
        np.testing.assert_array_equal(m.execute(list(good))[0], table[good[0]] + table[good[1]])


def test_one_stream_and_one_lane_have_no_serial_launch():
    # A one-stream program has nothing to serialize; on a device of one thread every
    # stream shares its single lane already.
    one = SpecBuilder("one")
    x = one.input("x", "float32", SHAPE)
    y = one.tensor("y", "float32", SHAPE)
    one.kernel("Tanh", [x], [y])
    one.outputs = [y]
    single = one.load(rt.Device(threads=1))
    split_on_one = _two_chunks().load(rt.Device(threads=1))
    x0, x1 = randn(*SHAPE), randn(*SHAPE)
    for _ in range(4):
        close(single.execute([x0])[0], np.tanh(x0))
        close(split_on_one.execute([x0, x1])[0], _want(x0, x1))
    for m in (single, split_on_one):
        stats = m.stats()
        assert stats["serial_runs"] == 0 and stats["probe_warmups"] == 0 and stats["runs"] == 4


def test_a_long_heavy_split_program_waits_before_probing_the_serial_mode():
    """A split whose launches are long (over kEarlyProbeNs, 20 ms) and heavy (its work over
    kEarlyProbeFlops a lane) does not probe the serial mode on its second launch: a probe is
    two launches at twice the time, and on resnet50 at batch 8 they fell in bench-zoo's 1.5-s
    window (half the rate). It waits until the kProbeMin-th launch (16), as the narrow set's
    build does."""
    k = 2048
    b = SpecBuilder("long", num_streams=2, num_events=1)
    w = b.const("w", (np.random.default_rng(0).standard_normal((k, k)) / k).astype(np.float32))
    outs = []
    for s in (0, 1):
        x = b.input(f"x{s}", "float32", (1024, k))
        y = b.tensor(f"y{s}", "float32", (1024, k))
        b.kernel("MatMul", [x, w], [y], stream=s)
        outs.append(y)
    b.record(0, stream=1)
    b.wait(0, stream=0)
    cat = b.tensor("cat", "float32", (2048, k))
    b.kernel("Concat", outs, [cat], stream=0, axis=0)
    b.outputs = [cat]
    spec = b.spec()
    spec["work_flops"] = 2 * 2 * 1024 * k * k  # 17 GFLOP: heavy on a lane of one thread
    m = rt.Model(rt.Device(threads=2), spec)
    x0, x1 = randn(1024, k), randn(1024, k)
    for _ in range(4):
        m.execute([x0, x1])
    stats = m.stats()
    long = stats["seconds"] / stats["runs"] > 0.02  # each launch over kEarlyProbeNs here
    assert not long or stats["serial_runs"] == 0, stats
