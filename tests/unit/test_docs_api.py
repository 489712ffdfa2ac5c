"""The API reference (docs/gen_api.py -> docs/api/*.md): the generator runs, the committed
pages are what the code gives today, every public name has a docstring, and the settings
tables agree with the dataclasses' defaults."""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen_api():
    spec = importlib.util.spec_from_file_location("gen_api", ROOT / "docs" / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, str]:
    """The pages written by the generator in a process of its own (custom ops registered by
    other tests in this one would be listed among the ops)."""
    out = tmp_path_factory.mktemp("api")
    done = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_api.py"), "--out",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out, done.stderr


def test_the_committed_reference_is_up_to_date(written) -> None:
    out, _ = written
    fresh = {p.name: p.read_text() for p in out.glob("*.md")}
    committed = {p.name: p.read_text() for p in (ROOT / "docs" / "api").glob("*.md")}
    assert sorted(committed) == sorted(fresh), "docs/api: pages added or removed; run `make docs`"
    stale = [name for name in fresh if committed[name] != fresh[name]]
    assert not stale, f"docs/api is stale ({', '.join(stale)}): run `make docs`"


def test_every_public_name_is_documented(written) -> None:
    import graphengine
    from graphengine import clients, ops

    out, stderr = written
    assert "no docstring" not in stderr
    main_page = (out / "graphengine.md").read_text()
    for name in graphengine.__all__:
        if name == "__version__":
            assert "`graphengine.__version__`" in main_page
        elif name == "Client":
            assert "## `Client`" in (out / "clients.md").read_text()
        else:
            assert f"## `{name}`" in main_page, name
            assert (getattr(graphengine, name).__doc__ or "").strip(), name
    for name in clients.__all__:
        assert f"## `{name}`" in (out / "clients.md").read_text(), name
    ops_page = (out / "ops.md").read_text()
    for name in ("Conv", "Gemm", "Softmax", "AssignSlice", "TreeEnsembleClassifier"):
        assert f"| `{name}`" in ops_page, name
        assert getattr(ops, name)  # a listed op is a function of graphengine.ops


def test_a_missing_docstring_is_reported(gen_api) -> None:
    class Documented:
        """Has one."""

        def method(self) -> None:
            pass  # but this has none

        @property
        def value(self) -> int:
            """Documented."""
            return 1

    @dataclasses.dataclass
    class Plain:  # dataclasses write `Plain(x: int = 0)`, which is no documentation
        x: int = 0

    # Members are read from the classes of the graphengine package only (not Exception's).
    Documented.__module__ = Plain.__module__ = "graphengine.example"
    ref = gen_api.Reference()
    text = "\n".join(gen_api.class_section(ref, "Documented", Documented))
    assert ref.missing == ["Documented.method"]
    assert "Has one." in text and "### `Documented.value` (property)" in text
    gen_api.class_section(ref, "Plain", Plain)
    assert ref.missing == ["Documented.method", "Plain"]


def test_settings_tables_follow_the_dataclass(gen_api) -> None:
    @dataclasses.dataclass(frozen=True)
    class Settings:
        port: int = 50051
        name: str = ""
        hosts: tuple[str, ...] = ()
        idle: float = 3600.0
        strict: bool = False
        missing: int = 1

    text = """Settings.

    - `port` (`50051`): the port.
    - `name`, `hosts` (`""`): a name
      continued here.
    - `idle` (`3600`): seconds.
    - `strict` (`true`): wrongly stated.
    """
    ref = gen_api.Reference()
    rows = gen_api.settings_table(ref, Settings, gen_api.inspect.cleandoc(text), "here")
    assert "| `port` | `50051` | the port. |" in rows
    assert "| `name` | `\"\"` | a name continued here. |" in rows
    assert "| `idle` | `3600` | seconds. |" in rows
    assert ref.missing == ["here: `hosts` says default `\"\"`, the code has `[]`",
                           "here: `strict` says default `true`, the code has `false`",
                           "here: `missing`"]


def test_every_server_setting_is_in_the_table(written) -> None:
    from graphengine.server.config import ServerConfig

    page = (written[0] / "config.md").read_text()
    assert "\nUpper bounds (engine/bounds.py" in page and "```yaml\nhost: 0.0.0.0" in page
    for field in dataclasses.fields(ServerConfig):
        default = field.default if field.default is not dataclasses.MISSING else None
        assert f"| `{field.name}` |" in page, field.name
        if isinstance(default, int) and not isinstance(default, bool):
            assert f"| `{field.name}` | `{default}` |" in page, field.name


def test_cli_page_lists_every_subcommand_and_option(written) -> None:
    from graphengine.cli.commands import build_parser

    page = (written[0] / "cli.md").read_text()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, child in sub.choices.items():
        assert f"## `graphengine {name}`" in page, name
        for action in child._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in page or f", {flag}" in page, (name, flag)
