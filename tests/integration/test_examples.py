"""Every script in examples/ runs as a user would run it (`python examples/NAME.py`, a
process of its own, servers started by the script itself) and prints what it promises.

A new example must be added to EXAMPLES (test_every_example_is_run checks), so CI runs it.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES_DIR = ROOT / "examples"
TIMEOUT = 180  # a hang guard, not a measurement: each takes a few seconds here

# script (under examples/), its arguments, lines its output must contain
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "make_examples.py": (("{tmp}",), ("mlp.onnx and",)),
    "quickstart_session.py": ((), ("inputs: [('input', ('batch', 64))]", "output (4, 10) float32",
                                   "matches numpy", "refused: input 'input'")),
    "builder_mlp.py": ((), ("probs: float32 ('batch', 10)", "refused: ops.Softmax()",
                            "gears: (1, 4, 16) loaded models: 3",
                            "saved and reloaded: same probabilities")),
    "remote_session.py": ((), ("server health: SERVING", "run_graph_stream: ['r0', 'r1', 'r2']",
                               "tensor: input", "after close: NOT_FOUND",
                               "remote session done")),
    "kserve_clients.py": ((), ("gRPC and HTTP agree: (3, 10)",
                               "samples inferred (2 requests of 3): 6")),
    "offline_model.py": ((), ("2 compiled signatures", "gears: batch = 1, 4",
                              "in process: (3, 10)", "served over HTTP: output [3, 10] FP32")),
    "custom_op.py": ((), ("numpy kernel: clip ran ClipScale on the host engine",
                          "numpy kernel: clip_onnx ran ClipScale on the host engine",
                          "custom op done")),
    "sink_mode.py": ((), ("after 3 iterations: [12. 15. 18. 21.]",
                          "variable total: [64. 67. 70. 73.]", "restored ['total']")),
    "decoder/generate.py": (("--tokens", "12"), ("the numpy reference agrees",)),
}
HELPERS = {"local_server.py", "decoder/__init__.py", "decoder/llama.py", "decoder/onnx_past.py"}


def test_every_example_is_run() -> None:
    scripts = {str(p.relative_to(EXAMPLES_DIR)) for p in EXAMPLES_DIR.rglob("*.py")
               if "models" not in p.parts}
    assert scripts - HELPERS == set(EXAMPLES)


@pytest.mark.parametrize("script", sorted(EXAMPLES))
def test_example_runs(script: str, tmp_path: pathlib.Path) -> None:
    args, expected = EXAMPLES[script]
    done = subprocess.run(
        [sys.executable, str(EXAMPLES_DIR / script), *(a.format(tmp=tmp_path) for a in args)],
        cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, f"{script} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    for line in expected:
        assert line in done.stdout, f"{script} did not print {line!r}:\n{done.stdout}"
    if script == "custom_op.py":
        native = "native kernel: clip ran ClipScale on the device engine"
        if shutil.which("cc"):
            assert native in done.stdout, done.stdout
        else:
            assert "no C compiler (cc) on PATH" in done.stdout, done.stdout
