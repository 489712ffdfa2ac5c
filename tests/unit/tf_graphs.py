"""TensorFlow GraphDefs written with the project's own copy of TensorFlow's messages
(no tensorflow needed), and numpy references of the NHWC ops the importer maps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from graphengine.tensorflow import graph_def_pb2 as tfpb

DT = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
      np.dtype(np.uint8): 4, np.dtype(np.int64): 9, np.dtype(np.bool_): 10,
      np.dtype(np.float16): 19}


def tensor(arr: np.ndarray) -> tfpb.TensorProto:
    arr = np.asarray(arr)
    t = tfpb.TensorProto(dtype=DT[arr.dtype])
    t.tensor_shape.dim.extend(tfpb.TensorShapeProto.Dim(size=d) for d in arr.shape)
    t.tensor_content = np.ascontiguousarray(arr).tobytes()
    return t


def attr(value: Any) -> tfpb.AttrValue:
    if isinstance(value, bool):
        return tfpb.AttrValue(b=value)
    if isinstance(value, int):
        return tfpb.AttrValue(i=value)
    if isinstance(value, float):
        return tfpb.AttrValue(f=value)
    if isinstance(value, str):
        return tfpb.AttrValue(s=value.encode())
    if isinstance(value, np.dtype):
        return tfpb.AttrValue(type=DT[value])
    if isinstance(value, np.ndarray):
        return tfpb.AttrValue(tensor=tensor(value))
    if isinstance(value, list):
        return tfpb.AttrValue(list=tfpb.AttrValue.ListValue(i=value))
    raise TypeError(type(value))


class TfGraph:
    """GraphDef builder: each method adds a node and returns its name."""

    def __init__(self) -> None:
        self.gd = tfpb.GraphDef()

    def node(self, op: str, name: str, inputs: Sequence[str] = (), **attrs: Any) -> str:
        nd = self.gd.node.add(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            nd.attr[key].CopyFrom(attr(value))
        return name

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> str:
        arr = np.asarray(value, dtype)
        return self.node("Const", name, value=arr, dtype=arr.dtype)

    def placeholder(self, name: str, shape: Sequence[int] | None,
                    dtype: Any = np.float32) -> str:
        nd = self.gd.node.add(name=name, op="Placeholder")
        nd.attr["dtype"].CopyFrom(attr(np.dtype(dtype)))
        if shape is None:
            nd.attr["shape"].shape.unknown_rank = True
        else:
            nd.attr["shape"].shape.dim.extend(tfpb.TensorShapeProto.Dim(size=d) for d in shape)
        return name

    def bytes(self) -> bytes:
        return self.gd.SerializeToString()


# ---- numpy references (NHWC) ---------------------------------------------------------------
def same_pads(size: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def _windows(x: np.ndarray, kh: int, kw: int, strides: Sequence[int],
             dilations: Sequence[int]):
    sh, sw = strides
    dh, dw = dilations
    oh = (x.shape[1] - (kh - 1) * dh - 1) // sh + 1
    ow = (x.shape[2] - (kw - 1) * dw - 1) // sw + 1
    for i in range(kh):
        for j in range(kw):
            yield i, j, x[:, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                          j * dw:j * dw + sw * (ow - 1) + 1:sw, :]


def conv_nhwc(x: np.ndarray, f: np.ndarray, strides=(1, 1), dilations=(1, 1),
              pads=((0, 0), (0, 0)), depthwise: bool = False) -> np.ndarray:
    x = np.pad(x.astype(np.float64), ((0, 0), *pads, (0, 0)))
    out = 0.0
    for i, j, patch in _windows(x, f.shape[0], f.shape[1], strides, dilations):
        if depthwise:  # [N, h, w, C] x [C, M] -> [N, h, w, C * M]
            part = np.einsum("nhwc,cm->nhwcm", patch, f[i, j])
            out = out + part.reshape(*part.shape[:3], -1)
        else:
            out = out + patch @ f[i, j]
    return np.asarray(out, np.float32)


def pool_nhwc(x: np.ndarray, k: Sequence[int], strides: Sequence[int], pads, kind: str
              ) -> np.ndarray:
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x.astype(np.float64), ((0, 0), *pads, (0, 0)), constant_values=fill)
    ones = np.pad(np.ones_like(x, np.float64), ((0, 0), *pads, (0, 0)))
    parts = [p for _, _, p in _windows(xp, k[0], k[1], strides, (1, 1))]
    if kind == "max":
        return np.max(parts, axis=0).astype(np.float32)
    counts = [p for _, _, p in _windows(ones, k[0], k[1], strides, (1, 1))]
    return (np.sum(parts, axis=0) / np.sum(counts, axis=0)).astype(np.float32)


def conv_backprop_input(dy: np.ndarray, f: np.ndarray, out_hw: Sequence[int],
                        strides: Sequence[int], padding: str) -> np.ndarray:
    """The input gradient of conv_nhwc: what TensorFlow's Conv2DBackpropInput computes."""
    kh, kw, cin, _ = f.shape
    pads = [same_pads(n, k, s) if padding == "SAME" else (0, 0)
            for n, k, s in zip(out_hw, (kh, kw), strides)]
    full = np.zeros((dy.shape[0], out_hw[0] + sum(pads[0]) + kh,
                     out_hw[1] + sum(pads[1]) + kw, cin))
    for i in range(kh):
        for j in range(kw):
            part = dy.astype(np.float64) @ f[i, j].T
            full[:, i:i + strides[0] * dy.shape[1]:strides[0],
                 j:j + strides[1] * dy.shape[2]:strides[1]] += part
    top, left = pads[0][0], pads[1][0]
    return full[:, top:top + out_hw[0], left:left + out_hw[1]].astype(np.float32)
