"""Tests of graphengine._runtime, the native device runtime (host backend).

Specs are built by hand with SpecBuilder; every kernel is compared against a numpy
reference.
"""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest

from graphengine import _runtime as rt

RNG = np.random.default_rng(0)


# ---- spec building -----------------------------------------------------------------------


def _align(n: int, a: int = 64) -> int:
    return (n + a - 1) // a * a


class SpecBuilder:
    """Lays tensors out in an arena / weight region and collects tasks."""

    def __init__(self, name: str = "m", num_streams: int = 1, num_events: int = 0) -> None:
        self.name = name
        self.num_streams = num_streams
        self.num_events = num_events
        self.tensors: list[dict] = []
        self.tasks: list[dict] = []
        self.weights = bytearray()
        self.arena = 0
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def tensor(self, name: str, dtype: str, shape, offset: int | None = None) -> int:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if offset is None:
            offset = _align(self.arena)
        self.arena = max(self.arena, offset + nbytes)
        self.tensors.append({"name": name, "dtype": dtype, "shape": list(shape),
                             "region": "arena", "offset": offset})
        return len(self.tensors) - 1

    def const(self, name: str, value: np.ndarray) -> int:
        value = np.ascontiguousarray(value)
        offset = _align(len(self.weights))
        self.weights.extend(b"\0" * (offset - len(self.weights)))
        self.weights.extend(value.tobytes())
        self.tensors.append(
            {"name": name, "dtype": value.dtype.name, "shape": list(value.shape),
             "region": "weight", "offset": offset}
        )
        return len(self.tensors) - 1

    def input(self, name: str, dtype: str, shape) -> int:
        t = self.tensor(name, dtype, shape)
        self.inputs.append(t)
        return t

    def kernel(self, op: str, inputs, outputs, name: str | None = None, stream: int = 0,
               **attrs) -> None:
        self.tasks.append({
            "kind": "kernel", "name": name or f"{op.lower()}{len(self.tasks)}", "op": op,
            "stream": stream, "inputs": list(inputs), "outputs": list(outputs), "attrs": attrs,
        })

    def record(self, event: int, stream: int) -> None:
        self.tasks.append({"kind": "record", "name": f"record{len(self.tasks)}",
                           "stream": stream, "event": event})

    def wait(self, event: int, stream: int) -> None:
        self.tasks.append({"kind": "wait", "name": f"wait{len(self.tasks)}",
                           "stream": stream, "event": event})

    def spec(self) -> dict:
        return {
            "name": self.name,
            "arena_bytes": _align(self.arena),
            "weights": np.frombuffer(bytes(self.weights), dtype=np.uint8),
            "tensors": self.tensors,
            "num_streams": self.num_streams,
            "num_events": self.num_events,
            "tasks": self.tasks,
            "inputs": self.inputs,
            "outputs": self.outputs,
        }

    def load(self, device: rt.Device | None = None) -> rt.Model:
        return rt.Model(device or DEVICE, self.spec())


DEVICE = rt.Device()


