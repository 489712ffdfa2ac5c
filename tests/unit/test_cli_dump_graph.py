"""`graphengine dump-graph`: in process through cli.main (ONNX, a saved graphengine.Graph,
offline models, --stage, the errors), and once as the real command in a subprocess."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import onnx
import pytest

from graphengine.cli import commands as cli
from graphengine.cli import dump_graph
from graphengine.engine import dot
from tests import zoo
from tests.unit.picture_models import resnet_block
from tests.unit.test_tf_import import small_cnn

NEEDS_DOT = pytest.mark.skipif(
    dot.dot_program() is None,
    reason="Graphviz's dot is not installed here (make test installs Debian's graphviz when "
           "run as root with apt); the .dot output is tested without it")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("dump_models")
    # torchvision's ResNet layout, small: a downsample branch beside each first block
    onnx.save(zoo.resnet(depths=(1, 1), width=8, image=32, classes=10, batch="batch"),
              root / "resnet.onnx")
    resnet_block(host_op=True, batch="n").save(str(root / "block.graphdef"))
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def dump_block(capsys: pytest.CaptureFixture[str], models: pathlib.Path,
               out_path: pathlib.Path, *extra: object, batch: int = 1) -> tuple[str, str]:
    """dump-graph of the saved ResNet-like block with a host op: (stdout, OUT's text)."""
    code, out, err = run(capsys, "dump-graph", models / "block.graphdef", "-o", out_path,
                         "--input-shape", f"image:{batch},4,16,16", *extra)
    assert code == 0, err
    return out, out_path.read_text(encoding="utf-8")


def _clusters(text: str) -> list[str]:
    return re.findall(r"subgraph (cluster_p\d+) \{", text)


def test_the_command_is_registered() -> None:
    args = cli.build_parser().parse_args(
        ["dump-graph", "m.onnx", "-o", "m.svg", "--input-shape", "x:1,3", "--max-streams", "2",
         "--option", "layouts=false", "--stage", "partitioned", "--rankdir", "LR",
         "--max-nodes", "50"])
    assert args.handler is dump_graph.cmd_dump_graph
    assert (args.model, args.output, args.input_shape, args.max_streams) == \
        ("m.onnx", "m.svg", [("x", (1, 3))], 2)
    assert (args.option, args.stage, args.rankdir, args.max_nodes) == \
        ([("layouts", "false")], "partitioned", "LR", 50)


def test_an_onnx_resnet_as_dot(models: pathlib.Path, tmp_path: pathlib.Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    out_path = tmp_path / "resnet.dot"
    code, out, err = run(capsys, "dump-graph", models / "resnet.onnx", "-o", out_path,
                         "--input-shape", "input:1,3,32,32", "--max-streams", "2")
    assert code == 0, err
    text = out_path.read_text(encoding="utf-8")
    assert _clusters(text) == ["cluster_p0"]
    assert "fused: Conv+BatchNormalization+Relu\\n" in text
    assert "fused: Conv+BatchNormalization+Add+Relu\\n" in text  # the residual epilogue
    assert re.search(r'\[label="Conv · s1\\n', text)  # a downsample branch on stream 1
    events = re.findall(r'\[label="e\d+", style="dashed"', text)
    assert events
    assert re.search(r'shape="hexagon"', text)  # the TransData into the NHWC region
    m = re.fullmatch(r"wrote (\S+): 'resnet' compiled, (\d+) of \2 nodes in 1 partition, "
                     r"(\d+) fused, (\d+) TransData, 2 streams, (\d+) event edges\n", out)
    assert m and m.group(1) == str(out_path), out
    assert int(m.group(5)) == len(events)


def test_a_saved_graph_with_a_host_op_has_three_partitions(
        models: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, text = dump_block(capsys, models, tmp_path / "block.dot", "--max-streams", "2",
                         "--rankdir", "LR", batch=2)
    assert _clusters(text) == ["cluster_p0", "cluster_p1", "cluster_p2"]
    assert "partition #1: host (numpy kernels)" in text
    assert 'rankdir="LR"' in text
    assert "float32[2,4,16,16]" in text  # the shape asked for


def test_a_frozen_tensorflow_graph_with_its_compile_arguments(
        tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    pb = tmp_path / "cnn.pb"
    pb.write_bytes(small_cnn().bytes())
    out_path = tmp_path / "cnn.dot"
    code, out, err = run(capsys, "dump-graph", pb, "-o", out_path, "--input-shape",
                         "x:2,8,8,3", "--outputs", "relu")
    assert code == 0, err
    text = out_path.read_text(encoding="utf-8")
    assert re.search(r'label="Conv · s0\\nfused: Conv\+Add\+Relu\\n', text), text
    assert 'label="output\\nrelu"' in text and "float32[2,8,8,3]" in text


def test_the_partitioned_stage_is_the_graph_before_fusion(
        models: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out, text = dump_block(capsys, models, tmp_path / "before.dot", "--stage", "partitioned")
    assert _clusters(text) == ["cluster_p0", "cluster_p1", "cluster_p2"]
    assert "fused:" not in text and " · s" not in text and "TransData ·" not in text
    assert len(re.findall(r'label="BatchNormalization\\n', text)) == 5
    assert "'resnet_block' partitioned" in out


def test_an_offline_model_is_drawn_from_its_plan(
        models: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    geom = tmp_path / "resnet.geom"
    code, _, err = run(capsys, "compile", models / "resnet.onnx", "-o", geom, "--gears",
                       "batch:1,2", "--max-streams", "2")
    assert code == 0, err
    from_source = tmp_path / "source.dot"
    assert run(capsys, "dump-graph", models / "resnet.onnx", "-o", from_source,
               "--input-shape", "input:2,3,32,32", "--max-streams", "2")[0] == 0
    out_path = tmp_path / "offline.dot"
    code, out, err = run(capsys, "dump-graph", geom, "-o", out_path, "--input-shape",
                         "input:2,3,32,32")
    assert code == 0, err
    offline_text, source_text = (p.read_text(encoding="utf-8") for p in (out_path,
                                                                         from_source))

    def labels(text: str) -> list[str]:
        """The task nodes' labels in program order, less the name line (a name the compiler
        made, e.g. a TransData's, is numbered per compile)."""
        found = re.findall(r'^    n\d+ \[label="([^"]*· s\d[^"]*)"', text, re.M)
        return [label.rsplit("\\n", 1)[0] for label in found]

    assert labels(offline_text) == labels(source_text) and labels(offline_text)
    assert offline_text.count('style="dashed", color="#d62728"') == \
        source_text.count('style="dashed", color="#d62728"')
    assert "float32[2,3,32,32]" in offline_text  # the gear asked for
    # no --input-shape: the first gear, and a note saying so
    code, out, err = run(capsys, "dump-graph", geom, "-o", tmp_path / "first.dot")
    assert code == 0, err
    assert "holds 2 compiled signatures; drawing the first" in out
    assert "float32[1,3,32,32]" in (tmp_path / "first.dot").read_text(encoding="utf-8")
    # a plan that is fixed takes no compile options
    code, _, err = run(capsys, "dump-graph", geom, "-o", tmp_path / "x.dot", "--max-streams",
                       "4")
    assert code == 2 and "is an offline model" in err and "--max-streams" in err
    code, _, err = run(capsys, "dump-graph", geom, "-o", tmp_path / "x.dot", "--input-shape",
                       "input:3,3,32,32")
    assert code == 2 and "holds none for" in err


@pytest.mark.parametrize("argv,message", [
    (["{missing}", "-o", "{tmp}/x.svg"], r"cannot read .*missing\.onnx: no such file"),
    (["{model}", "-o", "{tmp}/x.jpg"], r"-o .*x\.jpg: unknown extension '\.jpg'; use \.svg, "
                                       r"\.png or \.dot"),
    (["{model}", "-o", "{tmp}/noext"], r"unknown extension none; use \.svg, \.png or \.dot"),
    (["{model}", "-o", "{tmp}/x.dot", "--max-nodes", "0"], r"--max-nodes must be 1\.\.100000"),
    (["{model}", "-o", "{tmp}/x.dot"], r"input 'input' has symbolic dim 'batch': give "
                                       r"--input-shape input:"),
    (["{model}", "-o", "{tmp}/x.dot", "--input-shape", "nope:1"], r"names 'nope', which is "
                                                                  r"not an input"),
    (["{model}", "-o", "{tmp}/x.dot", "--option", "fuse=maybe"], r"compile option 'fuse' "
                                                                 r"must be true or false"),
    (["{model}", "-o", "{tmp}/nodir/x.dot", "--input-shape", "input:1,3,32,32"],
     r"cannot write .*nodir/x\.dot"),
])
def test_bad_input_is_a_clear_error(argv: list[str], message: str, models: pathlib.Path,
                                    tmp_path: pathlib.Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(missing=tmp_path / "missing.onnx", model=models / "resnet.onnx",
                     tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, "dump-graph", *argv)
    assert code == 2, (out, err)
    assert err.startswith("graphengine dump-graph: error: ")
    assert re.search(message, err), err
    assert not list(tmp_path.glob("x.*"))


def test_svg_without_graphviz_fails_before_compiling(
        models: pathlib.Path, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on it
    # a model that would not compile (symbolic dims, no --input-shape): never reached
    code, out, err = run(capsys, "dump-graph", models / "resnet.onnx", "-o",
                         tmp_path / "x.png")
    assert code == 1
    assert "drawing png needs Graphviz's `dot` program, which is not on PATH" in err
    assert "apt-get install graphviz" in err and "-o OUT.dot" in err
    assert not (tmp_path / "x.png").exists()
    # the DOT text needs nothing
    code, _, err = run(capsys, "dump-graph", models / "resnet.onnx", "-o", tmp_path / "x.dot",
                       "--input-shape", "input:1,3,32,32")
    assert code == 0, err


@NEEDS_DOT
def test_an_svg_shows_partitions_fusions_and_streams(
        models: pathlib.Path, tmp_path: pathlib.Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, svg = dump_block(capsys, models, tmp_path / "block.svg", "--max-streams", "2")
    assert svg.count('class="cluster"') == 3
    for text in ("partition #0: device (host backend)", "partition #1: host (numpy kernels)",
                 "fused: Conv+BatchNormalization+Relu", "fused: Conv+BatchNormalization+Add+Relu",
                 "Conv · s1", "TransData · s0", ">e0<", "legend"):
        assert text in svg, text


def test_the_real_command(models: pathlib.Path, tmp_path: pathlib.Path) -> None:
    """`python -m graphengine.cli dump-graph`: an SVG where Graphviz is installed, else the
    DOT text (and the SVG's error)."""
    svg = dot.dot_program() is not None
    out_path = tmp_path / ("resnet.svg" if svg else "resnet.dot")
    done = subprocess.run([sys.executable, "-m", "graphengine.cli", "dump-graph",
                           str(models / "resnet.onnx"), "-o", str(out_path), "--input-shape",
                           "input:1,3,32,32", "--max-streams", "2"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out_path}: 'resnet' compiled")
    text = out_path.read_text(encoding="utf-8")
    assert "fused: Conv+BatchNormalization+Add+Relu" in text
    assert "partition #0: device (host backend)" in text
