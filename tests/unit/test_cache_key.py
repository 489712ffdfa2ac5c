"""The compile cache's key: each thing a compiled model depends on changes it, and nothing
else does (server/core/cache_key.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest

import graphengine
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions
from graphengine.engine.target import get as get_target
from graphengine.server.core import cache_key
from tests import zoo

SHAPES = {"input": (2, 8)}


def _model(seed: int = 0) -> onnx.ModelProto:
    return zoo.mlp(sizes=(8, 16, 4), symbolic_batch=True, seed=seed)


def _key(graph=None, shapes=None, options=None, target=None) -> str:
    graph = graph if graph is not None else load_model(_model())
    parts = cache_key.key_parts(cache_key.graph_digest(graph), shapes or SHAPES,
                                options or CompileOptions(), target or get_target("host"))
    return cache_key.make_key(parts)


def test_the_same_graph_read_twice_or_from_a_file_has_one_key(tmp_path) -> None:
    model = _model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    keys = {_key(load_model(model.SerializeToString())), _key(load_model(str(path))),
            _key(load_model(model))}
    assert len(keys) == 1
    assert len(next(iter(keys))) == 64  # a SHA-256 in hex: the entry's file name


def test_a_weight_a_name_an_attribute_or_an_input_type_changes_the_graph_part() -> None:
    base = _key()
    assert _key(load_model(_model(seed=1))) != base  # other weights, same structure
    renamed = _model()
    renamed.graph.name = "other"
    assert _key(load_model(renamed)) != base
    attr = _model()
    gemm = next(n for n in attr.graph.node if n.op_type == "Gemm")
    gemm.attribute.append(onnx.helper.make_attribute("alpha", 0.5))
    assert _key(load_model(attr)) != base
    typed = _model()
    typed.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 9
    assert _key(load_model(typed)) != base


def test_the_signature_and_every_compile_option_but_lint_change_it() -> None:
    base = _key()
    assert _key(shapes={"input": (3, 8)}) != base
    changed = {_key(options=CompileOptions(**{f: v})) for f, v in (
        ("max_streams", 2), ("fuse", False), ("fold_constants", False), ("layouts", False),
        ("layout_format", "nhwc"), ("batch_split", False), ("data_parallel", 2),
        ("widen_float16", False), ("weight_only_products", "float32"))}
    assert len(changed) == 9 and base not in changed
    assert _key(options=CompileOptions(lint=True)) == base  # lint only checks


def test_what_the_target_reports_changes_it() -> None:
    host = get_target("host")
    base = _key()
    for change in ({"isa": "avx2"}, {"blocked_format": "nChw8c"}, {"conv_blocks": False},
                   {"epilogues": False}, {"max_weight_segments": 1}, {"threads": 64},
                   {"ops": host.ops - {"Conv"}}, {"name": "narrow"}):
        assert _key(target=dataclasses.replace(host, **change)) != base, change


def test_the_build_and_the_cpu_change_it(monkeypatch) -> None:
    base = _key()
    build = cache_key.build_id()
    assert set(build) >= {"version", "runtime", "compiler", "numpy", "offline_format"}
    for field in ("version", "runtime", "compiler"):
        monkeypatch.setattr(cache_key, "build_id",
                            lambda field=field: {**build, field: build[field] + "x"})
        assert _key() != base, field
    monkeypatch.undo()
    assert _key() == base
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # oneDNN's kernels narrowed
    assert _key() != base
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    flags = cache_key._cpuinfo_flags()
    monkeypatch.setattr(cache_key, "_cpuinfo_flags",
                        lambda: tuple(f for f in flags if f != "avx2") or ("avx512f",))
    assert _key() != base  # another CPU (a replica on other hardware)


def test_the_compiler_sources_are_hashed_by_content(tmp_path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("y = 2\n")
    before = cache_key._sources_digest(str(tmp_path))
    assert cache_key._sources_digest(str(tmp_path)) == before
    (tmp_path / "sub" / "b.py").write_text("y = 3\n")  # an edit without a version bump
    assert cache_key._sources_digest(str(tmp_path)) != before


def test_string_constants_are_hashed_by_value() -> None:
    def digest(*labels: str) -> str:
        graph = load_model(_model())
        # held as objects (ONNX string tensors are): their values count, not their addresses
        graph.add_constant("labels", np.array([str(x) for x in labels], dtype=object))
        return cache_key.graph_digest(graph)

    assert digest("cat", "dog") == digest("cat", "dog")
    assert digest("cat", "dog") != digest("cat", "cow")


def test_a_graph_using_a_custom_op_is_not_keyed() -> None:
    graphengine.register_op("Triple", lambda x: x * 3, domain="test.cachekey", inputs=1)
    g = graphengine.Graph("custom")
    x = g.input("x", "float32", (3,))
    g.output(graphengine.ops.Triple(x), name="y")
    reason = cache_key.uncacheable_reason(g.to_ir())
    assert reason is not None and "test.cachekey.Triple" in reason
    assert cache_key.uncacheable_reason(load_model(_model())) is None


def test_an_attribute_of_an_unknown_kind_is_refused_not_guessed() -> None:
    graph = load_model(_model())
    graph.nodes[0].attrs["opaque"] = object()
    with pytest.raises(cache_key.Uncacheable, match="object"):
        cache_key.graph_digest(graph)
