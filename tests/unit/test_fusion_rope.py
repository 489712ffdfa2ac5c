"""Fusion row rope: the rotary embedding (rotate-half, or GPT-J's interleaved pairs) as one
Rope node, exact against ONNX Runtime; near misses stay the ops they are."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphengine import _runtime
from graphengine.engine.importers import load_model
from graphengine.engine.model import DeviceProgram
from graphengine.engine.pipeline import CompileOptions, compile_graph
from graphengine.engine.runtime import LoadedModel

RNG = np.random.default_rng(8)
BIG = np.iinfo(np.int64).max


def _rope_model(d=16, swap=False, halves_swapped=False, cos_input=False):
    """q [2, 3, 5, d] rotated by cos/sin [1, 1, 5, d]; `halves_swapped` negates the lower
    half instead (concat(-q[..., :h], q[..., h:]): not a rotation); `swap` writes the Muls'
    and the Add's operands the other way round; `cos_input` makes cos and sin graph inputs
    (computed at run time)."""
    h = d // 2
    bounds = ((0, h), (h, BIG)) if halves_swapped else ((h, BIG), (0, h))
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (
        ("h", bounds[0][0]), ("end", bounds[0][1]), ("zero", bounds[1][0]),
        ("mid", bounds[1][1]), ("last", -1))]
    ang = np.arange(5)[:, None] * (1.0 / 10000 ** (np.arange(h) / h))[None]
    cos = np.cos(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    sin = np.sin(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 3, 5, d])]
    if cos_input:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, 5, d])
                   for n in ("cos", "sin")]
    else:
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    pair = (lambda a, b: [b, a]) if swap else (lambda a, b: [a, b])
    nodes = [helper.make_node("Slice", ["q", "h", "end", "last"], ["x2"]),
             helper.make_node("Neg", ["x2"], ["nx2"]),
             helper.make_node("Slice", ["q", "zero", "mid", "last"], ["x1"]),
             helper.make_node("Concat", ["nx2", "x1"], ["rot"], axis=-1),
             helper.make_node("Mul", pair("q", "cos"), ["a"]),
             helper.make_node("Mul", pair("rot", "sin"), ["b"]),
             helper.make_node("Add", pair("a", "b"), ["y"])]
    graph = helper.make_graph(nodes, "rope", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    feeds = {"q": RNG.standard_normal((2, 3, 5, d)).astype(np.float32)}
    if cos_input:
        feeds.update(cos=cos, sin=sin)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8), feeds


def _pairs(x, tag, neg_first=True, negate_even=False):
    """GPT-J's rotate_every_two of x as an exporter writes it: flatten(stack([-x[..., 1::2],
    x[..., 0::2]], -1)) — two strided Slices, a Neg (before or after its Unsqueeze), two
    Unsqueezes, a Concat and a Reshape back to x's shape. `negate_even` negates the wrong
    one (not a rotation)."""
    odd, even = f"{tag}_odd", f"{tag}_even"
    neg, keep = (even, odd) if negate_even else (odd, even)
    nodes = [helper.make_node("Slice", [x, "one", "end", "last", "two"], [odd]),
             helper.make_node("Slice", [x, "zero", "end", "last", "two"], [even])]
    if neg_first:
        nodes += [helper.make_node("Neg", [neg], [f"{tag}_n"]),
                  helper.make_node("Unsqueeze", [f"{tag}_n", "last"], [f"{tag}_u0"])]
    else:
        nodes += [helper.make_node("Unsqueeze", [neg, "last"], [f"{tag}_un"]),
                  helper.make_node("Neg", [f"{tag}_un"], [f"{tag}_u0"])]
    nodes += [helper.make_node("Unsqueeze", [keep, "last"], [f"{tag}_u1"]),
              helper.make_node("Concat", [f"{tag}_u0", f"{tag}_u1"], [f"{tag}_st"], axis=-1),
              helper.make_node("Shape", [x], [f"{tag}_shape"]),
              helper.make_node("Reshape", [f"{tag}_st", f"{tag}_shape"], [f"{tag}_rot"])]
    return nodes


def _pair_tables(s, r):
    """GPT-J's cos/sin [1, 1, s, r]: each frequency repeated for its pair."""
    ang = np.arange(s)[:, None] * (1.0 / 10000 ** (np.arange(r // 2) / (r // 2)))[None]
    return (np.repeat(f(ang), 2, axis=-1).astype(np.float32)[None, None] for f in (np.cos,
                                                                                   np.sin))


def _interleaved_model(d=16, swap=False, cos_input=False, neg_first=True,
                       negate_even=False):
    """q [2, 3, 5, d] rotated pairwise by cos/sin [1, 1, 5, d] (GPT-J)."""
    cos, sin = _pair_tables(5, d)
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (
        ("zero", 0), ("one", 1), ("two", 2), ("end", BIG), ("last", -1))]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 3, 5, d])]
    feeds = {"q": RNG.standard_normal((2, 3, 5, d)).astype(np.float32)}
    if cos_input:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, 5, d])
                   for n in ("cos", "sin")]
        feeds.update(cos=cos, sin=sin)
    else:
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    pair = (lambda a, b: [b, a]) if swap else (lambda a, b: [a, b])
    nodes = _pairs("q", "q", neg_first, negate_even) + [
        helper.make_node("Mul", pair("q", "cos"), ["a"]),
        helper.make_node("Mul", pair("q_rot", "sin"), ["b"]),
        helper.make_node("Add", pair("a", "b"), ["y"])]
    graph = helper.make_graph(nodes, "rope_pairs", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8), feeds


