"""The compile cache in process (server/core/compile_cache.py): real sessions, real compiles,
real files; a later session loads what an earlier one compiled, a damaged entry is rebuilt,
the folder stays within its bound."""

from __future__ import annotations

import logging
import os
import threading

import numpy as np
import pytest

import graphengine
from graphengine.engine import offline
from graphengine.engine.errors import InvalidInput
from graphengine.engine.importers import load_model
from graphengine.engine.pipeline import CompileOptions
from graphengine.server.core.compile_cache import CompileCache
from tests import zoo

X = np.linspace(-1, 1, 3 * 8, dtype=np.float32).reshape(3, 8)


def _mlp(seed: int = 0, sizes=(8, 16, 4)) -> bytes:
    return zoo.mlp(sizes=sizes, symbolic_batch=True, seed=seed).SerializeToString()


def _session(cache, compiles: list | None = None, **options) -> graphengine.Session:
    hook = None if compiles is None else (lambda report, load: compiles.append(report))
    return graphengine.Session(options or None, compile_cache=cache, on_compile=hook)


def _run(cache, model: bytes, compiles: list | None = None, x=X, **options) -> np.ndarray:
    with _session(cache, compiles, **options) as sess:
        gid = sess.add_graph(model)
        return sess.run_graph(gid, {"input": x})["output"]


def _entries(folder) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.geom"))


def test_a_later_session_loads_the_model_without_compiling(tmp_path, caplog) -> None:
    compiles: list = []
    first = _run(str(tmp_path), _mlp(), compiles)
    assert len(compiles) == 1 and len(_entries(tmp_path)) == 1
    stored = offline.read_all(_entries(tmp_path)[0])  # an entry is an offline model file
    assert [tuple(s.shape) for s in stored.models[0].inputs] == [(3, 8)]

    cache = CompileCache(tmp_path)
    with caplog.at_level(logging.INFO, logger="graphengine.server.compile_cache"):
        again = _run(cache, _mlp(), compiles)
    assert len(compiles) == 1  # the hook (the server's compile metrics) heard nothing
    assert cache.snapshot().hits == 1 and cache.snapshot().misses == 0
    np.testing.assert_array_equal(again, first)  # the very same bits
    hit = [r.getMessage() for r in caplog.records if "compile_cache_hit" in r.getMessage()]
    assert hit and "graph=mlp" in hit[0] and os.path.basename(
        _entries(tmp_path)[0])[:-5] in hit[0]


def test_every_gear_is_an_entry(tmp_path) -> None:
    compiles: list = []
    for _ in range(2):
        with _session(str(tmp_path), compiles) as sess:
            gid = sess.add_graph(_mlp(), gears=[1, 4])
            sess.compile_graph(gid)
            out = sess.run_graph(gid, {"input": X})["output"]
            assert out.shape == (3, 4)
    assert len(compiles) == 2 and len(_entries(tmp_path)) == 2


def test_another_option_or_shape_misses(tmp_path) -> None:
    cache = CompileCache(tmp_path)
    _run(cache, _mlp())
    _run(cache, _mlp(), fuse="false")
    _run(cache, _mlp(), x=X[:2])
    _run(cache, _mlp(seed=1))
    stats = cache.snapshot()
    assert (stats.misses, stats.hits) == (4, 0) and len(_entries(tmp_path)) == 4
    _run(cache, _mlp(), fuse="false")
    assert cache.snapshot().hits == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty"])
def test_a_damaged_entry_is_deleted_and_rebuilt(tmp_path, caplog, damage) -> None:
    compiles: list = []
    first = _run(str(tmp_path), _mlp(), compiles)
    (path,) = _entries(tmp_path)
    data = bytearray(open(path, "rb").read())
    if damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "truncate":
        data = data[:len(data) - 100]
    else:
        data = bytearray()
    with open(path, "wb") as f:
        f.write(data)
    cache = CompileCache(tmp_path)
    with caplog.at_level(logging.WARNING, logger="graphengine.server.compile_cache"):
        again = _run(cache, _mlp(), compiles)
    assert len(compiles) == 2  # compiled again, never loaded from the bad file
    stats = cache.snapshot()
    assert (stats.rejected, stats.misses, stats.hits) == (1, 1, 0)
    np.testing.assert_array_equal(again, first)
    rejected = [r.getMessage() for r in caplog.records]
    assert any("compile_cache_rejected" in m and "graph=mlp" in m for m in rejected)
    offline.read_all(path)  # rewritten whole
    _run(cache, _mlp(), compiles)
    assert cache.snapshot().hits == 1 and len(compiles) == 2


