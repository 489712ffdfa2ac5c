"""The session core's server-side features: gears, instances, limits and admission,
offline export/import, waiting work that stops, and the manager (ownership, quotas,
idle expiry)."""

from __future__ import annotations

import concurrent.futures
import gc
import threading
import time
import weakref

import numpy as np
import pytest

from graphengine.api.types import RunControl, SessionLimits
from graphengine.engine.errors import InvalidInput, InvalidModel, NotFound, ResourceExhausted
from graphengine.server.core import gears
from graphengine.server.core.manager import SessionManager
from graphengine.server.core.session import Session
from tests.integration.ge_models import mlp_onnx, ort_run, simple_graphdef

RTOL, ATOL = 1e-4, 1e-5


# ---- gears ------------------------------------------------------------------------------
def test_gear_plan_pad_and_concat() -> None:
    assert gears.normalize([4, 1, 4, 16]) == (1, 4, 16)
    with pytest.raises(InvalidInput, match="positive"):
        gears.normalize([0, 2])
    assert gears.plan(3, (1, 4, 16)) == [(0, 3, 4)]
    assert gears.plan(16, (1, 4, 16)) == [(0, 16, 16)]
    assert gears.plan(21, (1, 4, 16)) == [(0, 16, 16), (16, 21, 16)]
    assert gears.plan(17, (4,)) == [(0, 4, 4), (4, 8, 4), (8, 12, 4), (12, 16, 4), (16, 17, 4)]
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    padded = gears.pad(a, 4)
    assert padded.shape == (4, 2) and not padded[3].any() and (padded[:3] == a).all()
    assert gears.pad(a, 3) is a
    joined = gears.concat([{"y": a, "k": 1}, {"y": a, "k": 2}], {"y"})
    assert joined["y"].shape == (6, 2) and joined["k"] == 1
    with pytest.raises(InvalidInput, match="same batch"):
        gears.batch_rows("g", {"a": np.ones((2, 1)), "b": np.ones((3, 1))}, ["a", "b"])
    with pytest.raises(InvalidInput, match="empty"):
        gears.batch_rows("g", {"a": np.ones((0, 1))}, ["a"])


def test_geared_graph_pads_slices_and_splits() -> None:
    model = mlp_onnx(batch="batch", seed=4)
    with Session() as sess:
        gid = sess.add_graph(model, gears=[4, 1])
        sess.compile_graph(gid)  # every gear ahead
        info = sess.graph_info(gid)
        assert info.gears == (1, 4) and info.compiled_signatures == 2
        rng = np.random.default_rng(0)
        for rows in (1, 3, 4, 6, 9):
            x = rng.standard_normal((rows, 16)).astype(np.float32)
            out = sess.run_graph(gid, {"x": x})
            assert out["y"].shape == (rows, 5)
            np.testing.assert_allclose(out["y"], ort_run(model, {"x": x})["y"],
                                       rtol=RTOL, atol=ATOL)
        assert sess.graph_info(gid).compiled_signatures == 2  # no other shape compiled
        with pytest.raises(InvalidInput, match="dtype"):
            sess.run_graph(gid, {"x": np.ones((2, 16), np.float64)})
        with pytest.raises(InvalidInput, match="unknown input"):
            sess.run_graph(gid, {"x": np.ones((2, 16), np.float32), "z": np.ones(1)})


def test_gears_need_a_symbolic_batch_dimension() -> None:
    with Session() as sess, pytest.raises(InvalidInput, match="symbolic"):
        sess.add_graph(mlp_onnx(batch=2), gears=[1, 2])


# ---- instances, limits, admission ------------------------------------------------------
def test_instances_hold_their_own_memory_and_run_concurrently() -> None:
    model = mlp_onnx(batch=2)
    sizes = {}
    for count in (1, 3):
        with Session({"instances": count}) as sess:
            gid = sess.add_graph(model)
            sess.compile_graph(gid)
            sizes[count] = sess.device_bytes
            feeds = [{"x": np.ones((2, 16), np.float32)}] * 8
            with concurrent.futures.ThreadPoolExecutor(4) as pool:
                outs = list(pool.map(lambda f, s=sess, g=gid: s.run_graph(g, f)["y"], feeds))
            assert all(np.array_equal(o, outs[0]) for o in outs)
    assert 0 < sizes[1] < sizes[3] <= 3 * sizes[1]  # more arenas; weights may be shared


