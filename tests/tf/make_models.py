"""Freezes Keras models to TensorFlow GraphDefs (.pb) with TensorFlow's outputs beside them.

Run by `make test-tf` with the TensorFlow venv (tensorflow-cpu is not a dependency of the
project): `python tests/tf/make_models.py OUT_DIR [--only a,b]`. Per model it writes
NAME.pb (the frozen graph of `model(x, training=False)`, weights random: no download) and
NAME.npz (inputs `in:<placeholder>` and TensorFlow's outputs `out:<node>`). A model whose
file exists is not rebuilt. test_tf_models.py compares GraphEngine's outputs with them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (
    convert_variables_to_constants_v2,
)

L = keras.layers


def _applications(name: str, size: int) -> keras.Model:
    return getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))


def _small_cnn() -> keras.Model:
    """Ops the applications do not use: explicit transposes, strided slices, flatten, a
    transposed convolution, concatenation on channels, average pooling, sigmoid/tanh."""
    x = keras.Input((32, 32, 3), name="image")
    y = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    y = L.Conv2DTranspose(6, 3, strides=2, padding="same")(y)
    z = L.DepthwiseConv2D(3, padding="valid", depth_multiplier=2)(x)
    z = L.ZeroPadding2D(1)(z)
    y = L.Concatenate()([y, z])
    y = L.AveragePooling2D(2, padding="same")(y)
    y = L.Cropping2D(((1, 0), (0, 1)))(y)
    y = L.Activation("tanh")(y)
    y = L.Permute((3, 1, 2))(y)
    y = L.Flatten()(y)
    y = L.Dense(16, activation="sigmoid")(y)
    return keras.Model(x, [L.Dense(4, activation="softmax")(y), y])


def _mlp_seq() -> keras.Model:
    """A sequence model: Dense over the last axis (BatchMatMul), LayerNorm, mean over time."""
    x = keras.Input((12, 20), name="tokens")
    y = L.Dense(32, activation="gelu")(x)
    y = L.LayerNormalization()(y)
    y = L.Conv1D(16, 3, padding="same")(y)
    y = L.GlobalAveragePooling1D()(y)
    return keras.Model(x, L.Dense(5)(y))


MODELS = {
    "mobilenet_v2": lambda: _applications("MobileNetV2", 224),
    "resnet50": lambda: _applications("ResNet50", 224),
    "efficientnet_b0": lambda: _applications("EfficientNetB0", 224),
    "densenet121": lambda: _applications("DenseNet121", 224),
    "inception_v3": lambda: _applications("InceptionV3", 299),
    "mobilenet_v3_small": lambda: keras.applications.MobileNetV3Small(
        weights=None, input_shape=(224, 224, 3), include_preprocessing=False),
    "small_cnn": _small_cnn,
    "mlp_seq": _mlp_seq,
}


def freeze(model: keras.Model, batch: int, seed: int) -> tuple[bytes, dict[str, np.ndarray]]:
    specs = [tf.TensorSpec([None, *i.shape[1:]], i.dtype, name=f"input_{k}")
             for k, i in enumerate(model.inputs)]
    fn = tf.function(lambda *xs: model(list(xs) if len(xs) > 1 else xs[0], training=False))
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(*specs))
    gd = frozen.graph.as_graph_def()
    rng = np.random.default_rng(seed)
    feeds = [rng.standard_normal((batch, *s.shape[1:])).astype(np.float32) for s in specs]
    outs = frozen(*[tf.constant(f) for f in feeds])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    names = [t.name.split(":")[0] for t in frozen.outputs]
    arrays = {f"in:input_{k}": f for k, f in enumerate(feeds)}
    arrays.update({f"out:{n}": np.asarray(o) for n, o in zip(names, outs)})
    return gd.SerializeToString(), arrays


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--only", default="")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--stubs", help="GraphEngine's generated proto stubs (build/.../proto_py): "
                                   "each graph is also read with our graph_def.proto, in the "
                                   "process that has tensorflow's own messages loaded")
    args = p.parse_args()
    ours = None
    if args.stubs:
        sys.path.insert(0, args.stubs)
        from graphengine.tensorflow import graph_def_pb2 as ours
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    keras.utils.set_random_seed(0)
    for k, name in enumerate(names):
        pb = os.path.join(args.out, f"{name}.pb")
        if os.path.exists(pb):
            continue
        start = time.time()
        data, arrays = freeze(MODELS[name](), args.batch, seed=k)
        np.savez(os.path.join(args.out, f"{name}.npz"), **arrays)
        with open(pb + ".tmp", "wb") as f:
            f.write(data)
        os.replace(pb + ".tmp", pb)
        print(f"{name}: {len(data)} bytes, {time.time() - start:.1f} s", flush=True)
    for name in names if ours is not None else ():
        with open(os.path.join(args.out, f"{name}.pb"), "rb") as f:
            data = f.read()
        mine, theirs = ours.GraphDef(), tf.compat.v1.GraphDef()
        mine.ParseFromString(data)
        theirs.ParseFromString(data)
        assert [(n.name, n.op, list(n.input)) for n in mine.node] == \
            [(n.name, n.op, list(n.input)) for n in theirs.node], name
        print(f"{name}: our graph_def.proto reads the {len(mine.node)} nodes tensorflow does")
    return 0


if __name__ == "__main__":
    sys.exit(main())