def test_a_sound_file_of_another_model_under_the_key_is_refused(tmp_path) -> None:
    cache = CompileCache(tmp_path)
    _run(cache, _mlp())
    _run(cache, _mlp(), x=X[:2])
    a, b = _entries(tmp_path)
    os.replace(a, a + ".keep")
    os.replace(b, a)  # a valid offline file, of another signature, under a's key
    os.replace(a + ".keep", b)
    _run(cache, _mlp())
    assert cache.snapshot().rejected == 1


def test_the_folder_stays_within_its_bound_least_recently_used_first(tmp_path) -> None:
    cache = CompileCache(tmp_path, max_bytes=1 << 20)
    sizes = (256, 384, 4)  # ~0.4 MB of weights: two entries fit in 1 MiB, three do not
    a, b, c = (_mlp(seed=s, sizes=sizes) for s in (1, 2, 3))
    x = np.ones((1, 256), np.float32)
    _run(cache, a, x=x)
    _run(cache, b, x=x)
    _run(cache, a, x=x)  # a hit: `a` is now the most recently used
    assert cache.snapshot().hits == 1
    files = _entries(tmp_path)
    assert len(files) == 2
    _run(cache, c, x=x)
    stats = cache.snapshot()
    assert stats.evictions == 1 and stats.bytes <= 1 << 20
    assert sum(os.path.getsize(p) for p in _entries(tmp_path)) <= 1 << 20
    _run(cache, a, x=x)  # kept
    _run(cache, b, x=x)  # evicted: compiled again
    stats = cache.snapshot()
    assert stats.hits == 2 and stats.misses == 4


def test_a_session_waits_for_the_same_compile_instead_of_repeating_it(tmp_path) -> None:
    """Two compiles of one key at once: the second waits on the key's lock file (flock,
    which also separates processes), then loads the first one's entry."""
    cache = CompileCache(tmp_path)
    graphs = [load_model(_mlp()) for _ in range(2)]  # two sessions' copies of one graph
    options = CompileOptions()
    shapes = {"input": (3, 8)}
    first_compiles, second_waits = threading.Event(), threading.Event()
    results: dict[int, bool] = {}

    def first_compile():
        from graphengine.engine.pipeline import compile_graph

        first_compiles.set()  # holding the key's lock
        assert second_waits.wait(60), "the second compile never waited"
        return compile_graph(graphs[0], options, shapes)

    def go(i: int, compile, check) -> None:
        _, results[i] = cache.fetch_or_compile(graphs[i], shapes, options, compile, check)

    first = threading.Thread(target=go, args=(0, first_compile, None))
    first.start()
    assert first_compiles.wait(60)

    def never():
        raise AssertionError("the second session compiled")

    go(1, never, second_waits.set)
    first.join()
    assert results == {0: False, 1: True}
    assert cache.snapshot().misses == 1 and cache.snapshot().hits == 1
    assert not list(tmp_path.glob("*.lock"))  # removed once the entry was stored


def test_a_graph_with_a_custom_op_compiles_without_the_cache(tmp_path) -> None:
    graphengine.register_op("Halve", lambda x: x / 2, domain="test.cache", inputs=1)
    g = graphengine.Graph("halve")
    x = g.input("input", "float32", (2,))
    g.output(graphengine.ops.Halve(x) + x, name="output")
    cache = CompileCache(tmp_path)
    with _session(cache) as sess:
        out = sess.run_graph(sess.add_graph(g), {"input": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["output"], [1.5, 1.5])
    assert cache.snapshot().bypassed == 1 and not _entries(tmp_path)


def test_bounds_and_a_bad_folder_are_named(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="compile_cache_max_bytes.*between"):
        CompileCache(tmp_path, max_bytes=1000)
    (tmp_path / "file").write_text("")
    with pytest.raises(InvalidInput, match="cannot be created|not a folder"):
        CompileCache(tmp_path / "file" / "sub")


def test_the_config_keys_are_bounded() -> None:
    from graphengine.server.config import ConfigError, load_config

    config = load_config(compile_cache_dir="/tmp/x", compile_cache_max_bytes=1 << 30)
    assert (config.compile_cache_dir, config.compile_cache_max_bytes) == ("/tmp/x", 1 << 30)
    assert load_config().compile_cache_dir == ""  # no cache unless asked
    for bad in (1000, 1 << 51):
        with pytest.raises(ConfigError, match="compile_cache_max_bytes"):
            load_config(compile_cache_max_bytes=bad)
    with pytest.raises(ConfigError, match="compile_cache_dir: expected str"):
        load_config(compile_cache_dir=5)
