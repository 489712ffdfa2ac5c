"""Run requests against compiled graphs: every layout of valid float32 data (strided,
Fortran-order, reversed, big-endian, unaligned, read-only) gives the reference's result;
wrong dtypes, shapes, names, values (out-of-range Gather indices, a Reshape target that
does not fit) and absurd dimensions are a domain error; and wire tensors decode or are
refused before any allocation."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from graphengine.engine import wire
from graphengine.engine.dtypes import DType
from graphengine.engine.errors import GraphEngineError
from graphengine.v1 import graph_pb2 as pb

from .strategies import (
    accepted_or_domain_error,
    assert_close,
    check_domain_error,
    examples,
    reference,
    specs,
    time_limit,
    to_ir,
)


def _relayout(x: np.ndarray, how: str) -> np.ndarray:
    """The same float32 values in another memory layout (still valid data)."""
    if how == "fortran":
        return np.asfortranarray(x)
    if how == "strided":
        wide = np.zeros((*x.shape[:-1], x.shape[-1] * 2), x.dtype) if x.ndim else None
        if wide is None:
            return x
        wide[..., ::2] = x
        return wide[..., ::2]
    if how == "reversed":
        return np.flip(np.flip(x).copy()) if x.ndim else x
    if how == "big_endian":
        return x.astype(">f4")
    if how == "unaligned":
        buf = np.zeros(x.nbytes + 1, np.uint8)
        out = np.frombuffer(buf.data, np.float32, x.size, offset=1).reshape(x.shape)
        out = out.copy() if not x.size else out
        if x.size:
            buf[1:] = np.frombuffer(np.ascontiguousarray(x).tobytes(), np.uint8)
        return out
    if how == "readonly":
        y = x.copy()
        y.flags.writeable = False
        return y
    if how == "broadcast" and x.ndim and x.shape[0] == 1:
        return np.broadcast_to(x, x.shape)
    return x


LAYOUTS = ["fortran", "strided", "reversed", "big_endian", "unaligned", "readonly", "broadcast"]


@examples(75)
@given(spec=specs(max_nodes=5), how=st.lists(st.sampled_from(LAYOUTS), min_size=1, max_size=2),
       reuse=st.booleans())
def test_any_layout_of_valid_data_gives_the_reference(session, spec, how, reuse):
    """Also after a run with plain arrays (`reuse`): the fast path of a known signature."""
    feeds = spec.feeds()
    want = reference(spec, feeds)
    relaid = dict(feeds)
    for k, name in enumerate(relaid):
        relaid[name] = _relayout(relaid[name], how[k % len(how)])
        np.testing.assert_array_equal(relaid[name], feeds[name])
    gid = session.add_graph(to_ir(spec))
    try:
        with time_limit():
            if reuse:
                session.run_graph(gid, feeds)
            got = session.run_graph(gid, relaid)
        for name, w in want.items():
            assert_close(got[name], w, f"output {name} with inputs {how}\n{spec.describe()}")
    finally:
        session.remove_graph(gid)


def _wrong(x: np.ndarray, draw) -> object:
    """Something that is not this input: another dtype, shape, rank, or not an array."""
    kind = draw(st.sampled_from(["dtype", "dtype", "shape", "shape", "rank", "scalar", "empty",
                                 "huge", "object", "list", "ragged", "none", "string"]))
    if kind == "dtype":
        dt = draw(st.sampled_from([np.float64, np.float16, np.int32, np.int64, np.int8,
                                   np.uint8, np.bool_, np.complex64, np.uint64]))
        return x.astype(dt)
    if kind == "shape" and x.ndim:
        shape = list(x.shape)
        i = draw(st.integers(0, x.ndim - 1))
        shape[i] = draw(st.sampled_from([0, shape[i] + 1, max(1, shape[i] - 1), 2 * shape[i]]))
        return np.ones(shape, np.float32)
    if kind == "rank":
        return x.reshape(-1) if x.ndim != 1 else x.reshape(1, -1)
    if kind == "scalar":
        return np.float32(1.5)
    if kind == "empty":
        return np.zeros((0,) * max(1, x.ndim), np.float32)
    if kind == "huge":  # no memory behind it: a view broadcast to an absurd shape
        dims = draw(st.sampled_from([(1 << 40,), (1 << 20, 1 << 20), (1 << 58, 2),
                                     (*x.shape[:-1], 1 << 33) if x.ndim else (1 << 33,)]))
        return np.broadcast_to(np.float32(0), dims)
    if kind == "object":
        return np.array([object()] * max(1, x.size), dtype=object).reshape(x.shape or (1,))
    if kind == "list":
        return x.tolist()
    if kind == "ragged":
        return [[1.0, 2.0], [3.0]]
    if kind == "string":
        return np.array(["a"] * max(1, x.size)).reshape(x.shape or (1,))
    return None


@st.composite
def bad_requests(draw):
    spec = draw(specs(max_nodes=4))
    feeds = spec.feeds()
    how = draw(st.sampled_from(["wrong_value", "wrong_value", "missing", "extra",
                                "output_names", "not_a_mapping"]))
    if how == "wrong_value":
        name = draw(st.sampled_from(list(feeds)))
        feeds[name] = _wrong(feeds[name], draw)
    elif how == "missing":
        feeds.pop(draw(st.sampled_from(list(feeds))))
    elif how == "extra":
        feeds[draw(st.sampled_from(["", "zz", "t1", "x9"]))] = np.ones(2, np.float32)
    outputs = None
    if how == "output_names" or draw(st.integers(0, 4)) == 0:
        outputs = draw(st.lists(st.sampled_from([*spec.outputs, "nope", "", "x0"]),
                                max_size=3))
    if how == "not_a_mapping":
        feeds = draw(st.sampled_from([list(feeds.values()), None, 7, "x0"]))
    return spec, feeds, outputs, draw(st.booleans())


@examples(180)
@given(case=bad_requests())
def test_bad_request_is_a_domain_error(session, case):
    spec, feeds, outputs, warm = case
    gid = session.add_graph(to_ir(spec))
    try:
        if warm:  # a run with good inputs first: the request then meets the fast paths
            session.run_graph(gid, spec.feeds())
        shown = {k: (type(v).__name__, getattr(v, "dtype", None), getattr(v, "shape", None))
                 for k, v in feeds.items()} if isinstance(feeds, dict) else feeds
        with accepted_or_domain_error(f"request {shown}, outputs {outputs}\n{spec.describe()}"):
            session.run_graph(gid, feeds, outputs)
    finally:
        session.remove_graph(gid)


# ---- values only the request decides ------------------------------------------------------
def _data_dependent_model():
    """Gather with request indices, and Reshape to a request shape."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["data", "idx"], ["g"], axis=0),
         helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("Relu", ["r"], ["y"])], "data_dependent",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [5, 3]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("g", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.zeros(1, np.float32), "unused")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString()


