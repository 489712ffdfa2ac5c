"""Session variables in process: Variable / Assign / AssignAdd / AssignSlice through the
builder, the compiler and the runtime; persistence across runs and graphs; the read/write
semantics; isolation between sessions; quota; concurrent writers; sink mode."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.engine.errors import InvalidGraph, InvalidInput, NotFound, ResourceExhausted
from graphengine.engine.importers.graphdef import import_graphdef
from graphengine.engine.pipeline import compile_graph
from graphengine.errors import InvalidArgument


def counter(name: str = "acc", n: int = 4, dtype=np.float32) -> graphengine.Graph:
    """x -> AssignAdd(acc, x); outputs the variable after the add."""
    g = graphengine.Graph("counter")
    x = g.input("x", np.dtype(dtype).name, (n,))
    v = g.variable(name, np.zeros(n, dtype))
    g.output(ops.AssignAdd(v, x), name="total")
    return g


def reader(name: str = "acc", n: int = 4) -> graphengine.Graph:
    g = graphengine.Graph("reader")
    v = g.variable(name, shape=(n,), dtype="float32")
    g.output(ops.Mul(v, np.float32(2)), name="twice")
    return g


def test_a_variable_persists_across_runs_and_is_shared_by_the_sessions_graphs() -> None:
    with graphengine.Session() as s:
        add, read = s.add_graph(counter()), s.add_graph(reader())
        assert s.run_graph(read, {})["twice"].tolist() == [0, 0, 0, 0]
        for k in range(1, 4):
            out = s.run_graph(add, {"x": np.arange(4, dtype=np.float32)})
            np.testing.assert_array_equal(out["total"], k * np.arange(4))
        np.testing.assert_array_equal(s.run_graph(read, {})["twice"], 6 * np.arange(4))
        np.testing.assert_array_equal(s.get_variables()["acc"], 3 * np.arange(4))
        assert [(t.name, t.dtype.value, t.shape) for t in s.list_variables()] == \
            [("acc", "float32", (4,))]


def test_the_initial_value_is_used_once_and_a_later_graph_shares_the_state() -> None:
    g = graphengine.Graph("init")
    v = g.variable("acc", np.full(4, 5, np.float32))
    g.output(ops.AssignAdd(v, np.ones(4, np.float32)), name="total")
    with graphengine.Session() as s:
        first = s.add_graph(g)
        assert s.run_graph(first, {})["total"].tolist() == [6] * 4
        second = s.add_graph(g)  # the variable exists: its initial value is not applied again
        assert s.run_graph(second, {})["total"].tolist() == [7] * 4


def test_reads_see_the_value_from_before_the_write_unless_they_read_its_output() -> None:
    g = graphengine.Graph("order")
    x = g.input("x", "float32", (3,))
    v = g.variable("v", np.array([1, 2, 3], np.float32))
    w = ops.Assign(v, x)
    # listed after the write, but reading the Variable's output: the value before the run
    g.output(ops.Add(w, np.float32(0)), name="after")
    g.output(ops.Add(v, np.float32(0)), name="before")
    g.output(v, name="before_raw")  # the variable itself as an output: a copy from before
    g.output(ops.Add(v, w), name="both")  # reads both values
    with graphengine.Session() as s:
        gid = s.add_graph(g)
        out = s.run_graph(gid, {"x": np.array([10, 20, 30], np.float32)})
        assert out["before"].tolist() == [1, 2, 3]
        assert out["before_raw"].tolist() == [1, 2, 3]
        assert out["after"].tolist() == [10, 20, 30]
        assert out["both"].tolist() == [11, 22, 33]
        out = s.run_graph(gid, {"x": np.array([7, 8, 9], np.float32)})
        assert out["before"].tolist() == [10, 20, 30] and out["both"].tolist() == [17, 28, 39]


def test_chained_writes_apply_in_order_and_unordered_writes_are_refused() -> None:
    g = graphengine.Graph("chain")
    v = g.variable("v", np.zeros(2, np.int64))
    w = ops.AssignAdd(ops.Assign(v, np.array([5, 6], np.int64)), np.array([1, 1], np.int64))
    g.output(w, name="v_now")
    with graphengine.Session() as s:
        gid = s.add_graph(g)
        assert s.run_graph(gid, {})["v_now"].tolist() == [6, 7]
        assert s.get_variables(["v"])["v"].tolist() == [6, 7]
    bad = graphengine.Graph("race")
    v = bad.variable("v", np.zeros(2, np.int64))
    bad.output(ops.Assign(v, np.array([1, 2], np.int64)), name="a")
    bad.output(ops.AssignAdd(v, np.array([1, 1], np.int64)), name="b")
    with graphengine.Session() as s, \
            pytest.raises(InvalidGraph, match="variable 'v' is written by .* with no order"):
        s.add_graph(bad)


def test_a_write_must_take_a_variable_and_fit_its_type() -> None:
    g = graphengine.Graph("bad")
    x = g.input("x", "float32", (2,))
    with pytest.raises(InvalidGraph, match="input 0 must be a variable .* got a graph input"):
        ops.Assign(x, x)
    v = g.variable("v", np.zeros(2, np.float32))
    with pytest.raises(InvalidGraph, match=r"must have the variable's type float32\[2\]"):
        ops.Assign(v, np.zeros(3, np.float32))
    with pytest.raises(InvalidGraph, match="delta must be float32"):
        ops.AssignAdd(v, np.zeros(2, np.int64))
    with pytest.raises(InvalidGraph, match="give an initial value, or a shape and a dtype"):
        g.variable("w")


def test_variables_are_invisible_to_other_sessions() -> None:
    with graphengine.Session() as a, graphengine.Session() as b:
        ga, gb = a.add_graph(counter()), b.add_graph(counter())
        for _ in range(3):
            a.run_graph(ga, {"x": np.ones(4, np.float32)})
        assert b.run_graph(gb, {"x": np.ones(4, np.float32)})["total"].tolist() == [1] * 4
        a.set_variables({"secret": np.arange(3)})
        with pytest.raises(NotFound, match="variable 'secret' not found"):
            b.get_variables(["secret"])
        assert [t.name for t in b.list_variables()] == ["acc"]


def test_a_graph_must_declare_a_variable_as_the_session_holds_it() -> None:
    with graphengine.Session() as s:
        s.add_graph(counter())
        with pytest.raises(InvalidInput, match=r"declares variable 'acc' as int64\[4\]; "
                                               r"session .* holds it as float32\[4\]"):
            s.add_graph(counter(dtype=np.int64))
        with pytest.raises(InvalidInput, match=r"graph 1 of session .* uses it"):
            s.set_variables({"acc": np.zeros(5, np.float32)})
        s.set_variables({"acc": np.full(4, 2, np.float32)})  # same type: written
        assert s.get_variables()["acc"].tolist() == [2] * 4
        s.remove_graph(1)  # no graph uses it now: another shape replaces it
        s.set_variables({"acc": np.zeros(5, np.float32)})
        assert s.get_variables()["acc"].shape == (5,)


def test_set_variables_is_all_or_nothing() -> None:
    with graphengine.Session() as s:
        s.add_graph(counter())
        with pytest.raises(InvalidInput, match="dtype complex128 is not one a variable holds"):
            s.set_variables({"acc": np.ones(4, np.float32), "z": np.zeros(2, complex)})
        assert s.get_variables()["acc"].tolist() == [0] * 4
        assert [t.name for t in s.list_variables()] == ["acc"]


def test_variables_count_against_the_session_quota() -> None:
    with graphengine.Session({"memory_limit_bytes": 64 << 10}) as s:
        big = graphengine.Graph("big")
        v = big.variable("big", shape=(32 << 10,), dtype="float32")  # 128 KiB
        big.output(ops.Add(v, np.float32(1)), name="y")
        with pytest.raises(ResourceExhausted, match=r"variable 'big' \(float32\[32768\]\) "
                                                    r"needs 131072 bytes.* 65536 byte limit"):
            s.add_graph(big)
        assert s.list_variables() == []
        s.set_variables({"half": np.zeros(8 << 10, np.float32)})  # 32 KiB of the 64
        assert s.info().device_bytes >= 32 << 10
        with pytest.raises(ResourceExhausted, match="needs 40960 bytes"):
            s.set_variables({"more": np.zeros(10 << 10, np.float32)})


def test_concurrent_writers_never_tear_a_variable() -> None:
    n, runs, threads = 1 << 14, 150, 4
    g = graphengine.Graph("bump")
    v = g.variable("c", np.zeros(n, np.int64))
    g.output(ops.Slice(ops.AssignAdd(v, np.ones(n, np.int64)), np.array([0]), np.array([1])),
             name="first")
    torn: list[np.ndarray] = []
    with graphengine.Session({"instances": threads}) as s:
        gid = s.add_graph(g)

        def write() -> None:
            for _ in range(runs):
                s.run_graph(gid, {})

        def watch() -> None:
            for _ in range(runs):
                c = s.get_variables(["c"])["c"]
                if c.min() != c.max():
                    torn.append(c)

        workers = [threading.Thread(target=write) for _ in range(threads)]
        workers.append(threading.Thread(target=watch))
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        final = s.get_variables(["c"])["c"]
    assert not torn, f"a reader saw a half-written variable: {torn[0][:4]}...{torn[0][-4:]}"
    assert final.min() == final.max() == runs * threads


def test_sink_mode_carries_the_state_from_one_iteration_to_the_next() -> None:
    with graphengine.Session() as s:
        gid = s.add_graph(counter())
        xs = np.arange(20, dtype=np.float32).reshape(5, 4)
        every = s.run_graph(gid, {"x": xs}, iterations=5, return_all=True)["total"]
        np.testing.assert_array_equal(every, np.cumsum(xs, axis=0))
        last = s.run_graph(gid, {"x": np.ones(4, np.float32)}, iterations=3)["total"]
        np.testing.assert_array_equal(last, xs.sum(0) + 3)


def cache_writer(length: int = 6) -> graphengine.Graph:
    """AssignSlice of one row at a position read from an input; outputs the cache."""
    g = graphengine.Graph("cache")
    row = g.input("row", "float32", (2, 1, 3))
    pos = g.input("pos", "int64", (1,))
    cache = g.variable("cache", shape=(2, length, 3), dtype="float32")
    g.output(ops.AssignSlice(cache, row, pos, axis=1), name="cache_now")
    return g


def test_assign_slice_writes_only_at_the_position() -> None:
    with graphengine.Session() as s:
        gid = s.add_graph(cache_writer())
        expected = np.zeros((2, 6, 3), np.float32)
        for pos in (0, 3, 5):
            row = np.full((2, 1, 3), pos + 1, np.float32)
            expected[:, pos:pos + 1] = row
            out = s.run_graph(gid, {"row": row, "pos": np.array([pos])})["cache_now"]
            np.testing.assert_array_equal(out, expected)
        with pytest.raises(InvalidArgument, match=r"start 6 out of range \[0, 5\]"):
            s.run_graph(gid, {"row": np.ones((2, 1, 3), np.float32), "pos": np.array([6])})
        np.testing.assert_array_equal(s.get_variables()["cache"], expected)  # unchanged


def test_the_graphdef_carries_variables_and_their_writes() -> None:
    gd = counter().to_graphdef()
    nodes = {n.op_type for n in gd.nodes}
    assert {"Variable", "AssignAdd"} <= nodes
    with graphengine.Session() as s:
        gid = s.add_graph(import_graphdef(gd))
        s.run_graph(gid, {"x": np.ones(4, np.float32)})
        assert s.run_graph(gid, {"x": np.ones(4, np.float32)})["total"].tolist() == [2] * 4


def test_an_offline_model_creates_its_variables_in_the_importing_session() -> None:
    g = graphengine.Graph("init")
    v = g.variable("acc", np.full(2, 5, np.int32))
    g.output(ops.AssignAdd(v, np.ones(2, np.int32)), name="total")
    with graphengine.Session() as s:
        data = s.export_model(s.add_graph(g))
    with graphengine.Session() as s:
        gid = s.import_model(data)
        assert s.run_graph(gid, {})["total"].tolist() == [6, 6]
        assert s.run_graph(gid, {})["total"].tolist() == [7, 7]


def test_the_write_is_ordered_after_every_reader_in_the_compiled_program() -> None:
    g = graphengine.Graph("order")
    v = g.variable("v", np.zeros(4, np.float32))
    g.output(ops.Assign(v, np.ones(4, np.float32)), name="c")  # listed before the readers
    r1 = ops.Relu(v)
    r2 = ops.Reshape(v, np.array([2, 2]))  # a view of the variable's bytes
    g.output(ops.Add(r1, np.float32(1)), name="a")
    g.output(ops.Mul(r2, np.float32(2)), name="b")
    compiled = compile_graph(g.to_ir())
    (prog,) = compiled.programs
    names = [t.name for t in prog.tasks if t.kind in ("kernel", "copy")]
    write = next(i for i, t in enumerate(prog.tasks) if t.op == "Assign")
    readers = [i for i, t in enumerate(prog.tasks) if t.op in ("Relu", "Mul")]
    assert readers and all(i < write for i in readers), names
    assert [s.name for s in compiled.variables] == ["v"] and compiled.variables[0].written


def test_a_device_without_variable_kernels_refuses_the_graph_by_name() -> None:
    with graphengine.Session({"options": {"target": "ref"}}) as s, \
            pytest.raises(InvalidGraph, match=r"no engine runs node .*\(AssignAdd\): device: .*"
                                              r"host: a session variable lives in the device"):
        s.compile_graph(s.add_graph(counter()))


def test_a_reader_on_the_host_engine_sees_the_value_from_before_the_write() -> None:
    g = graphengine.Graph("host_reader")
    x = g.input("x", "float32", (3,))
    v = g.variable("v", np.array([0, 1, 2], np.float32))
    g.output(ops.Assign(v, x), name="after")
    g.output(ops.Atan(v), name="atan_before")  # Atan has no device kernel: a host step
    with graphengine.Session() as s:
        gid = s.add_graph(g)
        report = s.compile_graph(gid)
        engines = {p.op_type: p.engine for p in report.placements}
        assert engines["Atan"] == "host" and engines["Assign"] == "device"
        out = s.run_graph(gid, {"x": np.array([5, 6, 7], np.float32)})
        np.testing.assert_allclose(out["atan_before"], np.arctan([0, 1, 2]), rtol=1e-6)
        assert out["after"].tolist() == [5, 6, 7]
        out = s.run_graph(gid, {"x": np.zeros(3, np.float32)})
        np.testing.assert_allclose(out["atan_before"], np.arctan([5, 6, 7]), rtol=1e-6)


def test_a_writer_that_gives_up_waiting_lets_the_readers_it_held_off_go() -> None:
    from graphengine.server.core.variables import _RWLock

    lock = _RWLock()
    assert lock.acquire(False, None)  # a run reading the variable
    got = threading.Event()
    gave_up = threading.Event()

    def writer() -> None:  # waits, then gives up (its caller's deadline passed)
        if not lock.acquire(True, 0.5):
            gave_up.set()

    def reader() -> None:  # held off while the writer waits
        if lock.acquire(False, None):
            got.set()
            lock.release(False)

    w = threading.Thread(target=writer)
    w.start()
    while not lock._writers_waiting and w.is_alive():
        threading.Event().wait(0.001)
    r = threading.Thread(target=reader, daemon=True)
    r.start()
    w.join()
    r.join(30)  # a hang guard: without a wake-up the reader would wait forever
    lock.release(False)
    assert gave_up.is_set() and got.is_set()
