"""The backend's contract: graph breaks and unsupported ops fall back to eager torch with a
report naming them, dynamic shapes become symbolic dims of one graph, training graphs are
refused, tensors cross without copies, and the entry point registers the name."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch (make test-torch)")

import graphengine.torch as gt  # noqa: E402
from graphengine.torch.tensors import to_numpy, to_torch  # noqa: E402


class Net(torch.nn.Module):
    def __init__(self, middle=None) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)
        self.middle = middle or (lambda h: h)

    def forward(self, x):
        return self.b(self.middle(torch.relu(self.a(x)))).softmax(-1)


def _run(model, *xs, backend=None, **kw):
    backend = backend or gt.backend()
    with torch.no_grad():
        compiled = torch.compile(model, backend=backend, **kw)
        for x in xs:
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-6)
    return backend


def test_a_graph_break_compiles_both_graphs() -> None:
    def middle(h):
        torch._dynamo.graph_break()
        return h * 2
    backend = _run(Net(middle).eval(), torch.randn(3, 8))
    # dynamo compiles the code before and after the break (and middle's rest) apart
    assert len(backend.reports) >= 2
    assert all(r.fully_compiled for r in backend.reports)
    assert gt.last_report() is backend.reports[-1]


def test_an_unsupported_op_runs_on_torch_between_compiled_regions() -> None:
    # sort has no converter: the graph is cut around it, the rest compiled
    backend = _run(Net(lambda h: torch.sort(h, -1).values).eval(), torch.randn(3, 8))
    (report,) = backend.reports
    # sort, and the getitem taking its values (it reads a result torch computes)
    assert [f.target for f in report.fallbacks] == ["aten.sort.default", "getitem"]
    assert "no converter for aten.sort.default" in report.fallbacks[0].reason
    assert "reads an output of 'sort'" in report.fallbacks[1].reason
    assert len(report.partitions) == 2
    assert report.compiled == report.nodes - 2
    assert "aten.sort.default" in report.summary()


def test_a_node_torch_gives_a_shape_the_engine_would_not_is_left_to_torch() -> None:
    # a boolean mask selects a data-dependent number of rows
    model = Net(lambda h: h * 3).eval()
    backend = gt.backend()
    with torch.no_grad():
        x = torch.randn(4, 8)
        want = model(x)[:, :2] + 1
        got = torch.compile(lambda x: model(x)[:, :2] + 1, backend=backend)(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert backend.reports[0].fully_compiled


def test_without_fallback_an_unsupported_op_is_refused_by_name() -> None:
    model = Net(lambda h: torch.sort(h, -1).values).eval()
    with torch.no_grad(), pytest.raises(Exception, match=r"sort \(aten.sort.default\): no "):
        torch.compile(model, backend=gt.backend(fallback=False))(torch.randn(3, 8))


def test_dynamic_shapes_are_symbolic_dims_of_one_graph() -> None:
    backend = _run(Net().eval(), torch.randn(2, 8), torch.randn(5, 8), torch.randn(9, 8),
                   dynamic=True)
    (report,) = backend.reports
    assert report.dynamic
    (part,) = report.partitions
    dims = [p for p in part.inputs if not p.split(":")[1].strip().startswith("float32[8")]
    assert any("[s" in d for d in dims), part.inputs  # the batch dim is a symbol


def test_training_graphs_are_refused_with_a_clear_message() -> None:
    model = Net().train()
    with pytest.raises(Exception, match="inference graphs: run the model under torch.no_grad"):
        torch.compile(model, backend=gt.backend())(torch.randn(3, 8))


def test_weights_are_constants_not_inputs() -> None:
    backend = _run(Net().eval(), torch.randn(3, 8))
    (part,) = backend.reports[0].partitions
    assert len(part.inputs) == 1 and part.inputs[0].endswith("float32[3,8]")


def test_tensors_cross_without_copies() -> None:
    t = torch.randn(4, 5)
    a = to_numpy(t)
    assert a.ctypes.data == t.data_ptr()  # the same memory
    back = to_torch(a)
    assert back.data_ptr() == t.data_ptr()
    strided = t.t()
    assert np.array_equal(to_numpy(strided), strided.numpy())  # a copy, made contiguous
    # outputs of consecutive runs are separate tensors (the runtime writes fresh arrays)
    model = Net().eval()
    with torch.no_grad():
        compiled = torch.compile(model, backend=gt.backend())
        x1, x2 = torch.randn(3, 8), torch.randn(3, 8)
        y1 = compiled(x1)
        keep = y1.clone()
        compiled(x2)
    torch.testing.assert_close(y1, keep, rtol=0, atol=0)


def test_the_entry_point_registers_the_backend_name() -> None:
    names = {ep.name: ep.value for ep in
             importlib.metadata.entry_points(group="torch_dynamo_backends")}
    assert names.get("graphengine") == "graphengine.torch:registered_backend"
    assert "graphengine" in torch._dynamo.list_backends()
    model = Net().eval()
    with torch.no_grad():
        x = torch.randn(2, 8)
        torch.testing.assert_close(torch.compile(model, backend="graphengine")(x), model(x),
                                   rtol=1e-4, atol=1e-6)
    assert gt.last_report().fully_compiled


def test_a_region_of_one_arithmetic_op_is_compiled() -> None:
    # aten.mul between two sorts is a region of its own (it is not size arithmetic)
    backend = gt.backend()
    with torch.no_grad():
        x = torch.randn(3, 8)
        got = torch.compile(lambda x: torch.sort(torch.sort(x).values * 2).values,
                            backend=backend)(x)
    torch.testing.assert_close(got, torch.sort(torch.sort(x).values * 2).values)
    (report,) = backend.reports
    assert len(report.partitions) == 1 and report.partitions[0].nodes == 1
    assert [f.target for f in report.fallbacks].count("aten.sort.default") == 2