class Const:
    """Marks a run_op input as a constant in the weight region."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = np.asarray(value)


def run_op(op: str, inputs, out_shape, out_dtype: str = "float32", n_outputs: int = 1,
           **attrs):
    """Runs one node; inputs are arrays (model inputs), Const (weights) or None (omitted)."""
    model, feeds = load_op(op, inputs, out_shape, out_dtype, n_outputs, **attrs)
    result = model.execute(feeds)
    return result if n_outputs > 1 else result[0]


def load_op(op: str, inputs, out_shape, out_dtype: str = "float32", n_outputs: int = 1,
            instances: int = 1, **attrs) -> tuple[rt.Model, list[np.ndarray]]:
    """Loads one node (named "fc"); returns the model and its feeds."""
    b = SpecBuilder(op)
    idx, feeds = [], []
    for i, x in enumerate(inputs):
        if x is None:
            idx.append(-1)
        elif isinstance(x, Const):
            idx.append(b.const(f"c{i}", x.value))
        else:
            x = np.asarray(x)
            idx.append(b.input(f"x{i}", x.dtype.name, x.shape))
            feeds.append(x)
    shapes = out_shape if n_outputs > 1 else [out_shape]
    dtypes = out_dtype if n_outputs > 1 else [out_dtype]
    outs = [b.tensor(f"y{k}", dt, s) for k, (s, dt) in enumerate(zip(shapes, dtypes))]
    b.outputs = outs
    b.kernel(op, idx, outs, name="fc", **attrs)
    return rt.Model(DEVICE, b.spec(), instances), feeds


def randn(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def close(a, b, rtol=1e-4, atol=1e-5) -> None:
    np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# ---- numpy references --------------------------------------------------------------------


def conv_ref(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    out = np.zeros((n, m, oh, ow), np.float64)
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg]
        for i in range(kh):
            for j in range(kw):
                hi, wj = i * dilations[0], j * dilations[1]
                patch = xs[:, :, hi:hi + strides[0] * (oh - 1) + 1:strides[0],
                           wj:wj + strides[1] * (ow - 1) + 1:strides[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out.astype(np.float32)


def pool_ref(x, kernel, strides, pads, out_hw, mode, count_include_pad=0):
    n, c, h, w = x.shape
    oh, ow = out_hw
    out = np.zeros((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * strides[0] - pads[0], j * strides[1] - pads[1]
            h1, w1 = h0 + kernel[0], w0 + kernel[1]
            hs, ws = max(h0, 0), max(w0, 0)
            he, we = min(h1, h), min(w1, w)
            win = x[:, :, hs:he, ws:we]
            if mode == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            else:
                if count_include_pad:
                    cnt = (min(h1, h + pads[2]) - h0) * (min(w1, w + pads[3]) - w0)
                else:
                    cnt = (he - hs) * (we - ws)
                out[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return out


ERF = np.vectorize(math.erf, otypes=[np.float32])


# ---- basics ------------------------------------------------------------------------------


def test_module_surface():
    assert issubclass(rt.InvalidArgument, rt.Error)
    assert issubclass(rt.Error, RuntimeError)
    ops = rt.supported_ops()
    for op in ("Conv", "MatMul", "Gemm", "Gather", "LayerNormalization", "Softmax", "Where"):
        assert op in ops
    assert rt.dnnl_version().startswith("3.")
    d = rt.Device(threads=1)
    assert d.name == "host" and d.threads == 1
    assert rt.Device().threads >= 1


def test_model_properties_and_stats():
    b = SpecBuilder("props")
    x = b.input("x", "float32", [2, 3])
    y = b.tensor("y", "float32", [2, 3])
    b.kernel("Relu", [x], [y])
    b.outputs = [y]
    m = b.load()
    assert m.name == "props" and m.num_tasks == 1 and m.num_streams == 1
    xv = randn(2, 3)
    for _ in range(3):
        close(m.execute([xv])[0], np.maximum(xv, 0))
    s = m.stats()
    assert s["runs"] == 3 and s["seconds"] > 0 and s["streams"] == 1 and s["tasks"] == 1
    assert s["arena_bytes"] >= 2 * 24 and s["weight_bytes"] == 0
    # x is read from the caller's array and y written into the returned one: no copies.
    assert s["bytes_copied"] == 0 and s["bytes_zero_copy"] == 3 * 2 * 24
    assert m.zero_copy == {"inputs": ["x"], "outputs": ["y"]}


def test_outputs_are_fresh_arrays_and_noncontiguous_inputs_accepted():
    b = SpecBuilder()
    x = b.input("x", "float32", [3, 4])
    y = b.tensor("y", "float32", [3, 4])
    b.kernel("Neg", [x], [y])
    b.outputs = [y]
    m = b.load()
    base = randn(4, 3)
    r1 = m.execute([base.T])[0]  # a transposed (non C-contiguous) view
    close(r1, -base.T)
    r2 = m.execute([np.zeros((3, 4), np.float32)])[0]
    close(r1, -base.T)  # r1 owns its memory: not overwritten by the next run
    assert r1.flags.owndata or r1.base is not None
    assert r1.flags.c_contiguous and np.all(r2 == 0)
    big_endian = np.arange(12, dtype=">f4").reshape(3, 4)
    close(m.execute([big_endian])[0], -np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(rt.InvalidArgument, match="takes a list"):
        m.execute("not a list")


def test_run_named_takes_exactly_the_bound_inputs():
    b = SpecBuilder()
    x = b.input("x", "float32", [3, 4])
    b.input("i", "int64", [2])  # read by no kernel: still bound and checked
    y = b.tensor("y", "float32", [3, 4])
    b.kernel("Neg", [x], [y])
    b.outputs = [y]
    m = b.load()
    with pytest.raises(rt.InvalidArgument, match="bind_names"):  # not bound yet
        m.run_named({"x": np.zeros((3, 4), np.float32)})
    with pytest.raises(rt.InvalidArgument, match="1 input names for 2 inputs"):
        m.bind_names(["a"], [("out", 0)])
    with pytest.raises(rt.InvalidArgument, match=r"index in \[0, 1\)"):
        m.bind_names(["a", "b"], [("out", 1)])
    m.bind_names(["a", "b"], [("out", 0), ("again", 0)])
    base = randn(3, 4)
    ids = np.arange(2, dtype=np.int64)
    got = m.run_named({"a": base, "b": ids})
    assert sorted(got) == ["again", "out"] and got["out"] is got["again"]
    close(got["out"], -base)
    assert m.stats()["runs"] == 1
    # Anything but exactly the bound inputs at their dtypes and shapes: a RunMismatch naming
    # the input and how it is off, and no run.
    for bad, want in (({"a": base}, ("b", "missing")),
                      ({"a": base, "b": ids, "c": ids}, (None, "count")),
                      ({"a": base, "c": ids}, ("b", "missing")),
                      ({"a": base.astype(np.float64), "b": ids}, ("a", "dtype")),
                      ({"a": base[:2], "b": ids}, ("a", "shape")),
                      ({"a": randn(4, 3).T, "b": ids}, ("a", "not_an_array")),
                      ({"a": base.view(np.matrix), "b": ids}, ("a", "not_an_array")),
                      ({"a": base.tolist(), "b": ids}, ("a", "not_an_array")),
                      ({"a": base, "b": ids.astype(np.int32)}, ("b", "dtype"))):
        got = m.run_named(bad)
        assert isinstance(got, rt.RunMismatch) and (got.input, got.kind) == want, (bad, got)
    assert m.run_named([base, ids]).kind == "not_a_dict"
    assert m.stats()["runs"] == 1
    close(m.run_named({"b": ids, "a": base})["out"], -base)
    # int64 by kind and size: numpy's long long is one too
    close(m.run_named({"a": base, "b": ids.astype(np.longlong)})["out"], -base)
    close(m.execute([base, ids.astype(np.longlong)])[0], -base)


def test_scalar_tensors_and_bool_bytes():
    b = SpecBuilder()
    x = b.input("x", "float32", [])
    y = b.tensor("y", "float32", [])
    b.kernel("Neg", [x], [y])
    c = b.input("c", "bool", [3])
    f = b.tensor("f", "float32", [3])
    b.kernel("Cast", [c], [f], to="float32")
    b.outputs = [y, f]
    m = b.load()
    cond = np.array([0, 1, 2], np.uint8).view(np.bool_)  # a non-canonical "true" byte
    y_out, f_out = m.execute([np.float32(3), cond])
    assert y_out.shape == () and y_out == -3
    np.testing.assert_array_equal(f_out, [0, 1, 1])


# ---- Conv --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cfg",
    [
        dict(c=4, m=6, hw=(9, 9), k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), group=1),
        dict(c=4, m=8, hw=(10, 7), k=(3, 2), strides=(2, 1), pads=(0, 1, 1, 0), group=2),
        dict(c=3, m=5, hw=(11, 11), k=(3, 3), strides=(1, 1), pads=(2, 2, 2, 2), group=1,
             dilations=(2, 2)),
        dict(c=16, m=16, hw=(12, 12), k=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), group=16),
        dict(c=32, m=64, hw=(7, 7), k=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), group=1),
    ],
)
def test_conv_matches_reference(cfg):
    c, m, (h, w), k, group = cfg["c"], cfg["m"], cfg["hw"], cfg["k"], cfg["group"]
    dil = cfg.get("dilations", (1, 1))
    x = randn(2, c, h, w)
    wt = randn(m, c // group, *k)
    bias = randn(m)
    ref = conv_ref(x, wt, bias, cfg["strides"], cfg["pads"], dil, group)
    out = run_op("Conv", [x, Const(wt), Const(bias)], ref.shape, strides=list(cfg["strides"]),
                 pads=list(cfg["pads"]), dilations=list(dil), group=group,
                 kernel_shape=list(k))
    close(out, ref, rtol=1e-4, atol=1e-4)


def test_conv_fused_activation_residual_and_runtime_weights():
    x = randn(1, 8, 6, 6)
    wt = randn(8, 8, 3, 3) * 0.2
    res = randn(1, 8, 6, 6)
    ref = np.maximum(conv_ref(x, wt, None, pads=(1, 1, 1, 1)) + res, 0)
    # Weights as a model input (arena): reordered on every run; bias omitted (-1).
    out = run_op("Conv", [x, wt, None, res], ref.shape, pads=[1, 1, 1, 1], activation="Relu",
                 sum=1)
    close(out, ref, atol=1e-4)
    # Depthwise + Clip (ReLU6), as in mobilenetv2.
    wd = randn(8, 1, 3, 3)
    ref = np.clip(conv_ref(x, wd, None, pads=(1, 1, 1, 1), group=8), 0, 6)
    out = run_op("Conv", [x, Const(wd)], ref.shape, pads=[1, 1, 1, 1], group=8,
                 activation="Clip", activation_alpha=0.0, activation_beta=6.0)
    close(out, ref, atol=1e-4)


def test_conv_1d():
    x = randn(2, 3, 10)
    wt = randn(4, 3, 3)
    ref = conv_ref(x[:, :, None, :], wt[:, :, None, :], None, pads=(0, 1, 0, 1))[:, :, 0, :]
    out = run_op("Conv", [x, Const(wt)], ref.shape, pads=[1, 1])
    close(out, ref, atol=1e-4)


def test_conv_shape_errors_name_the_node():
    b = SpecBuilder()
    x = b.input("x", "float32", [1, 4, 8, 8])
    w = b.const("w", randn(64, 3, 7, 7))
    y = b.tensor("y", "float32", [1, 64, 2, 2])
    b.kernel("Conv", [x, w], [y], name="conv1")
    b.outputs = [y]
    with pytest.raises(rt.InvalidArgument,
                       match=r"^node 'conv1' \(Conv\): weight shape \[64,3,7,7\] does not match "
                             r"input channels 4"):
        b.load()
    b = SpecBuilder()
    x = b.input("x", "float32", [1, 3, 8, 8])
    w = b.const("w", randn(4, 3, 3, 3))
    y = b.tensor("y", "float32", [1, 4, 8, 8])  # no padding -> should be 6x6
    b.kernel("Conv", [x, w], [y], name="c2")
    b.outputs = [y]
    with pytest.raises(rt.InvalidArgument, match=r"node 'c2' \(Conv\): output shape"):
        b.load()


# ---- pooling -----------------------------------------------------------------------------


def test_max_and_average_pool():
    x = randn(2, 3, 9, 9)
    ref = pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), (5, 5), "max")
    close(run_op("MaxPool", [x], ref.shape, kernel_shape=[3, 3], strides=[2, 2],
                 pads=[1, 1, 1, 1]), ref)
    for cip in (0, 1):
        ref = pool_ref(x, (3, 3), (2, 2), (1, 1, 1, 1), (5, 5), "avg", cip)
        close(run_op("AveragePool", [x], ref.shape, kernel_shape=[3, 3], strides=[2, 2],
                     pads=[1, 1, 1, 1], count_include_pad=cip), ref)
    # ceil_mode: 8 -> ceil((8-3)/2)+1 = 4 windows, the last one partial.
    x = randn(1, 2, 8, 8)
    ref = pool_ref(x, (3, 3), (2, 2), (0, 0, 0, 0), (4, 4), "max")
    close(run_op("MaxPool", [x], ref.shape, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
          ref)
    ref = pool_ref(x, (3, 3), (2, 2), (0, 0, 0, 0), (4, 4), "avg")
    close(run_op("AveragePool", [x], ref.shape, kernel_shape=[3, 3], strides=[2, 2],
                 ceil_mode=1), ref)


def test_global_pools():
    x = randn(2, 5, 7, 6)
    close(run_op("GlobalAveragePool", [x], [2, 5, 1, 1]), x.mean(axis=(2, 3), keepdims=True))
    close(run_op("GlobalMaxPool", [x], [2, 5, 1, 1]), x.max(axis=(2, 3), keepdims=True))


# ---- Gemm / MatMul -----------------------------------------------------------------------


@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes_and_bias(ta, tb):
    a, b, c = randn(5, 7), randn(7, 3), randn(3)
    av = a.T.copy() if ta else a
    bv = b.T.copy() if tb else b
    out = run_op("Gemm", [av, Const(bv), Const(c)], [5, 3], transA=ta, transB=tb)
    close(out, a @ b + c)


def test_gemm_alpha_beta_broadcast_activation_residual():
    a, b = randn(4, 6), randn(6, 5)
    for cshape in ([4, 5], [4, 1], [1, 5], []):
        c = randn(*cshape)
        out = run_op("Gemm", [a, b, c], [4, 5], alpha=0.5, beta=2.0)
        close(out, 0.5 * (a @ b) + 2.0 * c)
        out = run_op("Gemm", [a, Const(b), Const(c)], [4, 5])
        close(out, a @ b + c)
    r = randn(4, 5)
    c = randn(5)
    out = run_op("Gemm", [a, Const(b), Const(c), r], [4, 5], activation="Tanh", sum=1)
    close(out, np.tanh(a @ b + c + r))
    out = run_op("Gemm", [a, Const(b), None, r], [4, 5], alpha=2.0, activation="Relu", sum=1)
    close(out, np.maximum(2 * (a @ b) + r, 0))


@pytest.mark.parametrize(
    "sa,sb",
    [([3, 4], [4, 5]), ([2, 3, 4], [4, 5]), ([2, 1, 3, 4], [5, 4, 2]), ([4], [4, 5]),
     ([3, 4], [4]), ([4], [4]), ([2, 3, 4], [2, 4, 5])],
)
def test_matmul_numpy_semantics(sa, sb):
    a, b = randn(*sa), randn(*sb)
    ref = np.matmul(a, b)
    close(run_op("MatMul", [a, b], ref.shape), ref, atol=1e-4)
    close(run_op("MatMul", [a, Const(b)], ref.shape), ref, atol=1e-4)


def test_matmul_bias_gelu_residual():
    a, b, bias, r = randn(2, 8, 16), randn(16, 12), randn(12), randn(2, 8, 12)
    h = a @ b + bias
    gelu = 0.5 * h * (1 + ERF(h / np.sqrt(2)))
    out = run_op("MatMul", [a, Const(b), Const(bias)], [2, 8, 12], has_bias=1, activation="Gelu")
    close(out, gelu, atol=1e-4)
    out = run_op("MatMul", [a, Const(b), Const(bias), r], [2, 8, 12], has_bias=1, sum=1)
    close(out, h + r, atol=1e-4)


def test_matmul_gelu_after_the_residual():
    # Large enough for two threads: on AVX-512 the GELU runs after the primitive (gelu.h),
    # over the product with its bias and the residual added.
    a, b, bias, r = randn(2, 128, 64), randn(64, 300), randn(300), randn(2, 128, 300)
    h = a.astype(np.float64) @ b + bias + r
    m, feeds = load_op("MatMul", [a, Const(b), Const(bias), r], [2, 128, 300], has_bias=1, sum=1,
                       activation="Gelu")
    close(m.execute(feeds)[0], _gelu64(h), rtol=1e-5, atol=1e-5)
    impl = m.profile()[0]["impl"]
    assert impl.endswith(" + gelu avx512") if AVX512 else "gelu" not in impl


AVX512 = "avx512f" in open("/proc/cpuinfo").read()


@pytest.mark.parametrize("rows", [1, 2, 3])
@pytest.mark.parametrize("k,n", [(1, 1), (7, 10), (33, 40), (64, 64), (130, 200), (784, 1000)])
@pytest.mark.parametrize("tb", [0, 1])
def test_gemm_few_rows_against_constant_weights(rows, k, n, tb):
    """Up to two rows take the panel (matrix-vector) kernel on AVX-512 CPUs: every panel
    width, padded tail, odd K and both weight orders against numpy; more rows keep oneDNN
    unless the layer is narrow (at most 24 outputs)."""
    a, b, c = randn(rows, k), randn(k, n), randn(n)
    m, feeds = load_op("Gemm", [a, Const(b.T.copy() if tb else b), Const(c)], [rows, n],
                           transB=tb, activation="Relu")
    close(m.execute(feeds)[0], np.maximum(a @ b + c, 0), atol=1e-4)
    gemv = AVX512 and (rows <= 2 or n <= 24)
    assert m.profile()[0]["impl"].startswith("gemv" if gemv else "oneDNN")


@pytest.mark.parametrize("rows", [3, 4, 5, 32, 33, 2001])
@pytest.mark.parametrize("n", [1, 10, 12, 13, 24])
def test_narrow_layer_at_many_rows(rows, n):
    """A narrow layer (a classifier) at many rows: dot products in pairs of rows (single
    rows past 12 outputs), the residual and bias per row, K not a multiple of 16, two
    threads once there is work for them (2001 x 300)."""
    a, b, c, r = randn(rows, 300), randn(300, n), randn(n), randn(rows, n)
    m, feeds = load_op("Gemm", [a, Const(b), Const(c), r], [rows, n], sum=1, activation="Clip",
                       activation_alpha=-2.0, activation_beta=2.0)
    close(m.execute(feeds)[0], np.clip(a @ b + c + r, -2, 2), atol=1e-4)
    assert m.profile()[0]["impl"] == "gemv avx512" if AVX512 else \
        m.profile()[0]["impl"].startswith("oneDNN")


def test_gemv_epilogues_residual_and_matmul_batch_rows():
    a, b, c, r = randn(1, 300), randn(300, 70), randn(70), randn(1, 70)
    h = a @ b + c
    for act, attrs, ref in [
        ("LeakyRelu", {"activation_alpha": 0.1}, np.where(h + r > 0, h + r, 0.1 * (h + r))),
        ("Clip", {"activation_alpha": -0.5, "activation_beta": 0.5}, np.clip(h + r, -0.5, 0.5)),
        ("", {}, h + r),
    ]:
        m, feeds = load_op("Gemm", [a, Const(b), Const(c), r], [1, 70], sum=1,
                               **({"activation": act} if act else {}), **attrs)
        close(m.execute(feeds)[0], ref, atol=1e-4)
        assert m.profile()[0]["impl"].startswith("gemv" if AVX512 else "oneDNN")
    # MatMul folds A's batch dims into rows: [2,1,K] x [K,N] is two rows
    a3, bias = randn(2, 1, 300), randn(70)
    m, feeds = load_op("MatMul", [a3, Const(b), Const(bias)], [2, 1, 70], has_bias=1)
    close(m.execute(feeds)[0], a3 @ b + bias, atol=1e-4)
    assert m.profile()[0]["impl"].startswith("gemv" if AVX512 else "oneDNN")
    # an activation the panel kernel does not apply keeps oneDNN's matmul
    m, feeds = load_op("MatMul", [a3, Const(b)], [2, 1, 70], activation="Tanh")
    close(m.execute(feeds)[0], np.tanh(a3 @ b), atol=1e-4)
    assert m.profile()[0]["impl"].startswith("oneDNN")


def test_gemv_instances_share_packed_weights():
    a, b = randn(1, 512), randn(512, 1024)
    m, feeds = load_op("Gemm", [a, Const(b)], [1, 1024], instances=3)
    ref = a @ b
    results = [None] * 6

    def run(i):
        results[i] = m.execute([randn(1, 512) if i % 2 else a])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(0, 6, 2):
        close(results[i], ref, atol=1e-4)
    # one packed copy (2 MiB) for the wide and the narrow kernel set
    if AVX512:
        assert m.stats()["prepared_bytes"] == b.nbytes


def test_matmul_shape_error():
    b = SpecBuilder()
    x = b.input("x", "float32", [3, 4])
    w = b.const("w", randn(5, 6))
    y = b.tensor("y", "float32", [3, 6])
    b.kernel("MatMul", [x, w], [y], name="fc")
    with pytest.raises(rt.InvalidArgument, match=r"node 'fc' \(MatMul\): inner dimensions"):
        b.load()


# ---- elementwise -------------------------------------------------------------------------

BINARY = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "Max": np.maximum, "Min": np.minimum, "Pow": np.power,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize(
    "sa,sb",
    [([2, 3, 4], [2, 3, 4]), ([2, 3, 4], [4]), ([2, 1, 4], [3, 1]), ([], [5, 2]),
     ([1, 3, 1, 5, 1, 2], [4, 1, 6, 1, 7, 2]), ([6, 40000], [6, 1])],
)
def test_binary_broadcasting(op, sa, sb):
    a, b = randn(*sa), randn(*sb)
    if op == "Pow":
        a = np.abs(a) + 0.5
    if op == "Div":
        b = np.where(np.abs(b) < 0.1, 1.0, b).astype(np.float32)
    ref = BINARY[op](a, b)
    close(run_op(op, [a, b], ref.shape), ref, rtol=2e-4, atol=1e-5)


def test_binary_int64_and_const_pow():
    a = RNG.integers(-100, 100, (3, 4)).astype(np.int64)
    b = RNG.integers(-100, 100, (4,)).astype(np.int64)
    for op in ("Add", "Sub", "Mul", "Max", "Min"):
        out = run_op(op, [a, b], [3, 4], "int64")
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, BINARY[op](a, b))
    x = randn(4, 5)
    close(run_op("Pow", [x, Const(np.array(2.0, np.float32))], [4, 5]), x * x)
    close(run_op("Pow", [np.abs(x), Const(np.array(0.5, np.float32))], [4, 5]),
          np.sqrt(np.abs(x)))


def test_binary_errors():
    b = SpecBuilder()
    x = b.input("x", "float32", [2, 3])
    z = b.input("z", "float32", [4])
    y = b.tensor("y", "float32", [2, 3])
    b.kernel("Add", [x, z], [y], name="add")
    with pytest.raises(rt.InvalidArgument, match=r"node 'add' \(Add\): shapes \[2,3\] and \[4\]"):
        b.load()


def _np_unary(op: str, x: np.ndarray, attrs: dict) -> np.ndarray:
    if op == "Gelu":
        if attrs.get("approximate") == "tanh":
            return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
        return 0.5 * x * (1 + ERF(x / np.sqrt(2)))
    table = {
        "Relu": lambda v: np.maximum(v, 0),
        "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "Tanh": np.tanh, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt, "Abs": np.abs,
        "Neg": np.negative, "Erf": ERF, "Floor": np.floor, "Ceil": np.ceil,
        "Identity": lambda v: v, "Reciprocal": lambda v: 1 / v,
        "Softplus": lambda v: np.log1p(np.exp(v)),
        "LeakyRelu": lambda v: np.where(v > 0, v, attrs.get("alpha", 0.01) * v),
        "Clip": lambda v: np.clip(v, attrs.get("min", -np.inf), attrs.get("max", np.inf)),
        "HardSigmoid": lambda v: np.clip(attrs.get("alpha", 0.2) * v + attrs.get("beta", 0.5),
                                         0, 1),
        "HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    }
    return table[op](x)


@pytest.mark.parametrize(
    "op,attrs",
    [("Relu", {}), ("Sigmoid", {}), ("Tanh", {}), ("Exp", {}), ("Log", {}), ("Sqrt", {}),
     ("Abs", {}), ("Neg", {}), ("Erf", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"}),
     ("LeakyRelu", {"alpha": 0.2}), ("Clip", {"min": -0.5, "max": 0.7}),
     ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("HardSwish", {}), ("Softplus", {}),
     ("Reciprocal", {}), ("Identity", {}), ("Floor", {}), ("Ceil", {})],
)
def test_unary(op, attrs):
    x = randn(3, 70) * 2
    if op in ("Log", "Sqrt", "Reciprocal"):
        x = np.abs(x) + 0.1
    ref = _np_unary(op, x.astype(np.float64), attrs)
    close(run_op(op, [x], x.shape, **attrs), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [1, 15, 16, 17, 210, 7681])
@pytest.mark.parametrize("alpha", [0.2, -0.5, 3.0])
def test_leaky_relu_exact_with_tails_and_specials(n, alpha):
    """LeakyRelu is x > 0 ? x : alpha * x to the bit at every length (16 lanes and a tail),
    NaN, infinities and -0.0 included; on AVX-512 it runs its own vector kernel (its plain
    loop stayed scalar: 6.3 us for 7.7K elements)."""
    x = randn(n) * 3
    x[: min(n, 4)] = np.array([np.nan, np.inf, -np.inf, -0.0], np.float32)[: min(n, 4)]
    model, feeds = load_op("LeakyRelu", [x], x.shape, alpha=alpha)
    got = model.execute(feeds)[0]
    want = np.where(x > 0, x, np.float32(alpha) * x).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    (task,) = [t for t in model.profile() if t["op"] == "LeakyRelu"]
    if rt.cpu_has_avx512() and n <= 16384:  # larger ones are oneDNN's eltwise
        assert task["impl"] == "leaky relu avx512"


def test_clip_bounds_from_constant_inputs():
    x = randn(10)
    out = run_op("Clip", [x, Const(np.array(-0.1, np.float32)), Const(np.array(0.2, np.float32))],
                 [10])
    close(out, np.clip(x, -0.1, 0.2))


# ---- normalisation -----------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_softmax_and_log_softmax(axis):
    x = randn(3, 4, 5)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    close(run_op("Softmax", [x], x.shape, axis=axis), sm)
    close(run_op("LogSoftmax", [x], x.shape, axis=axis), np.log(sm), atol=1e-5)


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("n", [1, 7, 16, 17, 33, 128, 129, 1000])
def test_softmax_rows_match_float64(n):
    # The innermost axis runs on the runtime's own rows (softmax.h) where the CPU has
    # AVX-512: every tail width, one and two threads (rows * n past the fork threshold).
    for rows in (3, 9000 // n + 2):
        x = randn(rows, n) * 20
        m, _ = load_op("Softmax", [x], x.shape, axis=-1)
        close(m.execute([x])[0], _softmax64(x), rtol=2e-5, atol=1e-7)
        impl = m.profile()[0]["impl"]
        assert impl == "rows avx512" if AVX512 else impl.startswith("oneDNN")


@pytest.mark.parametrize("op", ["Add", "Mul", "Sub", "Div"])
@pytest.mark.parametrize("a_shape, b_shape", [((1, 4, 2, 16, 16), (1, 4, 1, 16, 16)),
                                              ((3, 5, 7), (3, 1, 7)), ((2, 3, 4, 5), (3, 1, 5))])
def test_a_broadcast_onednn_would_run_on_its_reference_runs_on_our_loops(op, a_shape, b_shape):
    # A middle axis broadcast (Swin's window-attention mask): oneDNN picked "ref:any", many
    # times slower than the runtime's loops over collapsed rows, which now run it.
    a, b = randn(*a_shape), randn(*b_shape) + (3.0 if op == "Div" else 0.0)
    for weights in (False, True):  # a model input, or a constant like the mask
        m, feeds = load_op(op, [a, Const(b) if weights else b], a_shape)
        want = {"Add": a + b, "Mul": a * b, "Sub": a - b, "Div": a / b}[op]
        close(m.execute(feeds)[0], want, rtol=1e-6, atol=1e-6)
        assert "ref" not in m.profile()[0]["impl"]


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("shape, axes", [((2, 7, 5), [1]), ((3, 4, 5, 6), [1, 2]),
                                         ((4, 9), [0]), ((2, 3, 4), [0, 2]), ((5, 8), [1])])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_sum_and_mean_never_run_on_onednns_reference(op, shape, axes, keepdims):
    # Where oneDNN's reduction would pick "ref:any" (middle axes: 36% of a zoo model's run),
    # the runtime's own loop runs it; elsewhere oneDNN. Both agree with numpy.
    x = randn(*shape)
    x.reshape(-1)[3] = np.nan if op == "ReduceSum" and keepdims else x.reshape(-1)[3]
    want = (np.sum if op == "ReduceSum" else np.mean)(x.astype(np.float64), axis=tuple(axes),
                                                     keepdims=bool(keepdims))
    m, feeds = load_op(op, [x], want.shape, axes=axes, keepdims=keepdims)
    np.testing.assert_allclose(m.execute(feeds)[0], want, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert "ref" not in m.profile()[0]["impl"]


def _softmax64_axis(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape, axis", [((1, 4, 16, 70), 2), ((2, 3, 5), 0), ((2, 3, 5), 1),
                                         ((3, 17, 33), 1), ((1, 64, 8400), 1),
                                         ((2, 5, 4, 3), -3)])
def test_softmax_along_an_inner_axis_matches_float64(shape, axis):
    # An axis that is not the innermost runs on the runtime's strided kernel (softmax.h)
    # where the CPU has AVX-512: the inner size in whole vectors and with a tail, one and
    # several outer slices, one and two threads (a detector's DFL softmax is [1, 4, 16, N]
    # along 16, which oneDNN ran on its reference implementation).
    x = randn(*shape) * 20
    m, _ = load_op("Softmax", [x], x.shape, axis=axis)
    close(m.execute([x])[0], _softmax64_axis(x, axis), rtol=2e-5, atol=1e-7)
    impl = m.profile()[0]["impl"]
    assert impl == "strided avx512" if AVX512 else impl.startswith("oneDNN")


@pytest.mark.parametrize("shape, axis", [((1, 32, 40), 1), ((2, 3, 5), 0), ((3, 17, 33), 1),
                                         ((1, 64, 8400), 1), ((4, 40), -1), ((3, 1000), 1),
                                         ((2, 5, 4, 3), -3)])
def test_log_softmax_on_every_axis_matches_float64(shape, axis):
    """LogSoftmax runs the softmax kernels' passes with x - max - ln(sum) as the last (a
    TCN's over the channels of [1, 32, 40] ran oneDNN's reference loops: 68 us); -inf
    stays -inf, a NaN makes its row or column NaN only."""
    x = randn(*shape) * 20
    flat = x.reshape(-1)
    flat[1] = -np.inf
    flat[-1] = np.nan
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        m64 = np.nanmax(x64, axis=axis, keepdims=True)
        want = x64 - m64 - np.log(np.exp(x64 - m64).sum(axis=axis, keepdims=True))
    m, _ = load_op("LogSoftmax", [x], x.shape, axis=axis)
    got = m.execute([x])[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5, equal_nan=True)
    assert np.isneginf(got.reshape(-1)[1]) or np.isnan(got.reshape(-1)[1])
    impl = m.profile()[0]["impl"]
    if AVX512:
        assert impl in ("strided avx512", "rows avx512"), impl
    else:
        assert impl.startswith("oneDNN")


def test_softmax_along_an_inner_axis_edges():
    x = randn(3, 6, 20) * 5
    x[0, 2, 3] = -np.inf  # exp 0
    x[1, :, 4] = 1e30  # equal huge values along the axis: uniform
    x[2, 1, 7] = np.nan  # that column is NaN, its neighbours are not
    out = run_op("Softmax", [x], x.shape, axis=1)
    assert out[0, 2, 3] == 0.0
    close(out[1, :, 4], np.full(6, 1 / 6), rtol=1e-6)
    assert np.isnan(out[2, :, 7]).all() and not np.isnan(out[2, :, 6]).any()
    close(out[0], _softmax64_axis(x[:1], 1)[0], rtol=2e-5, atol=1e-7)


def test_softmax_rows_edges():
    x = randn(4, 40) * 5
    x[0, 3] = -np.inf  # exp 0
    x[1, :] = 1e30  # equal huge values: uniform
    x[2, 7] = np.nan  # the row is NaN
    x[3, :] = -200.0  # equal and far below exp's range: still uniform
    x[3, 0] = -110.0  # 90 above the others: they underflow to 0
    out = run_op("Softmax", [x], x.shape, axis=-1)
    assert out[0, 3] == 0.0
    close(out[0], _softmax64(x[:1])[0], rtol=2e-5, atol=1e-7)
    close(out[1], np.full(40, 1 / 40), rtol=1e-6)
    assert np.isnan(out[2]).all()
    assert out[3, 0] == 1.0 and not out[3, 1:].any()


def _gelu64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 40_000, 100_003])
def test_gelu_matches_float64(n):
    # Gelu (erf form) runs on gelu.h where the CPU has AVX-512: every tail width, one and
    # two threads (n past the fork threshold), every piece of its table and past its end.
    x = np.linspace(-12, 12, n, dtype=np.float32) if n > 1 else np.array([0.3], np.float32)
    m, _ = load_op("Gelu", [x], x.shape)
    err = np.abs(m.execute([x])[0] - _gelu64(x))
    # Measured: 3.4e-7 at most on [-12, 12] (an ulp of |x| ~ 4); oneDNN's 1.2e-6.
    bound = (1e-7 + 1e-7 * np.abs(x)) if AVX512 else 2e-6 * np.maximum(1, np.abs(x))
    assert (err <= bound).all(), (x[err > bound][:5], err.max())
    impl = m.profile()[0]["impl"]
    assert impl == "gelu avx512" if AVX512 else impl.startswith("oneDNN")


def test_gelu_edges():
    x = np.array([np.nan, np.inf, 1e30, -1e30, -100.0, -6.0, -5.6, 5.6, 5.59, -0.0, 1e-30, 0.35,
                  3.5], np.float32)
    out = run_op("Gelu", [x], x.shape)
    assert np.isnan(out[0]) and out[1] == np.inf and out[2] == np.float32(1e30)
    assert out[3] == 0 and out[4] == 0  # exactly: no rounding noise times a large |x|
    assert abs(out[5] - _gelu64(-6.0)) < 1e-8 and out[7] == np.float32(5.6)
    close(out[6:], _gelu64(x[6:]), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm(axis):
    x, eps = randn(2, 3, 8), 1e-5
    norm_shape = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    scale, bias = randn(*norm_shape), randn(*norm_shape)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    ref = (x - mu) / np.sqrt(var + eps) * scale + bias
    close(run_op("LayerNormalization", [x, Const(scale), Const(bias)], x.shape, axis=axis,
                 epsilon=eps), ref, atol=1e-4)
    close(run_op("LayerNormalization", [x, Const(scale)], x.shape, axis=axis, epsilon=eps),
          ref - bias, atol=1e-4)


def test_batch_norm():
    x = randn(2, 4, 5, 3)
    s, b, mean = randn(4), randn(4), randn(4)
    var = np.abs(randn(4)) + 0.5
    r = lambda v: v.reshape(1, 4, 1, 1)  # noqa: E731
    ref = (x - r(mean)) / np.sqrt(r(var) + 1e-3) * r(s) + r(b)
    out = run_op("BatchNormalization", [x, Const(s), Const(b), Const(mean), Const(var)],
                 x.shape, epsilon=1e-3)
    close(out, ref, atol=1e-4)


# ---- reductions --------------------------------------------------------------------------


@pytest.mark.parametrize("op,fn", [("ReduceMean", np.mean), ("ReduceSum", np.sum),
                                   ("ReduceMax", np.max)])
def test_reduce(op, fn):
    x = randn(3, 4, 5)
    for axes, keep in (([1], 1), ([0, 2], 0), ([-1], 1), ([], 0)):
        ref = fn(x, axis=tuple(axes) if axes else None, keepdims=bool(keep))
        out = run_op(op, [x], np.shape(ref), axes=axes, keepdims=keep)
        close(out, ref, atol=1e-5)
    # Axes as a constant second input (opset 18).
    ref = fn(x, axis=(1,), keepdims=True)
    close(run_op(op, [x, Const(np.array([1], np.int64))], ref.shape), ref, atol=1e-5)
    # noop_with_empty_axes: identity.
    close(run_op(op, [x], x.shape, axes=[], noop_with_empty_axes=1), x)


@pytest.mark.parametrize("op,fn", [("ReduceSum", np.sum), ("ReduceMean", np.mean)])
@pytest.mark.parametrize("shape,axes,loop", [
    ((64, 4, 49, 32), [-1], True),  # rows of 32 (Swin-V2's cosine attention norms)
    ((8, 3, 40, 24), [2, 3], True),  # trailing axes merged: rows of 960
    ((16, 4096), [1], False),  # rows longer than 1024: oneDNN's
])
def test_a_sum_over_short_trailing_rows_is_the_loop(op, fn, shape, axes, loop):
    """A sum or mean over trailing axes whose rows are at most 1024 elements runs the loop's
    eight partial sums a row (oneDNN's reduction took ~450 us a call on Swin-V2's rows of 32
    at batch 8); other axes keep their kernel. Values equal numpy's."""
    x = randn(*shape)
    ref = fn(x, axis=tuple(axes), keepdims=True)
    model, feeds = load_op(op, [x], ref.shape, axes=axes, keepdims=1)
    close(model.execute(feeds)[0], ref, atol=1e-4)
    (impl,) = [t["impl"] for t in model.profile()]
    assert (impl == "loop") == loop, impl


