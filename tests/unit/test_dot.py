"""engine/dot.py: the DOT text of a compiled plan (always), and its rendering by Graphviz's
`dot` (where it is installed: `make test` installs Debian's graphviz when it runs as root
with apt, as CI does; elsewhere those tests say that they did not run, and why)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import graphengine
from graphengine import ops
from graphengine.engine import dot, picture
from tests.unit.picture_models import compiled_with_graph, resnet_block

NEEDS_DOT = pytest.mark.skipif(
    dot.dot_program() is None,
    reason="Graphviz's dot is not installed here (make test installs Debian's graphviz when "
           "run as root with apt); the DOT text itself is tested without it")


@pytest.fixture(scope="module")
def pic() -> picture.Picture:
    return picture.from_graph(*compiled_with_graph(resnet_block(), max_streams=2))


def _clusters(text: str) -> dict[str, str]:
    """cluster name -> its body (the text between its braces; clusters do not nest here)."""
    return dict(re.findall(r"subgraph (cluster_\w+) \{\n(.*?)\n  \}", text, re.S))


def _label(text: str, key: str) -> str:
    m = re.search(rf"^\s*{key} \[label=\"((?:[^\"\\]|\\.)*)\"", text, re.M)
    assert m, key
    return m.group(1)


def test_quote_escapes_what_dot_would_read_otherwise() -> None:
    assert dot.quote('a"b') == '"a\\"b"'
    assert dot.quote("a\\N") == '"a\\\\N"'  # Graphviz's \N stays a literal backslash-N
    assert dot.quote("two\nlines") == '"two\\nlines"'
    assert dot.quote("bell\x07 tab\t del\x7f") == '"bell tab del"'
    assert dot.quote("Ünïcode/τ") == '"Ünïcode/τ"'


def test_long_names_keep_their_tail_and_chains_are_cut() -> None:
    name = "/layer3/layer3.5/downsample/downsample.0/Conv"
    assert dot.short(name, 20) == "...downsample.0/Conv"
    assert len(dot.short(name, 20)) == 20
    assert dot.short("short", 20) == "short"
    assert dot.fusion_chain(["Conv", "BatchNormalization", "Relu"]) == \
        "Conv+BatchNormalization+Relu"
    assert dot.fusion_chain(["Mul", "Mul", "Add"]) == "Mul x2+Add"
    ops_ = ["A", "B", "C", "D", "E", "F", "G", "G"]
    assert dot.fusion_chain(ops_, parts=4) == "A+B+C+5 more"


def test_one_cluster_per_partition_coloured_by_engine(pic: picture.Picture) -> None:
    text = dot.to_dot(pic)
    clusters = _clusters(text)
    assert sorted(clusters) == ["cluster_p0", "cluster_p1", "cluster_p2"]
    for name, engine in (("cluster_p0", "device"), ("cluster_p1", "host"),
                         ("cluster_p2", "device")):
        fill, border = dot.ENGINE_STYLE[engine]
        assert f'fillcolor="{fill}", color="{border}"' in clusters[name]
    assert "partition #0: device (host backend)\\n2 streams, 2 events, 11 tasks" in \
        clusters["cluster_p0"]
    assert "partition #1: host (numpy kernels)\\n1 step" in clusters["cluster_p1"]
    # every node is drawn inside its own partition's cluster
    for n in pic.nodes:
        if n.partition is not None:
            assert re.search(rf"^    {n.key} \[", clusters[f"cluster_p{n.partition}"], re.M)
    # inputs and outputs outside every cluster
    assert re.search(r"^  i0 \[label=\"input\\nimage\"", text, re.M)
    assert re.search(r"^  o0 \[label=\"output\\nlogits\"", text, re.M)


def test_fused_nodes_streams_and_transdata_are_labelled(pic: picture.Picture) -> None:
    text = dot.to_dot(pic)
    key = {n.name: n.key for n in pic.nodes}
    assert _label(text, key["stem/conv"]) == \
        "Conv · s0\\nfused: Conv+BatchNormalization+Relu\\nstem/conv"
    assert _label(text, key["block/conv3"]) == \
        "Conv · s1\\nfused: Conv+BatchNormalization+Add+Relu\\nblock/conv3"
    assert _label(text, key["block/downsample"]).startswith("Conv · s1\\n")
    conv3 = re.search(rf"^    {key['block/conv3']} \[.*$", text, re.M).group(0)
    assert f'fillcolor="{dot.FUSED_FILL}"' in conv3
    assert f'color="{dot.STREAM_COLORS[1]}", penwidth=2' in conv3  # the border is the stream
    td = next(n for n in pic.nodes if n.op == "TransData")
    line = re.search(rf"^    {td.key} \[.*$", text, re.M).group(0)
    assert 'shape="hexagon"' in line and "nchw -> nhwc" in line
    flatten = re.search(rf"^    {key['Flatten_36']} \[.*$", text, re.M).group(0)
    assert "Flatten (view)" in flatten and 'style="dashed"' in flatten
    assert _label(text, key["host/half"]) == "dump.test.HalfScale\\nhost/half"


def test_data_edges_carry_tensors_and_events_are_dashed(pic: picture.Picture) -> None:
    text = dot.to_dot(pic)
    key = {n.name: n.key for n in pic.nodes}
    assert (f'{key["stem/conv"]} -> {key["block/conv1"]} [label="float32[1,8,16,16] nhwc"'
            in text)
    # crossing partitions: device -> host -> device, bold
    assert re.search(rf'{key["Flatten_36"]} -> {key["host/half"]} \[label="float32\[1,16\]", '
                     rf'tooltip="Flatten_36", style="bold"', text)
    events = re.findall(r"^  (n\d+) -> (n\d+) \[label=\"e(\d+)\", style=\"dashed\", "
                        rf"color=\"{dot.EVENT_COLOR}\".*constraint=\"false\"", text, re.M)
    assert [(s, d, int(e)) for s, d, e in events] == \
        [(ev.src, ev.dst, ev.event) for ev in pic.events]
    assert len(events) == 2
    assert "legend [shape=plain" in text and "stream s1 (border colour)" in text


def test_at_most_max_nodes_are_drawn(pic: picture.Picture) -> None:
    text = dot.to_dot(pic, max_nodes=3)
    drawn = re.findall(r"^    (n\d+) \[", text, re.M)
    assert drawn == ["n0", "n1", "n2"]
    assert "... 8 more nodes not drawn (max_nodes 3)" in text
    assert not re.search(r"-> n(?:[3-9]|10) ", text)  # no edge into an omitted node
    assert re.search(r"^  n\d+ -> omitted \[style=\"dotted\"\]", text, re.M)
    with pytest.raises(ValueError, match="max_nodes"):
        dot.to_dot(pic, max_nodes=0)
    with pytest.raises(ValueError, match="rankdir"):
        dot.to_dot(pic, rankdir="XY")
    assert 'rankdir="LR"' in dot.to_dot(pic, rankdir="LR")


def test_without_graphviz_rendering_says_how_to_install_it(
        pic: picture.Picture, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on it
    assert dot.dot_program() is None
    with pytest.raises(dot.GraphvizError, match=r"apt-get install graphviz"):
        dot.render(dot.to_dot(pic), "svg", tmp_path / "x.svg")
    assert not (tmp_path / "x.svg").exists()


@NEEDS_DOT
def test_graphviz_draws_partitions_fusions_and_streams(pic: picture.Picture, tmp_path) -> None:
    svg_path = tmp_path / "plan.svg"
    dot.render(dot.to_dot(pic), "svg", svg_path)
    svg = svg_path.read_text(encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "</svg>" in svg
    for text in ("partition #0: device (host backend)", "partition #1: host (numpy kernels)",
                 "fused: Conv+BatchNormalization+Add+Relu", "Conv · s1", "nchw &#45;&gt; nhwc",
                 "stream s1 (border colour)", "dump.test.HalfScale"):
        assert text in svg, text
    assert svg.count('class="cluster"') == 3
    png_path = tmp_path / "plan.png"
    dot.render(dot.to_dot(pic), "png", png_path)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@NEEDS_DOT
def test_names_that_look_like_dot_syntax_are_drawn_as_they_are(tmp_path) -> None:
    odd = 'say "hi"\\N; } digraph {'
    g = graphengine.Graph("odd")
    x = g.input("x", np.float32, (2, 3))
    g.output(ops.Relu(x, name=odd), name="y")
    pic = picture.from_graph(*compiled_with_graph(g, max_streams=1))
    svg_path = tmp_path / "odd.svg"
    dot.render(dot.to_dot(pic), "svg", svg_path)
    assert "say &quot;hi&quot;\\N; } digraph {" in svg_path.read_text(encoding="utf-8")


def test_a_failing_dot_is_reported(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `dot` that exits non-zero (here a stand-in script) is an error with what it said."""
    fake = tmp_path / "dot"
    fake.write_text("#!/bin/sh\necho 'Error: syntax error in line 1' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(dot.GraphvizError, match=r"exit 1\): Error: syntax error in line 1"):
        dot.render("digraph {", "svg", tmp_path / "x.svg")
    with pytest.raises(ValueError, match="svg or png"):
        dot.render("digraph {}", "dot", tmp_path / "x.dot")