def _onnx_reshape(x: np.ndarray, target: list[int]) -> np.ndarray | None:
    """ONNX Reshape (allowzero=0): 0 copies the input's dim, one -1 is inferred; None when
    the target does not fit."""
    dims = [x.shape[i] if t == 0 and i < x.ndim else t for i, t in enumerate(target)]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        return None
    try:
        return x.reshape(dims)
    except ValueError:
        return None


@examples(120)
@given(idx=st.lists(st.integers(-(1 << 62), 1 << 62) | st.integers(-8, 8), max_size=4),
       target=st.lists(st.integers(-3, 13) | st.integers(-(1 << 62), 1 << 62), min_size=2,
                       max_size=2))
def test_request_indices_and_shapes(session, idx, target):
    gid = session.add_graph(_data_dependent_model())
    try:
        rng = np.random.default_rng(0)
        data = rng.standard_normal((5, 3)).astype(np.float32)
        x = rng.standard_normal((2, 6)).astype(np.float32)
        feeds = {"data": data, "idx": np.array(idx, np.int64).reshape(-1),
                 "x": x, "s": np.array(target, np.int64)}
        valid_idx = all(-5 <= i < 5 for i in idx)
        want_y = _onnx_reshape(x, target)
        with time_limit():
            try:
                got = session.run_graph(gid, feeds)
            except GraphEngineError as exc:
                check_domain_error(exc, f"idx {idx}, shape {target}")
                assert not valid_idx or want_y is None, (
                    f"idx {idx}, shape {target}: valid request refused: {exc}")
                return
            except Exception as exc:
                check_domain_error(exc, f"idx {idx}, shape {target}")
        assert valid_idx, f"out-of-range indices {idx} were accepted: {got['g']}"
        np.testing.assert_array_equal(got["g"], data[np.array(idx, np.int64).reshape(-1)])
        assert want_y is not None, f"Reshape to {target} accepted: {got['y'].shape}"
        np.testing.assert_array_equal(got["y"], np.maximum(want_y, 0))
    finally:
        session.remove_graph(gid)


