"""Custom operators: a numpy kernel registered with graphengine.register_op, used from the
builder and from an ONNX file; then, where a C compiler is present, a native kernel for the
same op, which moves it from the host engine onto the device.

    python examples/custom_op.py

A server loads the same registrations from a file: `graphengine serve --plugin my_ops.py`
(a module calling register_op) or `--plugin my_ops.so` (native kernels).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
from onnx import TensorProto, helper

import graphengine
from graphengine import ops

# The op "ClipScale" of domain "my.ops" (registry key "my.ops.ClipScale"): a host kernel in
# numpy. Shapes and dtypes default to input 0's; `infer=` says otherwise.
key = graphengine.register_op(
    "ClipScale", lambda x, *, scale=2.0: np.clip(x, -1, 1) * np.float32(scale),
    domain="my.ops", inputs=["x"], attrs={"scale": 2.0})
print("registered", key)

x_value = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
want = np.clip(x_value, -1, 1) * 3.0

# 1. In the builder: graphengine.ops has a function for it now.
g = graphengine.Graph("clip")
x = g.input("x", "float32", (2, 4))
g.output(ops.ClipScale(x, scale=3.0), name="y")

# 2. In an ONNX file: a node of the op's domain (and an opset import for it).
node = helper.make_node("ClipScale", ["x"], ["y"], domain="my.ops", scale=3.0)
model = helper.make_model(
    helper.make_graph([node], "clip_onnx",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]),
    opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])


def run_both(label: str) -> None:
    with graphengine.Session() as sess:
        for source in (g, model):
            gid = sess.add_graph(source)
            report = sess.compile_graph(gid)
            y = sess.run_graph(gid, {"x": x_value})["y"]
            assert np.allclose(y, want), y
            place = next(p for p in report.placements if p.op_type == "my.ops.ClipScale")
            print(f"{label}: {sess.graph_info(gid).name} ran ClipScale on the {place.engine}"
                  f" engine" + (f" ({place.rejections[0]})" if place.rejections else ""))


run_both("numpy kernel")

# 3. A native kernel for the same key (graphengine/plugin.h): the device engine runs it.
NATIVE = r"""
#include <graphengine/plugin.h>

static int clip_scale(const ge_kernel_call* call) {
  double scale = 2.0;
  call->attr_float(call->attrs, "scale", &scale);
  const float* x = (const float*)call->inputs[0].data;
  float* y = (float*)call->outputs[0].data;
  for (int64_t i = 0; i < call->inputs[0].numel; ++i)
    y[i] = (x[i] < -1.f ? -1.f : x[i] > 1.f ? 1.f : x[i]) * (float)scale;
  return 0;
}

GE_PLUGIN_EXPORT int ge_plugin_init(ge_registrar* registrar) {
  ge_kernel_def def = {GE_PLUGIN_ABI_VERSION, "my.ops.ClipScale", 1, 1, 1,
                       GE_DTYPE_BIT(GE_FLOAT32), clip_scale, 0};
  return registrar->register_kernel(registrar, &def);
}
"""
cc = shutil.which("cc")
if cc is None:
    print("no C compiler (cc) on PATH: the native kernel was not built")
else:
    with tempfile.TemporaryDirectory() as tmp:
        source, library = pathlib.Path(tmp, "clip.c"), pathlib.Path(tmp, "clip.so")
        source.write_text(NATIVE)
        subprocess.run([cc, "-shared", "-fPIC", "-O2", f"-I{graphengine.get_include()}",
                        str(source), "-o", str(library)], check=True)
        print("loaded", graphengine.load_plugin(library))
        run_both("native kernel")
print("custom op done")