# ---- data movement -----------------------------------------------------------------------


def test_concat_any_dtype():
    a, b = randn(2, 3, 4), randn(2, 5, 4)
    close(run_op("Concat", [a, b], [2, 8, 4], axis=1), np.concatenate([a, b], axis=1))
    ia = RNG.integers(0, 9, (3, 2)).astype(np.int64)
    ib = RNG.integers(0, 9, (3, 1)).astype(np.int64)
    out = run_op("Concat", [ia, ib, ia], [3, 5], "int64", axis=-1)
    np.testing.assert_array_equal(out, np.concatenate([ia, ib, ia], axis=-1))


# Pieces of 1, 4, 8 and 12 bytes per row along the last axis (a complex pair stacked from
# its parts, coordinates), many rows: the fixed-size moves and the general copy.
@pytest.mark.parametrize("dtype,widths", [(np.float32, (1, 1)), (np.float32, (2, 1, 3)),
                                          (np.int64, (1, 1)), (np.uint8, (1, 4, 8))])
def test_concat_of_narrow_pieces_along_the_last_axis(dtype, widths):
    rng = np.random.default_rng(len(widths))
    parts = [(rng.standard_normal((3, 700, w)) * 50).astype(dtype) for w in widths]
    want = np.concatenate(parts, axis=-1)
    out = run_op("Concat", parts, list(want.shape), np.dtype(dtype).name, axis=-1)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shape,perm,copies", [
    ((1, 2, 58, 28, 28), [0, 2, 1, 3, 4], True),  # a channel shuffle: runs of H * W
    ((2, 16, 4, 32), [0, 2, 1, 3], True),  # a head split keeping the head dim: runs of 32
    ((2, 3, 4, 5), [0, 2, 1, 3], False),  # runs of 5 floats: oneDNN's reorder
    ((3, 40, 24), [1, 0, 2], True),
])
def test_a_transpose_keeping_trailing_axes_copies_whole_runs(shape, perm, copies):
    """A permutation that keeps trailing axes of 64 bytes or more in place copies those
    contiguous runs (the strided copy's memcpy), not oneDNN's element-wise reorder."""
    for dtype in ("float32", "int8"):
        x = (randn(*shape) * 10).astype(dtype)
        ref = np.transpose(x, perm)
        model, feeds = load_op("Transpose", [x], ref.shape, dtype, perm=perm)
        np.testing.assert_array_equal(model.execute(feeds)[0], ref)
        kept = len(perm)  # trailing axes the permutation keeps
        while kept and perm[kept - 1] == kept - 1:
            kept -= 1
        runs = int(np.prod(shape[kept:])) * np.dtype(dtype).itemsize
        (impl,) = [t["impl"] for t in model.profile()]
        assert (impl == "strided copy") == (copies and runs >= 64), (impl, runs)