# ---- symbolic dims: one compile per signature ------------------------------------------------
def _symbolic_model():
    w = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]),
         helper.make_node("Softmax", ["m"], ["y"], axis=-1)], "symbolic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 3])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8).SerializeToString(), w


@examples(60)
@given(shapes=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1,
                       max_size=4),
       absurd=st.sampled_from([None, (1 << 40, 1), (1, 1 << 40), (1 << 20, 1 << 20)]))
def test_symbolic_signatures(session, shapes, absurd):
    model, w = _symbolic_model()
    gid = session.add_graph(model)
    try:
        for b, s in shapes:
            x = np.random.default_rng(b * 7 + s).standard_normal((b, s, 4)).astype(np.float32)
            with time_limit():
                got = session.run_graph(gid, {"x": x})["y"]
            m = x @ w
            e = np.exp(m - m.max(-1, keepdims=True, initial=-np.inf))
            assert_close(got, e / e.sum(-1, keepdims=True), f"batch {b}, seq {s}")
        if absurd is not None:
            x = np.broadcast_to(np.float32(0), (*absurd, 4))
            with accepted_or_domain_error(f"input of shape {x.shape}"):
                session.run_graph(gid, {"x": x})
    finally:
        session.remove_graph(gid)


# ---- wire tensors ----------------------------------------------------------------------------
@st.composite
def wire_tensors(draw):
    dtype = draw(st.sampled_from([*range(0, 16), 99, -1, 1 << 20]))
    shape = draw(st.lists(st.integers(-3, 6) | st.sampled_from([1 << 31, 1 << 40, 1 << 62,
                                                                -(1 << 62)]), max_size=4))
    n = draw(st.integers(0, 80) | st.sampled_from([3, 7, 13]))
    return pb.Tensor(name=draw(st.sampled_from(["t", "", "\u00e9"])), dtype=dtype, shape=shape,
                     data=bytes(draw(st.binary(min_size=n, max_size=n))))


@examples(300)
@given(t=wire_tensors(), limit=st.sampled_from([None, 1000, 1 << 20]))
def test_wire_tensor_decodes_or_is_refused(t, limit):
    try:
        with time_limit():
            arr = wire.tensor_from_pb(t, max_elements=limit)
    except GraphEngineError as exc:
        check_domain_error(exc, f"tensor {t}")
        return
    except Exception as exc:
        check_domain_error(exc, f"tensor {t}")
    assert arr.shape == tuple(t.shape)
    assert arr.nbytes == len(t.data)
    assert arr.dtype == wire.dtype_from_pb(t.dtype).numpy or DType.from_numpy(arr.dtype)