def test_a_session_validates_its_graph_once() -> None:
    # Validated when added (analysis): a compile of it runs the stages after validation,
    # with the same result; a graph compiled on its own is validated by the compile.
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import compile_graph

    model = mlp_onnx(batch="N")
    with Session() as sess:
        gid = sess.add_graph(model)
        report = sess.compile_graph(gid, {"x": (3, 16)})
        x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
        got = sess.run_graph(gid, {"x": x})["y"]
    (check,) = [r for r in report.passes if r.stage == "validate"]
    assert check.detail == "validated when the graph was added"
    assert report.nodes_before > 0 and report.tasks > 0
    np.testing.assert_allclose(got, ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
    alone = compile_graph(load_model(model), input_shapes={"x": (3, 16)})
    (check,) = [r for r in alone.report.passes if r.stage == "validate"]
    assert check.detail.endswith("nodes")  # validate's own record: it ran


def test_runs_of_a_changing_signature_and_bad_inputs_leave_nothing_in_flight() -> None:
    model = mlp_onnx(batch="N")
    rng = np.random.default_rng(3)
    with Session() as sess:
        gid = sess.add_graph(model)
        for n in (2, 3, 2, 3):  # each signature's model, then back: never the last one's
            x = rng.standard_normal((n, 16)).astype(np.float32)
            np.testing.assert_allclose(sess.run_graph(gid, {"x": x})["y"],
                                       ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
        x64 = rng.standard_normal((3, 16))  # float64: the general path says why not
        with pytest.raises(InvalidInput, match="input 'x': expected dtype float32, got float64"):
            sess.run_graph(gid, {"x": x64})
        with pytest.raises(InvalidInput, match="'x'"):
            sess.run_graph(gid, {"x": np.zeros((3, 17), np.float32)})
        with pytest.raises(InvalidInput):
            sess.run_graph(gid, {"x": x, "extra": x})
        assert sess.info().active_runs == 0 and sess.idle_seconds() > 0


def test_precision_and_instances_are_validated() -> None:
    with pytest.raises(InvalidInput, match="precision"):
        Session({"precision": "fp16"})
    with pytest.raises(InvalidInput, match="instances"):
        Session({"instances": 0})


def test_memory_quota_is_checked_before_load_and_says_asked_and_left() -> None:
    model = mlp_onnx(batch=2)
    with Session() as probe:
        gid = probe.add_graph(model)
        probe.compile_graph(gid)
        need = probe.device_bytes
    with Session({"memory_limit_bytes": need + need // 2}) as sess:
        first = sess.add_graph(model)
        sess.compile_graph(first)
        second = sess.add_graph(model)
        with pytest.raises(ResourceExhausted) as info:
            sess.compile_graph(second)
        message = str(info.value)
        assert f"needs {need} bytes" in message and f"{need // 2} left" in message
        assert sess.device_bytes == need  # nothing was loaded for the refused graph
    with Session(limits=SessionLimits(device_memory_bytes=need - 1)) as sess:
        gid = sess.add_graph(model)
        with pytest.raises(ResourceExhausted, match="the device has"):
            sess.compile_graph(gid)


def test_graph_count_node_count_and_declared_size_limits() -> None:
    with Session(limits=SessionLimits(max_graphs=1)) as sess:
        sess.add_graph(simple_graphdef())
        with pytest.raises(ResourceExhausted, match="maximum of 1 graphs"):
            sess.add_graph(simple_graphdef())
    with Session(limits=SessionLimits(max_nodes=2)) as sess, \
            pytest.raises(ResourceExhausted, match="3 nodes"):
        sess.add_graph(simple_graphdef())
    with Session(limits=SessionLimits(max_tensor_elements=5)) as sess, \
            pytest.raises(ResourceExhausted, match="input_a"):
        sess.add_graph(simple_graphdef())  # declares 2x3 = 6 elements


def test_closing_frees_the_loaded_models() -> None:
    sess = Session()
    gid = sess.add_graph(mlp_onnx(batch=2))
    sess.compile_graph(gid)
    pool = sess._graphs[gid].models[next(iter(sess._graphs[gid].models))]
    ref = weakref.ref(pool)
    del pool
    assert sess.device_bytes > 0
    sess.close()
    gc.collect()
    assert ref() is None and sess.device_bytes == 0
    with pytest.raises(NotFound, match="closed"):
        sess.graph_info(gid)


# ---- waiting work stops ----------------------------------------------------------------
def test_a_caller_already_gone_or_late_does_not_start_a_run() -> None:
    """A Python cancel callable (no token) or a passed deadline is checked as the run
    starts: nothing runs for a caller who is gone."""
    with Session() as sess:
        gid = sess.add_graph(mlp_onnx(batch=2))
        x = {"x": np.ones((2, 16), np.float32)}
        with pytest.raises(concurrent.futures.CancelledError, match="cancelled"):
            sess.run_graph(gid, x, control=RunControl(cancelled=lambda: True))
        with pytest.raises(TimeoutError, match="deadline"):
            sess.run_graph(gid, x, control=RunControl(deadline=time.monotonic() - 1))
        assert sess.run_graph(gid, x, control=RunControl(cancelled=lambda: False))


def test_the_runtime_queue_stops_a_waiting_run_on_deadline_and_cancel_token() -> None:
    """A deadline alone, or a native cancel token (what the gRPC layer gives), is watched
    by the runtime's own queue: the run ends as DeadlineExceeded / Cancelled while the only
    instance is busy, the busy run is not disturbed, and stage times are recorded."""
    from graphengine import _runtime
    from graphengine.errors import Cancelled, DeadlineExceeded
    from graphengine.server.timing import StageTimes

    with Session() as sess:
        gid = sess.add_graph(mlp_onnx(batch=2))
        sess.compile_graph(gid)
        (pool,) = sess._graphs[gid].models.values()
        x = {"x": np.ones((2, 16), np.float32)}
        want = sess.run_graph(gid, x)["y"]
        busy = threading.Thread(target=lambda: pool.execute(x, iterations=200_000))
        busy.start()  # holds the only instance for a while (one long sink-mode launch)
        time.sleep(0.05)
        try:
            times = StageTimes()
            with pytest.raises(DeadlineExceeded, match="waited for a free instance"):
                sess.run_graph(gid, x, control=RunControl(deadline=time.monotonic() + 0.05),
                               times=times)
            assert times.seconds["queue"] > 0
            token = _runtime.CancelToken()
            threading.Timer(0.05, token.cancel).start()
            with pytest.raises(Cancelled, match="cancelled"):
                sess.run_graph(gid, x, control=RunControl(token=token))
        finally:
            busy.join()
        times = StageTimes()
        got = sess.run_graph(gid, x, control=RunControl(token=_runtime.CancelToken(),
                                                        deadline=time.monotonic() + 5),
                             times=times)["y"]
        np.testing.assert_array_equal(got, want)
        assert times.seconds["execute"] > 0


# ---- offline models --------------------------------------------------------------------
def test_export_and_import_round_trip() -> None:
    model = mlp_onnx(batch="batch", seed=9)
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    with Session() as sess:
        geared = sess.add_graph(model, gears=[1, 4])
        blob = sess.export_model(geared)
        assert blob[:4] == b"GEOM"
        gid = sess.import_model(blob, name="copy")
        info = sess.graph_info(gid)
        assert info.name == "copy" and info.gears == (1, 4)
        np.testing.assert_allclose(sess.run_graph(gid, {"x": x})["y"],
                                   ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
        plain = sess.add_graph(model)
        with pytest.raises(InvalidInput, match="input_shapes"):
            sess.export_model(plain)
        fixed = sess.import_model(sess.export_model(plain, {"x": [3, 16]}))
        np.testing.assert_allclose(sess.run_graph(fixed, {"x": x})["y"],
                                   ort_run(model, {"x": x})["y"], rtol=RTOL, atol=ATOL)
        with pytest.raises(InvalidModel, match="GEOM"):
            sess.import_model(model.SerializeToString())
        for cut in (10, len(blob) // 2, len(blob) - 1):
            with pytest.raises(InvalidModel):
                sess.import_model(blob[:cut])


# ---- the manager ------------------------------------------------------------------------
def test_manager_ownership_quota_ceiling_and_idle_expiry() -> None:
    manager = SessionManager(memory_limit_bytes=1000, idle_seconds=0.2)
    mine = manager.create(owner="alice")
    assert mine.options.memory_limit_bytes == 1000  # the server's quota by default
    with pytest.raises(ResourceExhausted, match="per-session limit"):
        manager.create({"memory_limit_bytes": 5000}, owner="alice")
    with pytest.raises(NotFound):
        manager.get(mine.id, owner="bob")
    with pytest.raises(NotFound):
        manager.close(mine.id, owner=None)
    assert [s.id for s in manager.list("alice")] == [mine.id] and manager.list("bob") == []
    busy = manager.create(owner="bob")
    with busy._running():  # a run in progress is never idle
        time.sleep(0.3)
        assert manager.expire_idle() == [mine.id]
    assert len(manager) == 1 and mine.closed and not busy.closed
    manager.close_all()
    assert len(manager) == 0 and busy.closed


def test_a_grpc_call_gives_its_run_a_native_cancel_token() -> None:
    """server/rpc/calls.run_control: the token is cancelled by gRPC's callback when the call
    ends, or at once for a call that has already ended."""
    from graphengine.server.rpc import calls

    class Context:
        def __init__(self, active: bool) -> None:
            self.active, self.callbacks = active, []

        def time_remaining(self):
            return 2.0

        def is_active(self) -> bool:
            return self.active

        def add_callback(self, fn) -> bool:
            if not self.active:
                return False
            self.callbacks.append(fn)
            return True

    live = Context(True)
    control = calls.run_control(live)
    assert not control.token.cancelled and 1.0 < control.remaining() <= 2.0
    live.active = False
    for fn in live.callbacks:
        fn()
    assert control.token.cancelled and control.cancelled()
    assert calls.run_control(Context(False)).token.cancelled