@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [0, 2, 3, 1], [3, 2, 1, 0], None])
def test_transpose(perm):
    x = randn(2, 3, 4, 5)
    ref = np.transpose(x, perm)
    attrs = {} if perm is None else {"perm": perm}
    close(run_op("Transpose", [x], ref.shape, **attrs), ref)
    xi = x.astype(np.int8)
    np.testing.assert_array_equal(run_op("Transpose", [xi], ref.shape, "int8", **attrs),
                                  np.transpose(xi, perm))


def test_gather():
    data = randn(10, 4)
    idx = np.array([[0, 9], [-1, 3]], np.int64)
    close(run_op("Gather", [data, idx], [2, 2, 4]), data[idx])
    cols = np.array([3, -4, 1], np.int32)
    close(run_op("Gather", [data, cols], [10, 3], axis=1), np.take(data, cols, axis=1))
    ids = np.array([3, -2], np.int64)
    out = run_op("Gather", [Const(np.arange(20, dtype=np.int64).reshape(5, 4)), ids], [2, 4],
                 "int64")
    np.testing.assert_array_equal(out, np.arange(20).reshape(5, 4)[ids])


# Slices of 1, 2, 4, 8 and 12 bytes (dtypes, and a trailing pair of floats), output slices
# crossing the kernel's work items of 1024 (one index and many outer slices: an unfold's
# [.., 1] axis; many indices of one slice; both), negative indices.
@pytest.mark.parametrize("shape,axis,idx_shape,dtype", [
    ((1, 64, 9, 32, 1), 4, (1, 1), np.float32),
    ((1, 64, 40, 1), 2, (9, 32), np.float32),
    ((3, 2500), 1, (1500,), np.int8),
    ((7, 5, 3), 1, (2, 700), np.float16),
    ((2, 1100, 3), 1, (3, 400), np.float32),
    ((4, 333), 1, (1029,), np.int64),
])
def test_gather_walks_slices_across_work_items(shape, axis, idx_shape, dtype):
    rng = np.random.default_rng(sum(shape))
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    dim = shape[axis]
    idx = rng.integers(-dim, dim, size=idx_shape, dtype=np.int64)
    want = np.take(data, idx, axis=axis)
    got = run_op("Gather", [data, idx], list(want.shape), np.dtype(dtype).name, axis=axis)
    np.testing.assert_array_equal(got, want)


