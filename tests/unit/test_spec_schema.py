"""The device-program schema is written once: engine/model.py's ModelSpec, TensorSlot and
Task, from which runtime_ext/tools/gen_spec.py generates the native structs and readers."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib

import pytest

from graphengine import _runtime
from graphengine.engine.model import ModelSpec, Task, TensorSlot

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_spec",
                                                  ROOT / "runtime_ext/tools/gen_spec.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_native_side_is_up_to_date():
    gen = _generator()
    assert gen.main(["--check"]) == 0, "run python runtime_ext/tools/gen_spec.py"
    header = (ROOT / "runtime_ext/src/spec_gen.h").read_text()
    for cls in (ModelSpec, TensorSlot, Task):
        for field in dataclasses.fields(cls):
            assert f" {field.name}" in header, (cls.__name__, field.name)


def _spec(**task) -> dict:
    slot = {"name": "x", "dtype": "float32", "shape": [2], "region": "arena", "offset": 0}
    out = dict(slot, name="y", offset=64)
    return {"name": "m", "arena_bytes": 128, "tensors": [slot, out], "num_streams": 1,
            "num_events": 0, "tasks": [task], "inputs": [0], "outputs": [1]}


def test_the_readers_follow_the_dataclasses_rules():
    """Required fields (no default) and `required_when` are enforced by the generated
    readers, naming the element and the field; defaults fill what is absent or None."""
    device = _runtime.Device(1)
    kernel = {"kind": "kernel", "name": "relu", "op": "Relu", "inputs": [0], "outputs": [1]}
    _runtime.Model(device, _spec(**kernel), 1)
    _runtime.Model(device, _spec(**kernel, stream=None, attrs=None), 1)
    with pytest.raises(_runtime.InvalidArgument, match=r"tasks\[0\].*op"):
        _runtime.Model(device, _spec(**{k: v for k, v in kernel.items() if k != "op"}), 1)
    with pytest.raises(_runtime.InvalidArgument, match=r"tasks\[0\].*name"):
        _runtime.Model(device, _spec(**{k: v for k, v in kernel.items() if k != "name"}), 1)
    bad = _spec(**kernel)
    del bad["tensors"][1]["offset"]
    with pytest.raises(_runtime.InvalidArgument, match=r"tensors\[1\].*offset"):
        _runtime.Model(device, bad, 1)


def test_the_model_level_fields_are_read_by_the_generated_reader():
    """ModelSpec's own fields: required ones named when absent, optional ones defaulted,
    each read as its type; the spec a DeviceProgram makes is a ModelSpec field for field."""
    device = _runtime.Device(1)
    kernel = {"kind": "kernel", "name": "relu", "op": "Relu", "inputs": [0], "outputs": [1]}
    good = _spec(**kernel)
    for required in ("arena_bytes", "tensors", "tasks", "inputs", "outputs"):
        bad = {k: v for k, v in good.items() if k != required}
        with pytest.raises(_runtime.InvalidArgument, match=required):
            _runtime.Model(device, bad, 1)
    optional = {k: v for k, v in good.items() if k not in ("name", "num_streams", "num_events")}
    assert _runtime.Model(device, optional, 1).name == ""
    with pytest.raises(_runtime.InvalidArgument, match="channels_last"):
        _runtime.Model(device, dict(good, channels_last="yes"), 1)
    assert _runtime.Model(device, dict(good, channels_last=False, threads_per_stream=None), 1)
    spec = ModelSpec(arena_bytes=128, tensors=[], tasks=[], inputs=[], outputs=[]).to_dict()
    assert list(spec) == [f.name for f in dataclasses.fields(ModelSpec)]


def test_the_spec_hands_the_tasks_over_without_copying_them():
    """ModelSpec.to_dict is on every load's path: a task's attrs (and a slot's shape) go to
    the native reader as they are, field for field, not deep-copied (dataclasses.asdict
    copied every attribute of every task, a tenth of a small model's load)."""
    attrs = {"alpha": 0.5, "pads": [1, 1, 1, 1]}
    task = Task(kind="kernel", name="n", op="Relu", inputs=[0], outputs=[1], attrs=attrs)
    slot = TensorSlot("x", "float32", [2, 3], "arena", 0)
    spec = ModelSpec(arena_bytes=128, tensors=[slot], tasks=[task], inputs=[0],
                     outputs=[0]).to_dict()
    assert spec["tasks"][0] == dataclasses.asdict(task)
    assert spec["tasks"][0]["attrs"] is attrs
    assert spec["tensors"][0] == {"name": "x", "dtype": "float32", "shape": [2, 3],
                                  "region": "arena", "offset": 0}
    assert spec["tensors"][0]["shape"] is slot.shape
