"""Both paths of every kernel that has an AVX-512 one: the runtime's own AVX-512 kernels, and
what runs without them (oneDNN's primitives, the plain kernels, no conv-block fusion). Each
case runs with the AVX-512 kernels allowed and forbidden (`_runtime.set_avx512_allowed`),
checks the result against ONNX Runtime and checks which implementation ran. On a CPU without
AVX-512F the AVX-512 half is skipped with that reason (pytest -ra lists it)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import compile_graph
from graphengine.engine.runtime import LoadedModel
from tests import zoo

RNG = np.random.default_rng(5)


def _one(nodes, x_shape, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "isa", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def _weights(*shape) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


# name -> (model builder, the implementation the AVX-512 path runs)
CASES: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "transpose": (lambda: _one([helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 1])],
                               [2, 40, 24]), "transpose avx512"),
    "gelu": (lambda: _one([helper.make_node("Gelu", ["x"], ["y"])], [4, 100], opset=20),
             "gelu avx512"),
    "softmax": (lambda: _one([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [8, 77]),
                "rows avx512"),
    "softmax_strided": (lambda: _one([helper.make_node("Softmax", ["x"], ["y"], axis=1)],
                                     [2, 16, 37]), "strided avx512"),
    "gemv": (lambda: _one([helper.make_node("MatMul", ["x", "w"], ["y"])], [1, 96],
                          [("w", _weights(96, 130))]), "gemv avx512"),
    "matmul_gelu": (lambda: _one([helper.make_node("MatMul", ["x", "w"], ["m"]),
                                  helper.make_node("Gelu", ["m"], ["y"])], [16, 64],
                                 [("w", _weights(64, 48))], opset=20), "gelu avx512"),
    "conv_block": (lambda: zoo.mobilenetv2(width_mult=0.35, image=32, classes=10),
                   "block avx512"),
    "lstm": (lambda: _one([helper.make_node("LSTM", ["x", "w", "r", "b"], ["y"], hidden_size=20,
                                            direction="bidirectional")], [6, 5, 12],
                          [("w", _weights(2, 80, 12)), ("r", _weights(2, 80, 20)),
                           ("b", _weights(2, 160))]), "rnn panels avx512"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_path_matches_onnxruntime_and_is_the_one_that_ran(isa: str, case: str) -> None:
    build, own = CASES[case]
    model = build()
    assert _runtime.cpu_has_avx512() == (isa == "avx512")
    loaded = LoadedModel(compile_graph(load_model(model)))
    feeds = zoo.random_inputs(model, seed=3)
    got = loaded.execute(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * max(1.0, np.abs(w).max()))
    ran = [t["impl"] for native in loaded.natives.values() for t in native.profile()]
    assert any(own in impl for impl in ran) == (isa == "avx512"), ran
    if isa == "fallback":  # none of ours ("<kernel> avx512"; oneDNN picks its own ISA)
        assert not any(impl.endswith(" avx512") for impl in ran), ran
