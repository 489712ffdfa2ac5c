"""Shape, creation and indexing ops against onnxruntime, incl. exact inference from
constant shape inputs and symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest

from graphengine.engine.dtypes import DType
from graphengine.engine.errors import ShapeError
from tests.unit.test_ops_common import check, rand, symbolic


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# ---- shape manipulation ---------------------------------------------------------------------
@pytest.mark.parametrize("target", [(0, -1), (-1,), (3, 0, 2, 2), (2, -1, 4), (24,)])
def test_reshape_zero_and_minus_one(target: tuple[int, ...]) -> None:
    check("Reshape", [("x", rand(3, 2, 4)), ("s", i64(*target))], consts=["s"])


def test_reshape_allowzero() -> None:
    check("Reshape", [("x", rand(0, 3)), ("s", i64(3, 0))], {"allowzero": 1}, consts=["s"],
          opset=17)


def test_reshape_runtime_shape_gives_rank() -> None:
    g, _ = check("Reshape", [("x", rand(2, 6)), ("s", i64(3, 4))], exact_shapes=False)
    assert len(g.outputs[0].meta.shape) == 2


def test_reshape_symbolic_cancels_symbols() -> None:
    (meta,) = symbolic("Reshape", {"x": ["b", "s", 12]},
                       [("x", rand(2, 3, 12)), ("t", i64(0, 0, 3, 4))], consts=["t"])
    assert meta.shape == ("b", "s", 3, 4)
    (meta,) = symbolic("Reshape", {"x": ["b", 3, 4]},
                       [("x", rand(2, 3, 4)), ("t", i64(0, -1))], consts=["t"])
    assert meta.shape == ("b", 12)


def test_reshape_bad_size_is_shape_error() -> None:
    with pytest.raises(ShapeError, match="cannot reshape"):
        check("Reshape", [("x", rand(2, 3)), ("s", i64(4, 2))], consts=["s"])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_flatten(axis: int) -> None:
    check("Flatten", [("x", rand(2, 3, 4))], {"axis": axis})


def test_squeeze_unsqueeze() -> None:
    check("Squeeze", [("x", rand(1, 3, 1, 2)), ("a", i64(0, -2))], consts=["a"])
    check("Squeeze", [("x", rand(1, 3, 1, 2))])
    check("Unsqueeze", [("x", rand(3, 2)), ("a", i64(0, -1, 2))], consts=["a"])
    (meta,) = symbolic("Unsqueeze", {"x": ["n", 2]}, [("x", rand(3, 2)), ("a", i64(1))],
                       consts=["a"])
    assert meta.shape == ("n", 1, 2)


def test_squeeze_of_non_one_dim_is_error() -> None:
    with pytest.raises(ShapeError, match="cannot squeeze axis 1 of size 3"):
        check("Squeeze", [("x", rand(1, 3)), ("a", i64(1))], consts=["a"])


def test_old_opset_squeeze_attribute_is_rewritten() -> None:
    check("Squeeze", [("x", rand(1, 3, 1))], {"axes": [0]}, opset=11)
    check("Unsqueeze", [("x", rand(3))], {"axes": [0, 2]}, opset=11)


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1]])
def test_transpose(perm: list[int] | None) -> None:
    check("Transpose", [("x", rand(2, 3, 4))], {"perm": perm} if perm else {})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis: int) -> None:
    a, b = rand(2, 3, 4), rand(2, 3, 4, seed=1)
    check("Concat", [("a", a), ("b", b), ("c", a)], {"axis": axis})


def test_concat_symbolic_and_mismatch() -> None:
    (meta,) = symbolic("Concat", {"a": ["n", 3], "b": ["n", 4]},
                       [("a", rand(2, 3)), ("b", rand(2, 4))],
                       {"axis": 1})
    assert meta.shape == ("n", 7)
    with pytest.raises(ShapeError, match="dim 1 differs"):
        check("Concat", [("a", rand(2, 3)), ("b", rand(2, 4))], {"axis": 0})


def test_split_forms() -> None:
    x = rand(6, 4)
    check("Split", [("x", x), ("s", i64(2, 4))], {"axis": 0}, n_outputs=2, consts=["s"])
    check("Split", [("x", x)], {"axis": 1}, n_outputs=2)
    check("Split", [("x", rand(7, 2))], {"num_outputs": 3}, n_outputs=3, opset=18)
    check("Split", [("x", x)], {"axis": -1, "split": [1, 3]}, n_outputs=2, opset=11)


def test_expand_and_tile() -> None:
    check("Expand", [("x", rand(3, 1)), ("s", i64(2, 1, 4))], consts=["s"])
    check("Expand", [("x", np.array([[1], [2]], np.int64)), ("s", i64(2, 3))], consts=["s"])
    check("Tile", [("x", rand(2, 3)), ("r", i64(2, 1))], consts=["r"])
    (meta,) = symbolic("Expand", {"x": ["n", 1]}, [("x", rand(3, 1)), ("s", i64(1, 5))],
                       consts=["s"])
    assert meta.shape == ("n", 5)


def test_shape_size() -> None:
    x = rand(2, 3, 4)
    check("Shape", [("x", x)])
    check("Shape", [("x", x)], {"start": 1, "end": -1}, opset=15)
    check("Size", [("x", x)])
    (meta,) = symbolic("Shape", {"x": ["b", 3, 4]}, [("x", x)])
    assert meta.shape == (3,) and meta.dtype is DType.INT64


def test_identity_dropout_inference() -> None:
    x = rand(3, 4)
    check("Identity", [("x", x)])
    check("Dropout", [("x", x)])
    check("Dropout", [("x", x), ("r", np.array(0.3, np.float32))], n_outputs=2, consts=["r"])


def test_depth_space() -> None:
    x = rand(1, 8, 2, 3)
    check("DepthToSpace", [("x", x)], {"blocksize": 2})
    check("DepthToSpace", [("x", x)], {"blocksize": 2, "mode": "CRD"})
    check("SpaceToDepth", [("x", rand(1, 2, 4, 6))], {"blocksize": 2})


# ---- creation and casting -------------------------------------------------------------------
@pytest.mark.parametrize("to,dtype", [(7, np.int64), (10, np.float16), (9, np.bool_),
                                      (11, np.float64), (6, np.int32), (2, np.uint8)])
def test_cast(to: int, dtype: type) -> None:
    check("Cast", [("x", np.array([[0.0, 1.5, -2.7], [3.2, 250.0, 0.0]], np.float32))],
          {"to": to})


def test_cast_like_and_strings() -> None:
    check("CastLike", [("x", rand(2, 3)), ("t", np.zeros(1, np.float64))])
    check("Cast", [("x", np.array(["1.5", "-3", "INF"], dtype=object))], {"to": 1})


def test_constant_of_shape_and_range() -> None:
    check("ConstantOfShape", [("s", i64(2, 3))], consts=["s"])
    value = np.array([7], np.int64)
    from onnx import numpy_helper
    check("ConstantOfShape", [("s", i64(3))], {"value": numpy_helper.from_array(value)},
          consts=["s"])
    check("Range", [("a", np.array(1, np.int64)), ("b", np.array(10, np.int64)),
                    ("d", np.array(3, np.int64))], consts=["a", "b", "d"])
    check("Range", [("a", np.array(1.0, np.float32)), ("b", np.array(-2.0, np.float32)),
                    ("d", np.array(-0.5, np.float32))], consts=["a", "b", "d"])
    g, _ = check("Range", [("a", np.array(0, np.int32)), ("b", np.array(5, np.int32)),
                           ("d", np.array(2, np.int32))], exact_shapes=False)
    assert g.outputs[0].meta.rank == 1


def test_eyelike_trilu_onehot() -> None:
    check("EyeLike", [("x", rand(3, 4))], {"k": 1})
    check("EyeLike", [("x", rand(3, 3))], {"dtype": 7})
    x = rand(2, 4, 4)
    check("Trilu", [("x", x)])
    check("Trilu", [("x", x), ("k", np.array(-1, np.int64))], {"upper": 0})
    check("OneHot", [("i", i64(0, 2, -1, 5)), ("d", np.array(4, np.int64)),
                     ("v", np.array([0.0, 1.0], np.float32))], {"axis": 0}, consts=["d"])


# ---- indexing -------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis: int) -> None:
    check("Gather", [("x", rand(3, 4, 5)), ("i", i64(0, -1, 2))], {"axis": axis})
    check("Gather", [("x", rand(3, 4)), ("i", np.array([[0, 1], [2, 0]], np.int32))],
          {"axis": 0})


def test_gather_elements_nd() -> None:
    x = rand(3, 4)
    idx = np.array([[0, 3, -1], [1, 2, 0], [2, 2, 2]], np.int64)
    check("GatherElements", [("x", x), ("i", idx)], {"axis": 1})
    check("GatherND", [("x", rand(2, 3, 4)), ("i", np.array([[0, 1], [1, 2]], np.int64))])
    check("GatherND", [("x", rand(2, 3, 4)), ("i", np.array([[1], [0]], np.int64))],
          {"batch_dims": 1})


def test_scatter() -> None:
    x = rand(3, 4)
    idx = np.array([[0, 3], [1, 1]], np.int64)
    upd = rand(2, 2, seed=1)
    check("ScatterElements", [("x", x), ("i", idx), ("u", upd)], {"axis": 1})
    check("ScatterElements", [("x", x), ("i", idx), ("u", upd)],
          {"axis": 1, "reduction": "add"})
    check("ScatterND", [("x", rand(4, 3)), ("i", np.array([[1], [3]], np.int64)),
                        ("u", rand(2, 3, seed=2))])


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([0, 1], [2, 3], None, None), ([-2], [100], [1], None), ([3], [0], [0], [-1]),
    ([0, 0], [-1, 4], [-1, 0], [2, 1]), ([10], [12], [0], None),
])
def test_slice(starts: list[int], ends: list[int], axes: list[int] | None,
               steps: list[int] | None) -> None:
    ins = [("x", rand(4, 5)), ("s", i64(*starts)), ("e", i64(*ends))]
    names = ["s", "e"]
    if axes is not None or steps is not None:
        ins.append(("a", i64(*(axes or range(len(starts))))))
        names.append("a")
    if steps is not None:
        ins.append(("t", i64(*steps)))
        names.append("t")
    check("Slice", ins, consts=names)


def test_slice_old_opset_attributes() -> None:
    check("Slice", [("x", rand(4, 5))], {"starts": [1], "ends": [3], "axes": [1]}, opset=9)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode: str) -> None:
    check("Pad", [("x", rand(3, 4)), ("p", i64(1, 2, 2, 0))], {"mode": mode}, consts=["p"])


def test_pad_value_negative_and_axes() -> None:
    check("Pad", [("x", rand(3, 4)), ("p", i64(0, -1, 1, 2)),
                  ("v", np.array(1.5, np.float32))], consts=["p", "v"])
    check("Pad", [("x", rand(2, 3, 4)), ("p", i64(1, 1)), ("v", np.array(0.0, np.float32)),
                  ("a", i64(-1))], consts=["p", "v", "a"], opset=18)
    check("Pad", [("x", rand(3, 4))], {"pads": [1, 0, 0, 2], "value": 2.0}, opset=10)


def test_data_dependent_shapes() -> None:
    x = np.array([[1, 0, 2], [0, 0, 3]], np.float32)
    check("NonZero", [("x", x)], exact_shapes=False)
    check("Compress", [("x", rand(3, 2)), ("c", np.array([True, False, True]))], {"axis": 0},
          exact_shapes=False)
    check("Unique", [("x", np.array([2, 1, 1, 3, 4, 3], np.float32))], {"sorted": 0},
          n_outputs=4, exact_shapes=False)
    check("ReverseSequence", [("x", rand(4, 3)), ("l", i64(4, 2, 1))],
          {"batch_axis": 1, "time_axis": 0})
