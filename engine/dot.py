"""A Picture (engine/picture.py) as Graphviz DOT text, and the text rendered by Graphviz.

The DOT is written here as text (no Graphviz library), so `.dot` output needs nothing
installed; SVG and PNG are Graphviz's `dot` program run on that text (`render`), and a
machine without it gets an error that says how to install it.

What the picture shows: one cluster per partition, filled by its engine's colour and titled
with its streams, events and tasks; a node per op (op type, stream `sN`, name), a fused node
filled green with the source op types it computes ("Conv+BatchNormalization+Relu"), a layout
conversion (TransData, FormatView) as a yellow hexagon with its formats, a view (no task)
as a dashed ellipse; node borders coloured by stream; data edges labelled with dtype, shape
and storage format (bold across partitions: GE's End -> PlaceHolder pairs); events as red
dashed edges from the recording node to the waiting one; a legend.

Readable at size: names longer than `name_chars` keep their tail ("...layer1.0/conv1/Conv"),
a long fusion chain is cut after a few op types, and at most `max_nodes` nodes are drawn (the
rest counted in a note), so the text and Graphviz's work stay bounded.
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
from collections.abc import Sequence

from .picture import Edge, Kind, Node, Picture, summary

FORMATS = ("dot", "svg", "png")
MAX_NODES = 2000  # the default cap on drawn nodes
MAX_NODES_LIMIT = 100_000  # what a caller may ask for at most
NAME_CHARS = 40
# Past this layout span (see layout_span) dot's work is minutes, not seconds: edge labels,
# which double the ranks, are left to the tooltips and its iterations are bounded.
# Measured: zoo models up to 500 (hf_t5, 153 nodes) lay out in 0.3 s with everything;
# DenseNet-121 (20 k) took 7.5 minutes, 6.8 s compact.
COMPACT_SPAN = 3000
COMPACT_LAYOUT = {"nslimit": 0.2, "nslimit1": 0.2, "mclimit": 0.3}
FUSED_PARTS = 6  # op types of a fusion chain shown before "+N more"

ENGINE_STYLE = {  # engine -> (fill, border)
    "device": ("#e8f1fc", "#2a62b8"),
    "host": ("#fdf0e0", "#c0620b"),
}
OTHER_ENGINE = ("#f0f0f0", "#777777")
STREAM_COLORS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02",
                 "#a6761d", "#333333")
FUSED_FILL = "#d6f0d2"
TRANSDATA_FILL = "#ffe08a"
EVENT_COLOR = "#d62728"
CUT_COLOR = "#555555"
INSTALL_HINT = ("install Graphviz (Debian/Ubuntu: `apt-get install graphviz`; macOS: "
                "`brew install graphviz`) so that `dot` is on PATH, or write the DOT text "
                "instead (-o OUT.dot)")


class GraphvizError(Exception):
    """Graphviz is missing, or `dot` failed on the text."""


def quote(text: object) -> str:
    """A DOT quoted string: quotes and backslashes escaped (so Graphviz's own escapes such as
    \\N and \\l in a name stay literal), line breaks as \\n, other control characters dropped."""
    out = []
    for ch in str(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch >= " " and ch != "\x7f":
            out.append(ch)
    return '"' + "".join(out) + '"'


def short(name: str, limit: int = NAME_CHARS) -> str:
    """`name`, or its tail behind "..." when longer than `limit` (a path's end tells most)."""
    return name if len(name) <= limit else "..." + name[-(limit - 3):]


def fusion_chain(ops: Sequence[str], parts: int = FUSED_PARTS) -> str:
    """"Conv+BatchNormalization+Relu"; repeats as "Mul x3"; long chains cut: "+N more"."""
    runs: list[list] = []
    for op in ops:
        if runs and runs[-1][0] == op:
            runs[-1][1] += 1
        else:
            runs.append([op, 1])
    text = [op if n == 1 else f"{op} x{n}" for op, n in runs]
    if len(text) > parts:
        rest = sum(n for _, n in runs[parts - 1:])
        text = text[:parts - 1] + [f"{rest} more"]
    return "+".join(text)


def tensor_label(e: Edge) -> str:
    shape = "?" if e.shape is None else ",".join(str(d) for d in e.shape)
    text = f"{e.dtype}[{shape}]" if e.dtype else short(e.tensor, 24)
    if e.format and e.format != "nchw":
        text += f" {e.format}"
    return text + (" (view)" if e.view else "")


def _stream_color(stream: int) -> str:
    return STREAM_COLORS[stream % len(STREAM_COLORS)]


def _attrs(**kw: object) -> str:
    return "[" + ", ".join(f"{k}={v if isinstance(v, (int, float)) else quote(v)}"
                           for k, v in kw.items() if v is not None and v != "") + "]"


def _node_line(n: Node, name_chars: int, indent: str = "    ") -> str:
    stream = f" · s{n.stream}" if n.stream is not None else ""
    name = short(n.name, name_chars)
    tooltip = n.name
    style: dict[str, object] = {"shape": "box", "style": "rounded,filled", "fillcolor": "white"}
    if n.kind is Kind.INPUT or n.kind is Kind.OUTPUT:
        label = f"{n.kind.value}\n{name}"
        style = {"shape": "invhouse" if n.kind is Kind.INPUT else "house",
                 "style": "filled", "fillcolor": "#eeeeee"}
    elif n.kind is Kind.TRANSDATA:
        label = f"{n.op}{stream}\n{n.detail}\n{name}" if n.detail else f"{n.op}{stream}\n{name}"
        style = {"shape": "hexagon", "style": "filled" + (",dashed" if n.op == "FormatView"
                                                          else ""),
                 "fillcolor": TRANSDATA_FILL}
    elif n.kind is Kind.VIEW:
        label = f"{n.op} (view)\n{name}"
        style = {"shape": "ellipse", "style": "dashed", "fontsize": 10}
    elif n.fused:
        label = f"{n.op}{stream}\nfused: {fusion_chain(n.fused)}\n{name}"
        style["fillcolor"] = FUSED_FILL
        tooltip = f"{n.name}: fused {'+'.join(n.fused)}"
    else:
        label = f"{n.op}{stream}\n{name}"
    if n.detail and n.kind is Kind.OP:
        tooltip = f"{n.name}: {n.detail}"
    if n.stream is not None:
        style.update(color=_stream_color(n.stream), penwidth=2)
    return _stmt(n.key, indent, label=label, tooltip=tooltip, **style)


def plural(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _partition_title(pic: Picture, index: int) -> str:
    part = next(p for p in pic.partitions if p.index == index)
    engine = part.engine
    if engine == "device" and pic.backend:
        engine = f"device ({pic.backend} backend)"
    elif engine == "host":
        engine = "host (numpy kernels)"
    parts = [f"partition #{index}: {engine}"]
    if part.tasks:
        counts = [plural(part.tasks, "task" if part.engine == "device" else "step")]
        if part.engine == "device":
            counts[:0] = [plural(part.streams, "stream"), plural(part.events, "event")]
        parts.append(", ".join(counts))
    return "\n".join(parts)


def _stmt(key: str, indent: str = "    ", **attrs: object) -> str:
    return f"{indent}{key} {_attrs(**attrs)};"


def _legend(pic: Picture) -> str:
    """One node holding an HTML-like table: compact whatever the graph's ranks are."""
    def row(text: str, **cell: object) -> str:
        attrs = "".join(f' {k}="{html.escape(str(v))}"' for k, v in cell.items())
        return f"<tr><td{attrs}>{html.escape(text)}</td></tr>"

    rows = ["<tr><td border=\"0\"><b>legend</b></td></tr>"]
    for engine in sorted({p.engine for p in pic.partitions}) or ["device"]:
        fill, border = ENGINE_STYLE.get(engine, OTHER_ENGINE)
        rows.append(row(f"{engine} partition", bgcolor=fill, color=border))
    rows += [row("fused node: source op types", bgcolor=FUSED_FILL),
             row("TransData / FormatView: layout conversion (hexagon)",
                 bgcolor=TRANSDATA_FILL),
             row("view: no task (dashed ellipse)")]
    streams = sorted({n.stream for n in pic.nodes if n.stream is not None})
    rows += [row(f"stream s{s} (border colour)", color=_stream_color(s), border=3)
             for s in streams[:len(STREAM_COLORS)]]
    event = html.escape("event eN: dashed edge, record -> wait")
    rows.append(f'<tr><td><font color="{EVENT_COLOR}">{event}</font></td></tr>')
    rows.append(row("bold edge: crosses partitions (End -> PlaceHolder)"))
    table = ('<table border="0" cellborder="1" cellspacing="3" cellpadding="4">'
             + "".join(rows) + "</table>")
    return f"  legend [shape=plain, fontsize=10, label=<{table}>];"


def to_dot(pic: Picture, *, rankdir: str = "TB", max_nodes: int = MAX_NODES,
           name_chars: int = NAME_CHARS, legend: bool = True) -> str:
    """The DOT text of `pic` (deterministic: same picture, same text)."""
    if rankdir not in ("TB", "LR", "BT", "RL"):
        raise ValueError(f"rankdir must be TB, LR, BT or RL, got {rankdir!r}")
    if not 1 <= max_nodes <= MAX_NODES_LIMIT:
        raise ValueError(f"max_nodes must be 1..{MAX_NODES_LIMIT}, got {max_nodes}")
    ops = [n for n in pic.nodes if n.kind not in (Kind.INPUT, Kind.OUTPUT)]
    drawn_ops = ops[:max_nodes]
    omitted = len(ops) - len(drawn_ops)
    drawn = {n.key for n in drawn_ops} | {n.key for n in pic.nodes
                                          if n.kind in (Kind.INPUT, Kind.OUTPUT)}
    counts = summary(pic)
    span = layout_span(pic.edges, [n.key for n in pic.nodes if n.key in drawn])
    compact = span > COMPACT_SPAN
    title = (f"{pic.name}: {pic.stage}" + (f" for backend {pic.backend}" if pic.backend else "")
             + f"\n{plural(counts['partitions'], 'partition')}, "
             f"{plural(counts['nodes'], 'node')}, {counts['fused']} fused, "
             f"{counts['transdata']} TransData, {plural(counts['events'], 'event edge')}"
             + (f"\n(a large layout, {span} ranks crossed: tensor labels are in the edges' "
                f"tooltips)" if compact else ""))
    lines = ["digraph compiled {",
             _stmt("graph", "  ", label=title, labelloc="t", fontsize=16, rankdir=rankdir,
                   newrank="true", fontname="Helvetica", **(COMPACT_LAYOUT if compact else {})),
             _stmt("node", "  ", fontname="Helvetica", fontsize=11),
             _stmt("edge", "  ", fontname="Helvetica", fontsize=9, color="#444444")]
    by_partition: dict[int | None, list[Node]] = {}
    for n in drawn_ops:
        by_partition.setdefault(n.partition, []).append(n)
    for n in pic.nodes:
        if n.kind in (Kind.INPUT, Kind.OUTPUT):
            lines.append(_node_line(n, name_chars, "  "))
    for part in pic.partitions:
        members = by_partition.pop(part.index, [])
        if not members:
            continue
        fill, border = ENGINE_STYLE.get(part.engine, OTHER_ENGINE)
        lines.append(f"  subgraph cluster_p{part.index} {{")
        lines.append(_stmt("graph", label=_partition_title(pic, part.index),
                           style="rounded,filled", fillcolor=fill, color=border, penwidth=2,
                           fontsize=13, labeljust="l"))
        lines += [_node_line(n, name_chars) for n in members]
        lines.append("  }")
    for members in by_partition.values():  # nodes of no known partition
        lines += [_node_line(n, name_chars, "  ") for n in members]
    part_of = {n.key: n.partition for n in pic.nodes}
    into_note: set[str] = set()
    for e in pic.edges:
        if e.src not in drawn or e.dst not in drawn:
            if e.src in drawn:
                into_note.add(e.src)
            continue
        cut = (part_of.get(e.src) is not None and part_of.get(e.dst) is not None
               and part_of[e.src] != part_of[e.dst])
        label = tensor_label(e)
        lines.append(_stmt(f"{e.src} -> {e.dst}", "  ", label=None if compact else label,
                           tooltip=f"{e.tensor}: {label}" if compact else e.tensor,
                           style="bold" if cut else None, color=CUT_COLOR if cut else None))
    for ev in pic.events:
        if ev.src in drawn and ev.dst in drawn:
            lines.append(_stmt(f"{ev.src} -> {ev.dst}", "  ", label=f"e{ev.event}",
                               style="dashed", color=EVENT_COLOR, fontcolor=EVENT_COLOR,
                               constraint="false",
                               tooltip=f"event {ev.event} of partition #{ev.partition}: "
                                       f"record -> wait"))
    if omitted:
        lines.append(_stmt("omitted", "  ", shape="note",
                           label=f"... {omitted} more nodes not drawn (max_nodes {max_nodes})"))
        lines += [_stmt(f"{src} -> omitted", "  ", style="dotted") for src in sorted(into_note)]
    if legend:
        lines.append(_legend(pic))
    lines.append("}")
    return "\n".join(lines) + "\n"


def layout_span(edges: Sequence[Edge], nodes: Sequence[str]) -> int:
    """The ranks Graphviz's edges cross in all: each node ranked one below its lowest
    producer, an edge from rank r to rank s crosses s - r of them, and dot lays out a
    virtual node per rank crossed, so this is what its work grows with (a DenseNet's
    concatenations read every earlier layer: 851 edges crossing 39 k ranks)."""
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    for e in edges:
        if e.src in preds and e.dst in preds:
            preds[e.dst].append(e.src)
    rank: dict[str, int] = {}
    for n in nodes:  # nodes are in program order: producers first
        rank[n] = 1 + max((rank.get(p, 0) for p in preds[n]), default=0)
    return sum(rank[n] - rank[src] for n, ps in preds.items() for src in ps)


def dot_program() -> str | None:
    """Graphviz's `dot` on PATH, or None."""
    return shutil.which("dot")


def render(dot_text: str, fmt: str, path: str | os.PathLike, *, timeout: float = 600.0
           ) -> None:
    """Write `dot_text` rendered as `fmt` (svg, png) to `path` with Graphviz's `dot`."""
    if fmt not in FORMATS or fmt == "dot":
        raise ValueError(f"render makes svg or png, not {fmt!r}")
    exe = dot_program()
    if exe is None:
        raise GraphvizError(f"drawing {fmt} needs Graphviz's `dot` program, which is not on "
                            f"PATH: {INSTALL_HINT}")
    try:
        proc = subprocess.run([exe, f"-T{fmt}", "-o", os.fspath(path)],
                              input=dot_text.encode("utf-8"), capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizError(f"Graphviz's dot took longer than {timeout:.0f} s to lay out the "
                            f"graph; draw fewer nodes (max_nodes) or write .dot") from None
    except OSError as exc:
        raise GraphvizError(f"cannot run {exe}: {exc.strerror}") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()[:2000]
        raise GraphvizError(f"Graphviz's dot failed (exit {proc.returncode}): {said}")


__all__ = ["FORMATS", "GraphvizError", "INSTALL_HINT", "MAX_NODES", "dot_program",
           "fusion_chain", "layout_span", "plural", "quote", "render", "short", "tensor_label",
           "to_dot"]