def test_slice():
    x = randn(6, 7, 8)
    close(run_op("Slice", [x], [2, 7, 3], starts=[1, 2], ends=[5, 8], axes=[0, 2], steps=[2, 2]),
          x[1:5:2, :, 2:8:2])
    # Negative step, engine-normalised: end -1 means "through index 0".
    close(run_op("Slice", [x], [6, 7, 8], starts=[5], ends=[-1], axes=[0], steps=[-1]),
          x[::-1])
    close(run_op("Slice", [x], [6, 3, 8], starts=[6], ends=[0], axes=[1], steps=[-2]),
          x[:, 6:0:-2])
    # Clamped and empty slices.
    close(run_op("Slice", [x], [6, 7, 2], starts=[6], ends=[100], axes=[-1]), x[..., 6:])
    assert run_op("Slice", [x], [0, 7, 8], starts=[4], ends=[2], axes=[0]).shape == (0, 7, 8)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "int32", "float16", "uint8"])
def test_where_on_a_data_dependent_mask_keeps_each_chosen_value_exactly(dtype):
    """Where(x > 0, a, b) over whole rows (xIELU's form; the rows are one blend of both
    values, not a branch per element) and over a broadcast Y: every output is the chosen
    input's bits, NaN and infinities included, at 1-, 2-, 4- and 8-byte elements."""
    n = 40 * 515  # not a multiple of any vector width
    c = RNG.random(n).reshape(40, 515) > 0.5
    if dtype.startswith("float"):
        x = (randn(40, 515) * 10).astype(dtype)
        y = (randn(40, 515) * 10).astype(dtype)
        x[0, :3] = [np.nan, np.inf, -np.inf]
        y[1, :3] = [np.nan, -np.inf, -0.0]
    else:
        x = RNG.integers(0, 100, (40, 515)).astype(dtype)
        y = RNG.integers(0, 100, (40, 515)).astype(dtype)
    got = run_op("Where", [c, x, y], [40, 515], dtype)
    assert got.tobytes() == np.where(c, x, y).tobytes()
    row = y[:1]  # broadcast along the rows: strides (1, 1, 0) for the outer axis
    got = run_op("Where", [c, x, row], [40, 515], dtype)
    assert got.tobytes() == np.where(c, x, row).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "uint8"])
