"""Custom operators: register_op in process, in ONNX files and in the builder; plugin files
(.py and native .so) and the errors of bad ones; native kernels on the device engine."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import graphengine
import graphengine.errors
from graphengine import ops
from graphengine.engine.errors import ExecutionError, InvalidGraph, InvalidPlugin, ShapeError
from graphengine.engine.ops.custom import OpMeta
from tests.plugins import PY_PLUGIN, build_plugin


def _run(graph, inputs, compile_report=False):
    with graphengine.Session() as s:
        gid = s.add_graph(graph)
        report = s.compile_graph(gid)
        out = s.run_graph(gid, inputs)
    return (out, report) if compile_report else out


def _engines(report) -> dict[str, str]:
    return {p.op_type: p.engine for p in report.placements}


def test_register_op_runs_in_the_builder_with_attrs_and_infer() -> None:
    def pair(x, *, k=1):
        """Splits rows: the first k, and the rest plus one."""
        return x[:k], x[k:] + 1

    def infer(x, *, k=1):
        rows = x.shape[0]
        return [(x.dtype, (k, *x.shape[1:])), (x.dtype, (rows - k, *x.shape[1:]))]

    key = graphengine.register_op("SplitRows", pair, domain="test.unit", inputs=["x"],
                                  outputs=["head", "tail"], attrs={"k": 1}, infer=infer)
    assert key == "test.unit.SplitRows"
    assert "Splits rows" in ops.SplitRows.__doc__
    assert str(ops.SplitRows.__signature__) == "(x, /, *, k=1, name=None, outputs=None)"
    g = graphengine.Graph("custom")
    x = g.input("x", "float32", (5, 3))
    head, tail = ops.SplitRows(ops.Relu(x), k=2)
    assert head.shape == (2, 3) and tail.shape == (3, 3)
    g.output(head, name="head")
    g.output(tail * 2.0, name="tail")
    xs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    out, report = _run(g, {"x": xs}, compile_report=True)
    np.testing.assert_allclose(out["head"], np.maximum(xs, 0)[:2])
    np.testing.assert_allclose(out["tail"], (np.maximum(xs, 0)[2:] + 1) * 2)
    (rec,) = [p for p in report.placements if p.op_type == key]
    assert rec.engine == "host" and "has no native kernel" in rec.rejections[0]
    with pytest.raises(InvalidGraph, match=r"ops\.SplitRows\(\): test\.unit\.SplitRows has no "
                                           r"attribute 'kk'"):
        ops.SplitRows(x, kk=1)
    with pytest.raises(InvalidGraph, match="takes 1 inputs, got 2"):
        ops.SplitRows(x, x)


def test_a_custom_op_in_an_onnx_file_by_domain_and_op_type(tmp_path) -> None:
    graphengine.register_op("Mish", lambda x: x * np.tanh(np.log1p(np.exp(x))),
                            domain="test.onnx")
    node = helper.make_node("Mish", ["x"], ["y"], domain="test.onnx")
    graph = helper.make_graph([node], "mish", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 3])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("test.onnx", 1)])
    path = tmp_path / "mish.onnx"
    onnx.save(model, str(path))
    xs = np.linspace(-3, 3, 6, dtype=np.float32).reshape(2, 3)
    out = _run(str(path), {"x": xs})
    np.testing.assert_allclose(out["y"], xs * np.tanh(np.log1p(np.exp(xs))), rtol=1e-6)
    model.graph.node[0].domain = "test.unknown"
    with pytest.raises(InvalidGraph, match="unknown op type 'test.unknown.Mish'"):
        _run(model.SerializeToString(), {"x": xs})


def test_constant_inputs_fold_through_the_custom_kernel() -> None:
    calls = []

    def double(x):
        calls.append(x.shape)
        return x * 2

    graphengine.register_op("Double", double, domain="test.fold", inputs=1)
    g = graphengine.Graph("fold")
    x = g.input("x", "float32", (3,))
    g.output(x + ops.Double(g.constant(np.arange(3, dtype=np.float32))), name="y")
    out, report = _run(g, {"x": np.ones(3, np.float32)}, compile_report=True)
    np.testing.assert_array_equal(out["y"], [1, 3, 5])
    assert calls and "test.fold.Double" not in _engines(report)  # folded at compile time


def test_a_kernel_that_breaks_its_promise_is_named() -> None:
    graphengine.register_op("Wrong", lambda x: x.astype(np.float64), domain="test.bad")
    graphengine.register_op("BadInfer", lambda x: x, domain="test.bad",
                            infer=lambda x: 1 / 0)
    g = graphengine.Graph("wrong")
    x = g.input("x", "float32", (2,))
    g.output(ops.Wrong(x), name="y")
    with pytest.raises(ExecutionError, match=r"custom op 'test.bad.Wrong': compute returned "
                                             r"float64\[2\] for output 0, its infer says "
                                             r"float32\[2\]"):
        _run(g, {"x": np.ones(2, np.float32)})
    with pytest.raises(ShapeError, match=r"\(test.bad.BadInfer\): the custom op's infer "
                                         r"failed: ZeroDivisionError"):
        ops.BadInfer(x)


@pytest.mark.parametrize("kwargs, message", [
    ({"op_type": "Relu"}, "'Relu' is a built-in op"),
    ({"op_type": "ConvDw", "domain": "graphengine"}, "domain 'graphengine' is GraphEngine's"),
    ({"op_type": "a-b"}, "is not a name"),
    ({"op_type": "X", "domain": "bad..domain"}, "is not a dotted name"),
    ({"op_type": "X", "attrs": {"_hidden": 1}}, "attribute name '_hidden' is not allowed"),
    ({"op_type": "X", "attrs": {"a": None}}, "attribute 'a' has default None"),
    ({"op_type": "X", "inputs": ["a?", "b"]}, "input 'b' follows an optional one"),
    ({"op_type": "X", "inputs": 65}, "inputs=65 is outside 0..64"),
    ({"op_type": "X", "outputs": 0}, "outputs=0 is outside 1..64"),
    ({"op_type": "X", "compute": 3}, "compute must be callable"),
])
def test_bad_registrations_are_refused(kwargs, message) -> None:
    kwargs = {"compute": lambda x: x, **kwargs}
    with pytest.raises(InvalidPlugin, match=message):
        graphengine.register_op(kwargs.pop("op_type"), kwargs.pop("compute"), **kwargs)


def test_attribute_kinds_and_required_ones() -> None:
    graphengine.register_op("Attrs", lambda x, **a: x, domain="test.kinds",
                            attrs={"i": 1, "f": 0.5, "s": "a", "li": [1, 2], "lf": [1, 0.5],
                                   "req": int})
    sig = ops.op("test.kinds.Attrs").__signature__
    assert sig.parameters["li"].default == [1, 2] and sig.parameters["lf"].default == [1.0, 0.5]
    g = graphengine.Graph("kinds")
    x = g.input("x", "float32", (1,))
    with pytest.raises(InvalidGraph, match="missing required attribute 'req'"):
        ops.Attrs(x)
    with pytest.raises(InvalidGraph, match="attribute 'req' of test.kinds.Attrs must be int"):
        ops.Attrs(x, req="3")
    assert ops.Attrs(x, req=3).shape == (1,)


def test_python_plugin_files_and_their_errors(tmp_path) -> None:
    assert graphengine.load_plugin(PY_PLUGIN) == ["test.py.ClipScale"]
    assert graphengine.load_plugin(str(PY_PLUGIN)) == ["test.py.ClipScale"]  # once
    g = graphengine.Graph("clip")
    x = g.input("x", "float32", (4,))
    g.output(ops.ClipScale(x, scale=3.0), name="y")
    xs = np.array([-2, -0.5, 0.5, 2], np.float32)
    np.testing.assert_allclose(_run(g, {"x": xs})["y"], np.clip(xs, -1, 1) * 3)
    cases = {
        "syntax.py": ("def f(:\n", r"failed to load \(line 1\): SyntaxError"),
        "raises.py": ("x = 1\nraise RuntimeError('boom')\n",
                      r"failed to load \(line 2\): RuntimeError: boom"),
        "empty.py": ("x = 1\n", "registered no operator"),
        "clash.py": ("import graphengine\ngraphengine.register_op('Relu', abs)\n",
                     "'Relu' is a built-in op"),
        "notes.txt": ("hello", "not a .py module or a .so library"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(InvalidPlugin, match=f"plugin '.*{name}'.*{message}|{message}"):
            graphengine.load_plugin(tmp_path / name)
    with pytest.raises(InvalidPlugin, match="no such file"):
        graphengine.load_plugin(tmp_path / "missing.py")


@pytest.fixture(scope="module")
def native_plugin(tmp_path_factory) -> str:
    path = build_plugin("square_plus.c", tmp_path_factory.mktemp("native") / "square_plus.so")
    # Scale is registered in Python first (its attribute and numpy reference); the library
    # then gives it a device kernel. SquarePlus and Fail have no Python registration.
    graphengine.register_op("Scale", lambda x, *, factor=1.0: x * np.float32(factor),
                            domain="test.native", attrs={"factor": 1.0})
    assert graphengine.load_plugin(path) == ["test.native.SquarePlus", "test.native.Scale",
                                             "test.native.Fail"]
    return str(path)


def test_a_native_plugin_runs_on_the_device_engine(native_plugin) -> None:
    g = graphengine.Graph("native")
    x = g.input("x", "float32", (4, 8))
    y = ops.Scale(ops.SquarePlus(ops.Relu(x)), factor=0.5)
    assert y.shape == (4, 8) and y.dtype == np.float32
    g.output(y, name="y")
    xs = np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32)
    out, report = _run(g, {"x": xs}, compile_report=True)
    np.testing.assert_allclose(out["y"], np.maximum(xs, 0) ** 2 * 0.5, rtol=1e-6)
    engines = _engines(report)
    assert engines["test.native.SquarePlus"] == "device"
    assert engines["test.native.Scale"] == "device"


def test_a_native_kernel_is_also_the_host_kernel(native_plugin) -> None:
    g = graphengine.Graph("host")
    x = g.input("x", "float64", (3,))  # Scale's kernel takes float32 only: host for it
    g.output(ops.SquarePlus(ops.Scale(x, factor=2.0)), name="y")
    g.output(ops.SquarePlus(g.constant(np.array([3.0], np.float32))), name="folded")
    out, report = _run(g, {"x": np.array([1, 2, 3], np.float64)}, compile_report=True)
    np.testing.assert_array_equal(out["y"], [4, 16, 36])
    np.testing.assert_array_equal(out["folded"], [9])
    (rec,) = [p for p in report.placements if p.op_type == "test.native.Scale"]
    assert rec.engine == "host" and "does not take float64" in rec.rejections[0]


def test_a_failing_native_kernel_names_the_node_and_says_why(native_plugin) -> None:
    g = graphengine.Graph("fail")
    x = g.input("x", "float32", (2,))
    g.output(ops.Fail(x, name="boom"), name="y")
    with pytest.raises(graphengine.errors.GraphEngineError,
                       match=r"boom.*plugin kernel 'test.native.Fail'.*failed with 7: this "
                             r"kernel always fails \(1 inputs\)"):
        _run(g, {"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("define, message", [
    ("BUILTIN", "op type 'Relu' is an op GraphEngine has already"),
    ("ABI", "built for plugin ABI 2; this runtime has ABI 1"),
    ("NONE", "registered no kernel"),
    ("NOINIT", "exports no ge_plugin_init"),
])
def test_bad_native_plugins_are_refused(tmp_path, define, message) -> None:
    path = build_plugin("bad_plugins.c", tmp_path / f"bad_{define}.so", define)
    with pytest.raises(InvalidPlugin, match=f"plugin '.*bad_{define}.so'.*{message}"):
        graphengine.load_plugin(path)
    (tmp_path / "junk.so").write_bytes(b"\x7fELF not really")
    with pytest.raises(InvalidPlugin, match="is not a loadable shared library"):
        graphengine.load_plugin(tmp_path / "junk.so")


def test_infer_gets_op_metas() -> None:
    seen = []
    graphengine.register_op("Seen", lambda x, y=None: x, domain="test.meta",
                            inputs=["x", "y?"], infer=lambda x, y=None: seen.append((x, y)) or x)
    g = graphengine.Graph("meta")
    ops.Seen(g.input("x", "int64", ("n", 2)))
    assert seen[0] == (OpMeta(np.dtype(np.int64), ("n", 2)), None)
