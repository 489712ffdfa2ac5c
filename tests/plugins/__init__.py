"""Custom operator plugins the tests load, and the compiler step for the native ones."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

import graphengine

HERE = pathlib.Path(__file__).resolve().parent
PY_PLUGIN = HERE / "clip_scale.py"


def build_plugin(source: str, out: pathlib.Path, *defines: str) -> pathlib.Path:
    """Compile tests/plugins/<source> into a shared library with the C compiler on PATH,
    against the header graphengine.get_include() ships."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH: the native plugin tests cannot build one")
    cmd = [cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", graphengine.get_include(),
           *(f"-D{d}" for d in defines), str(HERE / source), "-o", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out