def test_a_masked_fill_where_takes_one_value_against_a_row(dtype):
    """Where(mask, fill, scores) with a mask broadcast over rows and a scalar fill on either
    side (an attention's masked_fill): numpy's bits, the fill's NaN / -inf included."""
    c = RNG.random((1, 1, 1, 99)) > 0.4
    if dtype.startswith("float"):
        scores = (randn(2, 4, 99, 99) * 10).astype(dtype)
        fills = [np.array(-np.inf, dtype), np.array(np.nan, dtype)]
    else:
        scores = RNG.integers(0, 100, (2, 4, 99, 99)).astype(dtype)
        fills = [np.array(7, dtype)]
    for fill in fills:
        got = run_op("Where", [c, fill, scores], [2, 4, 99, 99], dtype)
        assert got.tobytes() == np.where(c, fill, scores).tobytes()
        got = run_op("Where", [c, scores, fill], [2, 4, 99, 99], dtype)
        assert got.tobytes() == np.where(c, scores, fill).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8"])
@pytest.mark.parametrize("data_shape,idx_shape", [([4, 99, 128], [4, 99, 99]),
                                                  ([1, 7, 5], [3, 7, 9]),  # data's 1 broadcasts
                                                  ([600, 300], [600, 200])])
def test_gather_elements_along_the_last_axis(dtype, data_shape, idx_shape):
    """GatherElements on the last axis (a relative-position attention's picks from its
    [B, L, 2k] scores): each row from one data row, negative indices counted from the end,
    in one thread and shared (the last case is over the threading threshold)."""
    data = (RNG.integers(-1000, 1000, data_shape)).astype(dtype)
    n = data_shape[-1]
    idx = RNG.integers(-n, n, idx_shape).astype(np.int64)
    got = run_op("GatherElements", [data, idx], idx_shape, dtype, axis=-1)
    want = np.take_along_axis(np.broadcast_to(data, idx_shape[:-1] + [n]), idx % n, axis=-1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op,fn", [("Greater", np.greater), ("LessOrEqual", np.less_equal),
                                   ("Equal", np.equal)])
def test_comparisons_with_a_scalar_and_nan(op, fn):
    """A comparison of a row with a scalar (and of two rows): numpy's result, NaN compares
    false."""
    x = randn(40, 515)
    x[0, :2] = [np.nan, 0.0]
    got = run_op(op, [x, np.float32(0.0)], [40, 515], "bool")
    np.testing.assert_array_equal(got, fn(x, np.float32(0.0)))
    y = randn(40, 515)
    np.testing.assert_array_equal(run_op(op, [x, y], [40, 515], "bool"), fn(x, y))


def test_where_cast_expand_pad():
    c = RNG.random((3, 1, 5)) > 0.5
    x, y = randn(4, 5), randn(3, 4, 1)
    close(run_op("Where", [c, x, y], [3, 4, 5]), np.where(c, x, y))
    xi = RNG.integers(-5, 5, (4, 5)).astype(np.int64)
    np.testing.assert_array_equal(
        run_op("Where", [c, xi, np.int64(7)], [3, 4, 5], "int64"), np.where(c, xi, 7))

    f = (randn(4, 6) * 100).astype(np.float32)
    f[0, 0] = 3.99
    f[0, 1] = -3.99
    for to in ("int64", "int32", "float16", "float64", "bool", "uint8", "int8"):
        out = run_op("Cast", [f], f.shape, to, to=to)
        assert out.dtype == np.dtype(to)
        if to in ("uint8", "int8"):  # out-of-range saturates instead of wrapping
            info = np.iinfo(to)
            np.testing.assert_array_equal(out, np.clip(np.trunc(f), info.min, info.max).astype(to))
        else:
            np.testing.assert_array_equal(out, f.astype(to))
    h = randn(50).astype(np.float16)
    np.testing.assert_array_equal(run_op("Cast", [h], [50], "float32", to="float32"),
                                  h.astype(np.float32))
    np.testing.assert_array_equal(run_op("Cast", [f], f.shape, "int64", to=7), f.astype(np.int64))

    e = randn(3, 1)
    close(run_op("Expand", [e], [2, 3, 4]), np.broadcast_to(e, (2, 3, 4)))

    p = randn(2, 3, 4)
    ref = np.pad(p, ((0, 0), (1, 2), (3, 0)), constant_values=1.5)
    close(run_op("Pad", [p], ref.shape, pads=[0, 1, 3, 0, 2, 0], value=1.5), ref)
    # Negative pads crop.
    close(run_op("Pad", [p], [2, 2, 5], pads=[0, -1, 1, 0, 0, 0]),
          np.pad(p[:, 1:, :], ((0, 0), (0, 0), (1, 0))))


# ---- aliasing and copies -----------------------------------------------------------------


def test_reshape_alias_and_copy_task():
    b = SpecBuilder()
    x = b.input("x", "float32", [2, 6])
    y = b.tensor("y", "float32", [2, 6])
    # "r" aliases y (same bytes, different shape): a Reshape the engine resolved to an alias.
    r = b.tensor("r", "float32", [3, 4], offset=b.tensors[y]["offset"])
    c = b.tensor("c", "float32", [12])
    z = b.tensor("z", "float32", [3, 4])
    b.kernel("Relu", [x], [y])
    b.tasks.append({"kind": "copy", "name": "flatten", "stream": 0, "inputs": [r],
                    "outputs": [c]})
    b.kernel("Neg", [r], [z])
    b.outputs = [c, z]
    m = b.load()
    xv = randn(2, 6)
    c_out, z_out = m.execute([xv])
    close(c_out, np.maximum(xv, 0).reshape(12))
    close(z_out, -np.maximum(xv, 0).reshape(3, 4))


