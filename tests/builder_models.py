"""Two graphs built with graphengine.Graph / graphengine.ops and their numpy references:
an MLP and a ResNet basic block (shared by the in-process and the served tests)."""

from __future__ import annotations

import numpy as np

import graphengine
from graphengine import ops


def mlp(rng: np.random.Generator) -> tuple[graphengine.Graph, dict, callable]:
    w1 = rng.standard_normal((16, 32)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(32).astype(np.float32)
    w2 = rng.standard_normal((32, 10)).astype(np.float32) * 0.3
    b2 = rng.standard_normal(10).astype(np.float32)
    g = graphengine.Graph("mlp")
    x = g.input("x", "float32", ("batch", 16))
    h = ops.Relu(ops.Gemm(x, w1, b1))
    logits = ops.Add(ops.MatMul(h, w2), b2)
    g.output(ops.Softmax(logits, axis=-1), name="probs")

    def reference(xs: np.ndarray) -> np.ndarray:
        z = np.maximum(xs @ w1 + b1, 0) @ w2 + b2
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return g, {"x": rng.standard_normal((3, 16)).astype(np.float32)}, reference


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int) -> np.ndarray:
    """Stride-1 2-D convolution, NCHW / OIHW, by summing shifted products (float64)."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, hp, wp = x.shape
    o, _, kh, kw = w.shape
    h, wd = hp - kh + 1, wp - kw + 1
    out = np.zeros((n, o, h, wd))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b.reshape(1, -1, 1, 1)


def basic_block(rng: np.random.Generator) -> tuple[graphengine.Graph, dict, callable]:
    c = 8

    def bn_params():
        return (rng.uniform(0.5, 1.5, c).astype(np.float32),
                rng.standard_normal(c).astype(np.float32) * 0.1,
                rng.standard_normal(c).astype(np.float32) * 0.1,
                rng.uniform(0.5, 1.5, c).astype(np.float32))

    w1 = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
    w2 = rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.2
    zero = np.zeros(c, np.float32)
    bn1, bn2 = bn_params(), bn_params()
    g = graphengine.Graph("resnet_basic_block")
    x = g.input("x", np.float32, (1, c, 10, 10))
    y = ops.Conv(x, w1, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    assert y.shape == (1, c, 10, 10)
    y = ops.Relu(ops.BatchNormalization(y, *bn1, epsilon=1e-5))
    y = ops.Conv(y, w2, pads=[1, 1, 1, 1])
    y = ops.BatchNormalization(y, *bn2, epsilon=1e-5)
    g.output(ops.Relu(y + x), name="y")

    def bn(v, p):
        scale, bias, mean, var = (a.reshape(1, -1, 1, 1).astype(np.float64) for a in p)
        return (v - mean) / np.sqrt(var + 1e-5) * scale + bias

    def reference(xs: np.ndarray) -> np.ndarray:
        h = np.maximum(bn(conv2d(xs, w1, zero, 1), bn1), 0)
        return np.maximum(bn(conv2d(h, w2, zero, 1), bn2) + xs, 0)

    return g, {"x": rng.standard_normal((1, c, 10, 10)).astype(np.float32)}, reference