def run_against_ort(model, feeds):
    """Output y compiled and run, checked against ONNX Runtime; and the device kernels."""
    compiled = compile_graph(load_model(model), CompileOptions(lint=True))
    got = LoadedModel(compiled).execute(feeds)["y"]
    want = ort.InferenceSession(model.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return got, [t.op for p in compiled.programs if isinstance(p, DeviceProgram)
                 for t in p.tasks if t.kind == "kernel"]


def _kernels(model, feeds):
    return run_against_ort(model, feeds)[1]


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("cos_input", [False, True])
def test_rotate_half_rope_is_one_task(swap, cos_input):
    kinds = _kernels(*_rope_model(swap=swap, cos_input=cos_input))
    assert kinds == ["Rope"], kinds


def test_negating_the_other_half_is_not_a_rope():
    kinds = _kernels(*_rope_model(halves_swapped=True))
    assert "Rope" not in kinds and "Concat" in kinds, kinds


def test_the_rope_kernel_checks_its_operands(isa):
    spec = {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": n, "dtype": "float32", "shape": s, "region": "arena",
                         "offset": 1024 * i}
                        for i, (n, s) in enumerate((("x", [2, 4, 6]), ("cos", [1, 4, 6]),
                                                    ("sin", [1, 4, 6]), ("y", [2, 4, 6])))],
            "tasks": [{"kind": "kernel", "name": "r", "op": "Rope", "stream": 0,
                       "inputs": [0, 1, 2], "outputs": [3], "attrs": {}}],
            "inputs": [0, 1, 2], "outputs": [3]}
    m = _runtime.Model(_runtime.Device(), spec)
    x, c, s = (RNG.standard_normal(sh).astype(np.float32) for sh in ((2, 4, 6), (1, 4, 6),
                                                                       (1, 4, 6)))
    (y,) = m.execute([x, c, s])
    np.testing.assert_allclose(y, x * c + np.concatenate([-x[..., 3:], x[..., :3]], -1) * s,
                               rtol=1e-6, atol=1e-6)
    spec["tensors"][1]["shape"] = spec["tensors"][2]["shape"] = [1, 4, 3]
    with pytest.raises(_runtime.InvalidArgument, match=r"must span the rotated part of X's "
                                                       r"last axis \(6\)"):
        _runtime.Model(_runtime.Device(), spec)