# ---- channels-last layout assignment -----------------------------------------------------


def _cnn(b: SpecBuilder):
    """conv -> relu -> maxpool -> conv(+residual) -> add -> conv -> GAP -> view -> Gemm.
    Returns the weights for the numpy reference."""
    rng = np.random.default_rng(3)
    w = {k: (rng.standard_normal(s) * 0.2).astype(np.float32) for k, s in
         {"w1": (8, 3, 3, 3), "w2": (8, 8, 3, 3), "w3": (16, 8, 1, 1), "fc": (5, 16)}.items()}
    x = b.input("x", "float32", [2, 3, 12, 12])
    c1 = b.tensor("c1", "float32", [2, 8, 12, 12])
    b.kernel("Conv", [x, b.const("w1", w["w1"])], [c1], pads=[1, 1, 1, 1])
    r1 = b.tensor("r1", "float32", [2, 8, 12, 12])
    b.kernel("Relu", [c1], [r1])
    p1 = b.tensor("p1", "float32", [2, 8, 6, 6])
    b.kernel("MaxPool", [r1], [p1], kernel_shape=[2, 2], strides=[2, 2])
    c2 = b.tensor("c2", "float32", [2, 8, 6, 6])
    b.kernel("Conv", [p1, b.const("w2", w["w2"]), -1, p1], [c2], pads=[1, 1, 1, 1], sum=1,
             activation="Relu")
    a2 = b.tensor("a2", "float32", [2, 8, 6, 6])
    b.kernel("Add", [c2, p1], [a2])
    c3 = b.tensor("c3", "float32", [2, 16, 6, 6])
    b.kernel("Conv", [a2, b.const("w3", w["w3"])], [c3])
    g = b.tensor("g", "float32", [2, 16, 1, 1])
    b.kernel("GlobalAveragePool", [c3], [g])
    flat = b.tensor("flat", "float32", [2, 16], offset=b.tensors[g]["offset"])
    out = b.tensor("out", "float32", [2, 5])
    b.kernel("Gemm", [flat, b.const("fc", w["fc"])], [out], transB=1)
    b.outputs = [out, c3]
    return w


def _cnn_ref(x, w):
    r1 = np.maximum(conv_ref(x, w["w1"], pads=(1, 1, 1, 1)), 0)
    p1 = r1.reshape(2, 8, 6, 2, 6, 2).max(axis=(3, 5))
    c2 = np.maximum(conv_ref(p1, w["w2"], pads=(1, 1, 1, 1)) + p1, 0)
    c3 = conv_ref(c2 + p1, w["w3"])
    return c3.mean(axis=(2, 3)) @ w["fc"].T, c3


def test_channels_last_assignment_is_internal_and_exact():
    b = SpecBuilder("cnn")
    w = _cnn(b)
    x = randn(2, 3, 12, 12)
    ref_out, ref_c3 = _cnn_ref(x, w)
    m = b.load()
    # Intermediates between convs go NHWC; model inputs/outputs never do.
    assert set(m.channels_last) == {"c1", "r1", "p1", "c2", "a2"}
    out, c3 = m.execute([x])
    close(out, ref_out, atol=1e-4)
    close(c3, ref_c3, atol=1e-4)
    spec = b.spec()
    spec["channels_last"] = False
    plain = rt.Model(DEVICE, spec)
    assert plain.channels_last == []
    out2, c32 = plain.execute([x])
    close(out2, out, atol=1e-5)
    close(c32, c3, atol=1e-5)


def test_channels_last_blocked_by_views_copies_and_plain_ops():
    b = SpecBuilder()
    x = b.input("x", "float32", [1, 4, 6, 6])
    c1 = b.tensor("c1", "float32", [1, 4, 6, 6])
    b.kernel("Conv", [x, b.const("w", randn(4, 4, 1, 1))], [c1])
    v = b.tensor("v", "float32", [1, 4, 36], offset=b.tensors[c1]["offset"])  # a view of c1
    s = b.tensor("s", "float32", [1, 4, 36])
    b.kernel("Softmax", [v], [s], axis=-1)
    c2 = b.tensor("c2", "float32", [1, 4, 6, 6])
    b.kernel("Conv", [x, b.const("w2", randn(4, 4, 1, 1))], [c2])
    t = b.tensor("t", "float32", [1, 6, 6, 4])
    b.kernel("Transpose", [c2], [t], perm=[0, 2, 3, 1])  # a plain-only op
    b.outputs = [s, t]
    m = b.load()
    assert m.channels_last == []
    s_out, t_out = m.execute([randn(1, 4, 6, 6)])
    assert s_out.shape == (1, 4, 36) and t_out.shape == (1, 6, 6, 4)
    close(s_out.sum(axis=-1), np.ones((1, 4)))


# ---- streams and events ------------------------------------------------------------------


def _two_stream_model():
    """x -> [s0: a = Relu(x)] ; [s1: b = Neg(x)] ; s0 waits b: out = a + b, then s1
    waits out: o2 = Mul(out, b). Events carry both cross-stream edges."""
    b = SpecBuilder("twostream", num_streams=2, num_events=2)
    x = b.input("x", "float32", [64, 256])
    a = b.tensor("a", "float32", [64, 256])
    nb = b.tensor("nb", "float32", [64, 256])
    t = b.tensor("t", "float32", [64, 256])
    o = b.tensor("o", "float32", [64, 256])
    o2 = b.tensor("o2", "float32", [64, 256])
    b.kernel("Exp", [x], [a], stream=0)
    b.kernel("Tanh", [x], [nb], stream=1)
    b.kernel("Mul", [nb, nb], [t], stream=1)
    b.record(0, stream=1)
    b.wait(0, stream=0)
    b.kernel("Add", [a, t], [o], stream=0)
    b.record(1, stream=0)
    b.wait(1, stream=1)
    b.kernel("Sub", [o, nb], [o2], stream=1)
    b.outputs = [o, o2]
    return b


def test_multi_stream_events_many_runs():
    m = _two_stream_model().load()
    assert m.num_streams == 2
    for _ in range(200):
        xv = randn(64, 256)
        o, o2 = m.execute([xv])
        ref = np.exp(xv) + np.tanh(xv) ** 2
        close(o, ref, atol=1e-5)
        close(o2, ref - np.tanh(xv), atol=1e-5)
    assert m.stats()["runs"] == 200


def test_event_errors():
    b = SpecBuilder(num_streams=2, num_events=1)
    x = b.input("x", "float32", [4])
    y = b.tensor("y", "float32", [4])
    b.wait(0, stream=1)
    b.kernel("Relu", [x], [y], stream=1)
    b.outputs = [y]
    with pytest.raises(rt.InvalidArgument, match=r"node 'wait0' \(wait\): waits on event 0 before"):
        b.load()
    b.tasks[0]["event"] = 5
    with pytest.raises(rt.InvalidArgument, match="event 5 out of range"):
        b.load()
    b.tasks[0] = {"kind": "record", "name": "r", "stream": 2, "event": 0}
    with pytest.raises(rt.InvalidArgument, match=r"node 'r' \(record\): stream 2 out of range"):
        b.load()


# ---- failures ----------------------------------------------------------------------------


def _gather_model(num_streams: int = 1):
    """ids -> Gather(emb) on stream 0; stream 1 waits for it (if 2 streams)."""
    b = SpecBuilder("emb", num_streams=num_streams, num_events=1)
    ids = b.input("ids", "int64", [4])
    table = b.const("table", np.arange(30522 * 2, dtype=np.float32).reshape(30522, 2))
    g = b.tensor("g", "float32", [4, 2])
    out = b.tensor("out", "float32", [4, 2])
    b.kernel("Gather", [table, ids], [g], name="emb", axis=0)
    if num_streams == 2:
        b.record(0, stream=0)
        b.wait(0, stream=1)
    b.kernel("Relu", [g], [out], stream=num_streams - 1, name="relu")
    b.outputs = [out]
    return b.load()


@pytest.mark.parametrize("num_streams", [1, 2])
def test_failing_task_raises_with_node_name_and_model_recovers(num_streams):
    m = _gather_model(num_streams)
    good = np.array([0, 5, -1, 30521], np.int64)
    table = np.arange(30522 * 2, dtype=np.float32).reshape(30522, 2)
    close(m.execute([good])[0], table[good])
    with pytest.raises(rt.InvalidArgument,
                       match=r"^node 'emb' \(Gather\): index 30522 out of range \[-30522, 30521\] "
                             r"on axis 0$"):
        m.execute([np.array([1, 30522, 2, 3], np.int64)])
    with pytest.raises(rt.InvalidArgument, match=r"index -30523 out of range"):
        m.execute([np.array([-30523, 0, 0, 0], np.int64)])
    for _ in range(3):  # the model stays usable
        close(m.execute([good])[0], table[good])
    assert m.stats()["runs"] == 4