def test_layout_span_counts_the_ranks_edges_cross() -> None:
    edges = [picture.Edge(s, d, "t") for s, d in (("a", "b"), ("b", "c"), ("a", "c"))]
    assert dot.layout_span(edges, ["a", "b", "c"]) == 1 + 1 + 2
    assert dot.layout_span(edges, ["a", "b"]) == 1  # edges to nodes not drawn do not count


def test_a_large_layout_leaves_edge_labels_to_tooltips_and_bounds_dot() -> None:
    """Every node reading every earlier one (a DenseNet block's concatenations): past
    COMPACT_SPAN the edges carry no labels (their tensors are in the tooltips) and dot's
    iterations are bounded; a small graph keeps both."""
    n = 40
    pic = picture.Picture("dense", "compiled", partitions=[picture.Partition(0, "device")])
    pic.nodes = [picture.Node(f"n{k}", f"layer{k}", "Concat", partition=0) for k in range(n)]
    pic.edges = [picture.Edge(f"n{i}", f"n{j}", f"t{i}", "float32", (1, 8))
                 for j in range(n) for i in range(j)]
    assert dot.layout_span(pic.edges, [f"n{k}" for k in range(n)]) > dot.COMPACT_SPAN
    text = dot.to_dot(pic)
    assert 'nslimit=0.2, nslimit1=0.2, mclimit=0.3' in text
    assert "tensor labels are in the edges' tooltips" in text
    assert 'n0 -> n1 [tooltip="t0: float32[1,8]"];' in text
    small = dot.to_dot(picture.Picture("few", "compiled", nodes=pic.nodes[:3],
                                       edges=pic.edges[:3]))
    assert "nslimit" not in small and 'n0 -> n1 [label="float32[1,8]"' in small