def test_the_rope_kernel_rotates_a_prefix_and_copies_the_rest(isa):
    """rotary_dim r: the first r elements of each row rotate (cos/sin span r), the rest is
    copied; an odd or too large r is refused."""
    shapes = (("x", [2, 4, 10]), ("cos", [1, 4, 4]), ("sin", [1, 4, 4]), ("y", [2, 4, 10]))
    spec = {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": n, "dtype": "float32", "shape": sh, "region": "arena",
                         "offset": 1024 * i} for i, (n, sh) in enumerate(shapes)],
            "tasks": [{"kind": "kernel", "name": "r", "op": "Rope", "stream": 0,
                       "inputs": [0, 1, 2], "outputs": [3], "attrs": {"rotary_dim": 4}}],
            "inputs": [0, 1, 2], "outputs": [3]}
    x, c, s = (RNG.standard_normal(sh).astype(np.float32) for _, sh in shapes[:3])
    (y,) = _runtime.Model(_runtime.Device(), spec).execute([x, c, s])
    part = x[..., :4]
    want = part * c + np.concatenate([-part[..., 2:], part[..., :2]], -1) * s
    np.testing.assert_allclose(y[..., :4], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(y[..., 4:], x[..., 4:])
    spec["tasks"][0]["attrs"]["rotary_dim"] = 12
    with pytest.raises(_runtime.InvalidArgument, match="rotary_dim 12 must be even"):
        _runtime.Model(_runtime.Device(), spec)


def _rotated(x, r, table, tag):
    """Phi's partial rotary of x [B, H, S, D] on its first r channels: x_rot, x_pass =
    x[..., :r], x[..., r:]; concat(rope(x_rot), x_pass); the node names carry `tag`."""
    h = r // 2
    return [
        helper.make_node("Slice", [x, "zero", "r", "last"], [f"{tag}_rot"]),
        helper.make_node("Slice", [x, "r", "end", "last"], [f"{tag}_pass"]),
        helper.make_node("Slice", [f"{tag}_rot", "h", "end", "last"], [f"{tag}_x2"]),
        helper.make_node("Neg", [f"{tag}_x2"], [f"{tag}_nx2"]),
        helper.make_node("Slice", [f"{tag}_rot", "zero", "h", "last"], [f"{tag}_x1"]),
        helper.make_node("Concat", [f"{tag}_nx2", f"{tag}_x1"], [f"{tag}_half"], axis=-1),
        helper.make_node("Mul", [f"{tag}_rot", f"{table}cos"], [f"{tag}_a"]),
        helper.make_node("Mul", [f"{tag}_half", f"{table}sin"], [f"{tag}_b"]),
        helper.make_node("Add", [f"{tag}_a", f"{tag}_b"], [f"{tag}_roped"]),
        helper.make_node("Concat", [f"{tag}_roped", f"{tag}_pass"], [f"{tag}_out"], axis=-1),
    ], h


def _phi_attention_model(b=2, s=5, heads=3, d=8, r=4, cos_input=False):
    """Phi's attention core: q, k, v [B, S, H, D] split into heads by Transposes, a partial
    rotary on q and k, the key and value through one-input Concats (a KV cache exported
    without a past), scaled scores, Softmax, P·V and the head merge."""
    ang = np.arange(s)[:, None] * (1.0 / 10000 ** (np.arange(r // 2) / (r // 2)))[None]
    cos = np.cos(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    sin = np.sin(np.concatenate([ang, ang], -1)).astype(np.float32)[None, None]
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (
        ("zero", 0), ("r", r), ("h", r // 2), ("end", BIG), ("last", -1))]
    inits.append(numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale"))
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, s, heads, d])
              for n in "qkv"]
    feeds = {n: RNG.standard_normal((b, s, heads, d)).astype(np.float32) for n in "qkv"}
    if cos_input:  # positions gathered at run time: the tables are computed [1, 1, S, r]
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, s, r])
                   for n in ("cos", "sin")]
        feeds.update(cos=cos, sin=sin)
    else:
        inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin")]
    nodes = [helper.make_node("Transpose", [n], [f"{n}t"], perm=[0, 2, 1, 3]) for n in "qkv"]
    for n in "qk":
        more, _ = _rotated(f"{n}t", r, "", n)
        nodes += more
    nodes += [helper.make_node("Concat", ["k_out"], ["k_all"], axis=-2),
              helper.make_node("Concat", ["vt"], ["v_all"], axis=-2),
              helper.make_node("Transpose", ["k_all"], ["kT"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["q_out", "kT"], ["scores"]),
              helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v_all"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(nodes, "phi_attention", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8), feeds


@pytest.mark.parametrize("cos_input", [False, True])
def test_partial_rotary_attention_has_no_slice_concat_or_transpose(cos_input):
    """The partial rotary is one Rope per operand (rotary_dim, no Slice or Concat copies),
    the Rope runs before the head-split Transpose, and every Transpose (the head split, the
    key's, the merge) and the one-input Concats become the attention's strided reads."""
    kinds = _kernels(*_phi_attention_model(cos_input=cos_input))
    assert sorted(kinds) == ["FusedAttention", "Rope", "Rope"], kinds


def test_a_transpose_moving_the_last_axis_stays_before_the_rope():
    """Rope's rows are the last axis: a Transpose that moves it cannot follow the Rope."""
    model, feeds = _rope_model(d=16)
    graph = model.graph
    graph.input[0].type.tensor_type.shape.dim[3].dim_value = 5
    graph.input[0].type.tensor_type.shape.dim[2].dim_value = 16
    graph.node.insert(0, helper.make_node("Transpose", ["q_in"], ["q"], perm=[0, 1, 3, 2]))
    graph.input[0].name = "q_in"
    feeds = {"q_in": np.ascontiguousarray(np.swapaxes(feeds["q"], 2, 3))}
    kinds = _kernels(model, feeds)
    assert kinds == ["Transpose", "Rope"], kinds


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("cos_input", [False, True])
@pytest.mark.parametrize("neg_first", [False, True])
def test_interleaved_rope_is_one_task(swap, cos_input, neg_first):
    """GPT-J's rotate_every_two — strided Slices, Neg, Unsqueezes, Concat, Reshape, the Muls
    and the Add — is one Rope (attribute interleaved), exact against ONNX Runtime."""
    kinds = _kernels(*_interleaved_model(swap=swap, cos_input=cos_input,
                                         neg_first=neg_first))
    assert kinds == ["Rope"], kinds


def test_negating_the_even_elements_is_not_an_interleaved_rope():
    kinds = _kernels(*_interleaved_model(negate_even=True))
    assert "Rope" not in kinds and "Concat" in kinds, kinds


def test_the_rope_kernel_turns_neighbouring_pairs_when_interleaved(isa):
    """interleaved: y[2i] = x[2i] c - x[2i+1] s, y[2i+1] = x[2i+1] c + x[2i] s on the first
    rotary_dim elements, the rest copied; a value other than 0 or 1 is refused."""
    shapes = (("x", [2, 4, 10]), ("cos", [1, 4, 6]), ("sin", [1, 4, 6]), ("y", [2, 4, 10]))
    spec = {"name": "m", "arena_bytes": 4096, "num_streams": 1, "num_events": 0,
            "tensors": [{"name": n, "dtype": "float32", "shape": sh, "region": "arena",
                         "offset": 1024 * i} for i, (n, sh) in enumerate(shapes)],
            "tasks": [{"kind": "kernel", "name": "r", "op": "Rope", "stream": 0,
                       "inputs": [0, 1, 2], "outputs": [3],
                       "attrs": {"rotary_dim": 6, "interleaved": 1}}],
            "inputs": [0, 1, 2], "outputs": [3]}
    x, c, s = (RNG.standard_normal(sh).astype(np.float32) for _, sh in shapes[:3])
    model = _runtime.Model(_runtime.Device(), spec)
    (y,) = model.execute([x, c, s])
    assert model.profile()[0]["impl"] == ("rope avx512 (interleaved)" if isa == "avx512"
                                        else "rope loop (interleaved)")
    part = x[..., :6]
    turned = np.stack([-part[..., 1::2], part[..., 0::2]], -1).reshape(part.shape)
    np.testing.assert_allclose(y[..., :6], part * c + turned * s, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(y[..., 6:], x[..., 6:])
    spec["tasks"][0]["attrs"]["interleaved"] = 2
    with pytest.raises(_runtime.InvalidArgument, match="interleaved 2 must be 0 or 1"):
        _runtime.Model(_runtime.Device(), spec)


def _gptj_attention_model(b=2, s=5, heads=3, d=8, r=4):
    """GPT-J's attention core: q, k [B, S, H, D] rotated pairwise on their first r channels
    (concat(rope(x[..., :r]), x[..., r:])) before the head split, then scores, Softmax, P·V."""
    cos, sin = _pair_tables(s, r)
    cos, sin = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (cos, sin))  # [1,S,1,r]
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in (
        ("zero", 0), ("one", 1), ("two", 2), ("r", r), ("end", BIG), ("last", -1))]
    inits += [numpy_helper.from_array(cos, "cos"), numpy_helper.from_array(sin, "sin"),
              numpy_helper.from_array(np.array(d ** -0.5, np.float32), "scale")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [b, s, heads, d])
              for n in "qkv"]
    feeds = {n: RNG.standard_normal((b, s, heads, d)).astype(np.float32) for n in "qkv"}
    nodes = []
    for n in "qk":
        nodes += [helper.make_node("Slice", [n, "zero", "r", "last"], [f"{n}_part"]),
                  helper.make_node("Slice", [n, "r", "end", "last"], [f"{n}_pass"]),
                  *_pairs(f"{n}_part", f"{n}_part"),
                  helper.make_node("Mul", [f"{n}_part", "cos"], [f"{n}_a"]),
                  helper.make_node("Mul", [f"{n}_part_rot", "sin"], [f"{n}_b"]),
                  helper.make_node("Add", [f"{n}_a", f"{n}_b"], [f"{n}_roped"]),
                  helper.make_node("Concat", [f"{n}_roped", f"{n}_pass"], [f"{n}_cat"],
                                   axis=-1),
                  helper.make_node("Transpose", [f"{n}_cat"], [f"{n}t"], perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Transpose", ["v"], ["vt"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["kt"], ["kT"], perm=[0, 1, 3, 2]),
              helper.make_node("MatMul", ["qt", "kT"], ["scores"]),
              helper.make_node("Mul", ["scores", "scale"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "vt"], ["ctx"]),
              helper.make_node("Transpose", ["ctx"], ["y"], perm=[0, 2, 1, 3])]
    graph = helper.make_graph(nodes, "gptj_attention", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8), feeds


def test_partial_interleaved_rotary_attention_is_two_ropes_and_the_attention():
    """GPT-J: the pairwise rotation of the first r channels and the Concat with the rest
    are one Rope per operand (interleaved, rotary_dim r), before the head split."""
    kinds = _kernels(*_gptj_attention_model())
    assert sorted(kinds) == ["FusedAttention", "Rope", "Rope"], kinds