def test_input_validation():
    b = SpecBuilder()
    x = b.input("x", "float32", [1, 3, 224, 224])
    y = b.tensor("y", "float32", [1, 3, 224, 224])
    b.kernel("Relu", [x], [y])
    b.outputs = [y]
    m = b.load()
    with pytest.raises(rt.InvalidArgument, match=r"input 'x': expected float32\[1,3,224,224\], "
                                                 r"got float32\[1,3,224,225\]"):
        m.execute([np.zeros((1, 3, 224, 225), np.float32)])
    with pytest.raises(rt.InvalidArgument, match=r"input 'x': expected float32\[1,3,224,224\], "
                                                 r"got float64\[1,3,224,224\]"):
        m.execute([np.zeros((1, 3, 224, 224))])
    with pytest.raises(rt.InvalidArgument, match=r"got complex64"):
        m.execute([np.zeros((1, 3, 224, 224), np.complex64)])
    with pytest.raises(rt.InvalidArgument, match="expects 1 inputs, got 2"):
        m.execute([np.zeros((1, 3, 224, 224), np.float32)] * 2)
    assert m.execute([np.ones((1, 3, 224, 224), np.float32)])[0].sum() == 3 * 224 * 224


def test_spec_errors():
    def base():
        b = SpecBuilder()
        x = b.input("x", "float32", [4, 4])
        y = b.tensor("y", "float32", [4, 4])
        b.kernel("Relu", [x], [y], name="act")
        b.outputs = [y]
        return b

    b = base()
    b.tensors[1]["offset"] = b.spec()["arena_bytes"]
    with pytest.raises(rt.InvalidArgument,
                       match=r"tensor 'y': bytes \[\d+, \d+\) exceed the arena"):
        b.load()
    b = base()
    b.tasks[0]["inputs"] = [7]
    with pytest.raises(rt.InvalidArgument, match=r"node 'act' \(Relu\): input tensor index 7 out"):
        b.load()
    b = base()
    b.inputs = [9]
    with pytest.raises(rt.InvalidArgument, match="model input tensor index 9 out of range"):
        b.load()
    b = base()
    b.tasks[0]["op"] = "FancyOp"
    with pytest.raises(rt.InvalidArgument, match=r"node 'act' \(FancyOp\): unsupported op"):
        b.load()
    b = base()
    b.tensors[0]["dtype"] = "complex64"
    with pytest.raises(rt.InvalidArgument, match="unknown dtype"):
        b.load()
    b = base()
    del b.tasks[0]["name"]
    with pytest.raises(rt.InvalidArgument, match=r"tasks\[0\]: missing key 'name'"):
        b.load()
    b = base()
    b.tasks[0]["attrs"] = {"alpha": "x"}
    b.tasks[0]["op"] = "LeakyRelu"
    with pytest.raises(rt.InvalidArgument, match="attribute 'alpha' must be a float"):
        b.load()
    b = base()
    w = b.const("w", randn(4, 4))
    b.tasks[0]["outputs"] = [w]
    with pytest.raises(rt.InvalidArgument, match="must be in the arena"):
        b.load()
    spec = base().spec()
    spec["num_streams"] = 0
    with pytest.raises(rt.InvalidArgument, match="num_streams"):
        rt.Model(DEVICE, spec)


def test_weight_segments_are_used_in_place_and_checked():
    # Weights in two segments (an imported file's buffer, then the compiler's constants):
    # a tensor's offset is into their concatenation, each segment 64-byte aligned.
    a = randn(3, 5)
    bias = randn(5)
    first = np.zeros(200, np.uint8)  # 200 bytes: the second segment starts at 256
    first[:60] = a.view(np.uint8).reshape(-1)
    second = bias.view(np.uint8).copy()

    def spec(bias_offset: int) -> dict:
        b = SpecBuilder()
        x = b.input("x", "float32", [2, 3])
        y = b.tensor("y", "float32", [2, 5])
        b.tensors.append({"name": "a", "dtype": "float32", "shape": [3, 5],
                          "region": "weight", "offset": 0})
        b.tensors.append({"name": "bias", "dtype": "float32", "shape": [5],
                          "region": "weight", "offset": bias_offset})
        b.kernel("Gemm", [x, 2, 3], [y], name="gemm")
        b.outputs = [y]
        out = b.spec()
        out["weights"] = [first, second]
        return out

    xs = randn(2, 3)
    m = rt.Model(DEVICE, spec(256))
    (y,) = m.execute([xs])
    np.testing.assert_allclose(y, xs @ a + bias, rtol=1e-5, atol=1e-6)
    assert m.stats()["weight_bytes"] == 256 + 64
    with pytest.raises(rt.InvalidArgument, match=r"tensor 'bias': bytes \[192, 212\) do not lie "
                                                 r"inside one weight segment"):
        rt.Model(DEVICE, spec(192))  # the first segment's padding
    with pytest.raises(rt.InvalidArgument, match=r"tensor 'bias': bytes \[320, 340\) exceed"):
        rt.Model(DEVICE, spec(320))
    too_many = spec(256)
    too_many["weights"] = [first] * 9
    with pytest.raises(rt.InvalidArgument, match="9 segments, at most 8"):
        rt.Model(DEVICE, too_many)


def test_load_reports_first_bad_node_in_program_order_across_streams():
    # Kernels are built on their streams' workers concurrently; the error must still be
    # the first bad node in program order, whichever stream finishes first.
    b = SpecBuilder(num_streams=2)
    x = b.input("x", "float32", [4])
    y = b.tensor("y", "float32", [5])
    z = b.tensor("z", "float32", [6])
    b.kernel("Relu", [x], [y], name="first", stream=1)
    b.kernel("Relu", [x], [z], name="second", stream=0)
    b.outputs = [y]
    with pytest.raises(rt.InvalidArgument, match=r"^node 'first' \(Relu\): output shape \[5\]"):
        b.load()


# ---- concurrency -------------------------------------------------------------------------


def test_concurrent_execute_from_threads():
    m = _two_stream_model().load(rt.Device(threads=2))
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(40):
                xv = rng.standard_normal((64, 256)).astype(np.float32)
                o, o2 = m.execute([xv])
                ref = np.exp(xv) + np.tanh(xv) ** 2
                np.testing.assert_allclose(o, ref, rtol=1e-4, atol=1e-5)
                np.testing.assert_allclose(o2, ref - np.tanh(xv), rtol=1e-4, atol=1e-5)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert m.stats()["runs"] == 160


def test_concurrent_failing_and_good_runs_do_not_interfere():
    m = _gather_model(num_streams=2)
    table = np.arange(30522 * 2, dtype=np.float32).reshape(30522, 2)
    errors: list[BaseException] = []
    failures: list[int] = []  # list.append is atomic under the GIL

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for i in range(60):
                ids = rng.integers(-30522, 30522, 4).astype(np.int64)
                if (i + seed) % 3 == 0:
                    ids[2] = 40000
                    with pytest.raises(rt.InvalidArgument, match=r"node 'emb' .* index 40000"):
                        m.execute([ids])
                    failures.append(seed)
                else:
                    np.testing.assert_array_equal(m.execute([ids])[0], table[ids])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(failures) == 80
    assert m.stats()["runs"] == 240 - len(failures)


def test_fma_peak_measures_a_rate_and_checks_its_arguments():
    one = rt.fma_peak(1, 0.02)
    two = rt.fma_peak(2, 0.02)
    assert np.isfinite(one) and one > 0
    assert np.isfinite(two) and two > 0
    for threads, seconds in ((0, 0.1), (1025, 0.1), (1, 0.0), (1, -1.0), (1, 61.0),
                             (1, float("nan"))):
        with pytest.raises(rt.InvalidArgument, match="fma_peak"):
            rt.fma_peak(threads, seconds)


@pytest.mark.parametrize("n", [7, 8 * 1000 + 5, 70_001])
def test_float16_casts_round_like_numpy_in_the_vector_body_and_the_tail(n):
    """float32 -> float16 rounds to nearest even (ties, subnormals, overflow to inf, inf and
    NaN) and float16 -> float32 is exact, in the 8-wide body, the scalar tail and the
    threaded loop (n >= 65536) alike."""
    bits = RNG.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    f = bits.view(np.float32).copy()
    special = np.array([0.0, -0.0, 65504.0, 65520.0, 65519.99, 1e-8, -6e-8, 2.0**-24, 2.0**-25,
                        1.0 + 2.0**-11, 1.0 + 3 * 2.0**-11, np.inf, -np.inf, np.nan, 5.96e-8],
                       np.float32)
    f[: min(n, special.size)] = special[: min(n, special.size)]
    f[special.size: n // 2] = (f[special.size: n // 2].view(np.uint32) & 0x47FFFFFF) \
        .view(np.float32)  # most of the rest within float16's range
    with np.errstate(over="ignore", invalid="ignore"):
        want = f.astype(np.float16)
    got = run_op("Cast", [f], f.shape, "float16", to="float16")
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
    h = RNG.integers(0, 2**16, n, dtype=np.uint64).astype(np.uint16).view(np.float16)
    back = run_op("Cast", [h], h.shape, "float32", to="float32")
    wide = h.astype(np.float32)
    assert np.array_equal(np.isnan(back), np.isnan(wide))
    np.testing.assert_array_equal(back[~np.isnan(wide)], wide[~np.isnan(wide)])
