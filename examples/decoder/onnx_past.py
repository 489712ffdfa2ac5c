"""The same Llama-style decoder as an ONNX model with past-key-value inputs and outputs, run
by ONNX Runtime with its KV cache bound through IO binding: the usual way a stateless
runtime decodes, and what examples/decoder/llama.py's session variables are compared with.

    inputs   input_ids int64[1, s], past_key.{i} / past_value.{i} float32[1, kv, past, d]
    outputs  next_token int64[1, 1] (greedy), present_key.{i} / present_value.{i}
             float32[1, kv, past + s, d] (the past with this call's positions appended),
             and with `logits=True` logits float32[1, s, vocab]

Every call takes the whole past in and gives the whole present out: with IO binding the
arrays are bound in place (no copy by the binding), but the state is still the request's,
and each step's Concat writes the grown cache anew.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .llama import NEG, LlamaConfig, rope_tables

OPSET = 17


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def const(self, array: np.ndarray, name: str | None = None) -> str:
        self._n += 1
        name = name or f"c{self._n}"
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op: str, *inputs: str, **attrs: Any) -> str:
        self._n += 1
        out = f"{op.lower()}_{self._n}"
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def i64(self, *values: int) -> str:
        return self.const(np.array(values, np.int64))


def onnx_decoder(cfg: LlamaConfig, w: Mapping[str, np.ndarray],
                 logits: bool = False) -> onnx.ModelProto:
    b = _Builder()
    d, nh, nkv = cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    cos_t, sin_t = rope_tables(cfg)
    cos_t, sin_t = b.const(cos_t, "cos_table"), b.const(sin_t, "sin_table")
    past = b.op("Shape", "past_key.0", start=2, end=3)
    total = b.op("Add", past, b.op("Shape", "input_ids", start=1, end=2))
    zero, one = b.const(np.array(0, np.int64)), b.const(np.array(1, np.int64))
    positions = b.op("Range", b.op("Squeeze", past), b.op("Squeeze", total), one)
    cos = b.op("Unsqueeze", b.op("Gather", cos_t, positions), b.i64(0, 1))
    sin = b.op("Unsqueeze", b.op("Gather", sin_t, positions), b.i64(0, 1))
    keys = b.op("Unsqueeze", b.op("Range", zero, b.op("Squeeze", total), one), b.i64(0))
    mask = b.op("Where", b.op("Greater", keys, b.op("Unsqueeze", positions, b.i64(1))),
                b.const(NEG), b.const(np.float32(0)))
    eps = b.const(np.float32(cfg.rms_norm_eps))

    def rms(x: str, weight: np.ndarray) -> str:
        var = b.op("ReduceMean", b.op("Mul", x, x), axes=[-1], keepdims=1)
        inv = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, eps)))
        return b.op("Mul", b.op("Mul", x, inv), b.const(weight))

    def heads(x: str, n: int) -> str:
        return b.op("Transpose", b.op("Reshape", x, b.i64(1, -1, n, d)), perm=[0, 2, 1, 3])

    def rope(x: str) -> str:
        x1 = b.op("Slice", x, b.i64(0), b.i64(d // 2), b.i64(3))
        x2 = b.op("Slice", x, b.i64(d // 2), b.i64(d), b.i64(3))
        rot = b.op("Concat", b.op("Neg", x2), x1, axis=-1)
        return b.op("Add", b.op("Mul", x, cos), b.op("Mul", rot, sin))

    # grouped-query attention as the session's graphs do it: the query heads sharing a KV
    # head folded into the query axis, the mask repeated for them (no K or V copied)
    group = nh // nkv
    att_mask = b.op("Tile", mask, b.i64(group, 1)) if group > 1 else mask

    h = b.op("Gather", b.const(w["embed"]), "input_ids")
    presents = []
    for i in range(cfg.num_hidden_layers):
        x = rms(h, w[f"{i}.attn_norm"])
        q = rope(heads(b.op("MatMul", x, b.const(w[f"{i}.q"])), nh))
        k = rope(heads(b.op("MatMul", x, b.const(w[f"{i}.k"])), nkv))
        v = heads(b.op("MatMul", x, b.const(w[f"{i}.v"])), nkv)
        k = b.op("Concat", f"past_key.{i}", k, axis=2)
        v = b.op("Concat", f"past_value.{i}", v, axis=2)
        presents += [(f"present_key.{i}", k), (f"present_value.{i}", v)]
        if group > 1:
            q = b.op("Reshape", q, b.i64(1, nkv, -1, d))
        scores = b.op("Mul", b.op("MatMul", q, b.op("Transpose", k, perm=[0, 1, 3, 2])),
                      b.const(np.float32(1 / np.sqrt(d))))
        p = b.op("Softmax", b.op("Add", scores, att_mask), axis=-1)
        att = b.op("MatMul", p, v)
        if group > 1:
            att = b.op("Reshape", att, b.i64(1, nh, -1, d))
        att = b.op("Reshape", b.op("Transpose", att, perm=[0, 2, 1, 3]), b.i64(1, -1, nh * d))
        h = b.op("Add", h, b.op("MatMul", att, b.const(w[f"{i}.o"])))
        x = rms(h, w[f"{i}.mlp_norm"])
        gate = b.op("MatMul", x, b.const(w[f"{i}.gate"]))
        act = b.op("Mul", gate, b.op("Sigmoid", gate))
        up = b.op("MatMul", x, b.const(w[f"{i}.up"]))
        h = b.op("Add", h, b.op("MatMul", b.op("Mul", act, up), b.const(w[f"{i}.down"])))
    last = b.op("Gather", h, b.i64(-1), axis=1)
    out = b.op("MatMul", rms(last, w["norm"]), b.const(w["lm_head"]))
    nxt = b.op("ArgMax", out, axis=-1, keepdims=0)
    renames = [("next_token", nxt)] + presents
    if logits:
        renames.append(("logits", out))
    for name, src in renames:
        b.nodes.append(helper.make_node("Identity", [src], [name]))
    cache = [1, nkv, "past", d]
    graph = helper.make_graph(
        b.nodes, "llama_past_kv",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "s"])]
        + [helper.make_tensor_value_info(f"past_{kv}.{i}", TensorProto.FLOAT, cache)
           for i in range(cfg.num_hidden_layers) for kv in ("key", "value")],
        [helper.make_tensor_value_info("next_token", TensorProto.INT64, [1, 1])]
        + [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, nkv, "total", d])
           for name, _ in presents]
        + ([helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, "vocab"])]
           if logits else []),
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model


class OrtDecoder:
    """ONNX Runtime running `onnx_decoder` step by step, the past bound through IO binding:
    each step's present OrtValues are bound as the next step's past (no copies by the
    binding). `io_bytes` counts the bytes bound as inputs and outputs of the steps."""

    def __init__(self, cfg: LlamaConfig, w: Mapping[str, np.ndarray], threads: int = 1) -> None:
        import onnxruntime as ort

        self.ort = ort
        self.cfg = cfg
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_decoder(cfg, w).SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])
        self.names = [f"{kv}.{i}" for i in range(cfg.num_hidden_layers)
                      for kv in ("key", "value")]
        self.io_bytes = 0
        self.steps = 0
        self.decode_seconds = 0.0
        self.decode_bytes = 0

    def _run(self, ids: np.ndarray, past: list[Any]) -> tuple[int, list[Any]]:
        io = self.session.io_binding()
        io.bind_cpu_input("input_ids", ids)
        self.io_bytes += ids.nbytes
        for name, value in zip(self.names, past):
            io.bind_ortvalue_input(f"past_{name}", value)
            self.io_bytes += int(np.prod(value.shape())) * 4
        io.bind_output("next_token")
        for name in self.names:
            io.bind_output(f"present_{name}")
        self.session.run_with_iobinding(io)
        outs = io.get_outputs()
        token = outs[0].numpy()
        self.io_bytes += token.nbytes + sum(int(np.prod(o.shape())) * 4 for o in outs[1:])
        self.steps += 1
        return int(token.reshape(-1)[0]), list(outs[1:])

    def generate(self, prompt: np.ndarray, n: int) -> list[int]:
        """`n` greedy tokens after `prompt`; `decode_seconds` / `decode_bytes` then hold the
        time and the bound bytes of the steps after the prompt's."""
        cfg = self.cfg
        empty = np.zeros((1, cfg.num_key_value_heads, 0, cfg.head_dim), np.float32)
        past = [self.ort.OrtValue.ortvalue_from_numpy(empty) for _ in self.names]
        token, past = self._run(np.asarray(prompt, np.int64)[None], past)
        tokens = [token]
        start, bytes0 = time.perf_counter(), self.io_bytes
        while len(tokens) < n:
            token, past = self._run(np.array([[tokens[-1]]], np.int64), past)
            tokens.append(token)
        self.decode_seconds = time.perf_counter() - start
        self.decode_bytes = self.io_bytes - bytes0
        return tokens
