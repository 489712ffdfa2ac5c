"""Run one ONNX node test case through the engine's real pipeline and check its outputs.

import_onnx -> compile_graph(input_shapes=...) -> runtime.load(...).execute(feeds), once
per data set (compiled once per distinct input signature), outputs compared the way the
ONNX backend test runner compares them: same count, shape and dtype, then allclose with the
case's tolerances (strings exactly). The result says which engines ran the case's nodes.
"""

from __future__ import annotations

import dataclasses
import enum
import signal
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from graphengine.engine import runtime
from graphengine.engine.importers import import_onnx
from graphengine.engine.pipeline import compile_graph

from .cases import Case, load_case

RTOL, ATOL = 1e-3, 1e-7  # the backend runner's defaults; every node case uses them
CASE_TIMEOUT_S = 60


class Ran(enum.Enum):
    """Where a passing case's nodes ran, from most to least native."""

    DEVICE = "device"  # every node on the device engine (native kernels)
    HOST = "host"  # some nodes on the host engine (numpy reference kernels)
    REFERENCE = "reference"  # some nodes on the last-resort engine (onnx.reference)
    FOLDED = "folded"  # nothing left to run: the compiler folded or removed every node


@dataclasses.dataclass
class Result:
    name: str
    passed: bool
    seconds: float
    error: str = ""
    ran: Ran | None = None
    placements: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (op, engine)


class CaseTimeout(Exception):
    pass


@contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    def expire(signum, frame):
        raise CaseTimeout(f"case took longer than {seconds} s")

    try:
        old = signal.signal(signal.SIGALRM, expire)
    except ValueError:  # not the main thread: run without a limit
        yield
        return
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_named(root: Path, name: str) -> Result:
    start = time.perf_counter()
    try:
        # Cases feed inf/nan and overflow on purpose; numpy's warnings about it are noise.
        with _time_limit(CASE_TIMEOUT_S), np.errstate(all="ignore"), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            case = load_case(root, name)
            placements = run_case(case)
    except Exception as exc:  # a failing case is data: record why
        return Result(name, False, time.perf_counter() - start, describe(exc))
    return Result(name, True, time.perf_counter() - start, ran=classify(placements),
                  placements=placements)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    head = text[0] if text else ""
    if isinstance(exc, AssertionError) and len(text) > 1:
        head = " ".join(line.strip() for line in text[:4] if line.strip())
    return f"{type(exc).__name__}: {head}"[:400]


def classify(placements: list[tuple[str, str]]) -> Ran:
    engines = {engine for _, engine in placements}
    for ran in (Ran.REFERENCE, Ran.HOST, Ran.DEVICE):
        if ran.value in engines:
            return ran
    return Ran.FOLDED


def run_case(case: Case) -> list[tuple[str, str]]:
    """Run every data set; raise on the first mismatch. Returns (op_type, engine) per node."""
    graph = import_onnx(case.model, case.name)
    graph_inputs = [v.name for v in graph.inputs]
    declared = [vi.name for vi in case.model.graph.input]
    loaded: dict[tuple, Any] = {}
    placements: list[tuple[str, str]] = []
    for k, ds in enumerate(case.data_sets):
        feeds = {}
        for name, value in zip(declared, ds.inputs):
            if name in graph_inputs:
                feeds[name] = value
        signature = tuple((n, _shape(v)) for n, v in sorted(feeds.items()))
        if signature not in loaded:
            shapes = {n: s for n, s in signature if s is not None}
            compiled = compile_graph(graph, input_shapes=shapes)
            loaded[signature] = runtime.load(compiled)
            placements = [(p.op_type, p.engine) for p in compiled.report.placements]
        got = loaded[signature].execute(feeds)
        outputs = [got[vi.name] for vi in case.model.graph.output]
        compare(ds.outputs, outputs, f"data set {k}")
    return placements


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, np.ndarray) else None


def compare(expected: list[Any], actual: list[Any], where: str) -> None:
    assert len(actual) == len(expected), f"{where}: {len(actual)} outputs, expected {len(expected)}"
    for i, (exp, got) in enumerate(zip(expected, actual)):
        _compare_one(exp, got, f"{where}, output {i}")


def _compare_one(exp: Any, got: Any, where: str) -> None:
    if exp is None or isinstance(exp, list):
        assert type(got) is type(exp), f"{where}: got {type(got).__name__}, " \
                                       f"expected {type(exp).__name__}"
        if isinstance(exp, list):
            assert len(got) == len(exp), f"{where}: sequence of {len(got)}, expected {len(exp)}"
            for j, (e, g) in enumerate(zip(exp, got)):
                _compare_one(e, g, f"{where}[{j}]")
        return
    got = np.asarray(got)
    assert got.shape == exp.shape, f"{where}: shape {got.shape}, expected {exp.shape}"
    if exp.dtype == object:
        assert got.dtype == object, f"{where}: dtype {got.dtype}, expected strings"
        np.testing.assert_array_equal(got, exp, err_msg=where)
        return
    assert got.dtype == exp.dtype, f"{where}: dtype {got.dtype}, expected {exp.dtype}"
    rtol = RTOL
    if exp.dtype.kind not in "biufc?":  # ml_dtypes (bfloat16, float8...) compare as float32
        rtol = max(rtol, 2 ** -6) if exp.dtype.name == "bfloat16" else rtol
        exp, got = exp.astype(np.float32), got.astype(np.float32)
    np.testing.assert_allclose(got, exp, rtol=rtol, atol=ATOL, err_msg=where)
