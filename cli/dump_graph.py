"""`graphengine dump-graph`: a picture of what the compiler did to a model.

    graphengine dump-graph MODEL -o OUT.svg|OUT.png|OUT.dot [--input-shape NAME:D0,D1,...]...
                           [--outputs NAME,...] [--max-streams N] [--option KEY=VALUE]...
                           [--stage compiled|partitioned] [--rankdir TB|LR]
                           [--max-nodes N]

MODEL is what `graphengine compile` takes (an ONNX model, a frozen TensorFlow graph, a
graph saved by graphengine.Graph.save), compiled here with the same options, or an offline
model file, drawn from the plan it holds (--input-shape picks one of its gears). The DOT text
is written here (engine/picture.py, engine/dot.py); .svg and .png are Graphviz's `dot` run on
it, which is looked for before anything is compiled.

Exit codes as in cli/commands.py: 0 success, 1 the compile or Graphviz failed, 2 bad usage
or local files.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from graphengine.cli.compile import (
    EXIT_FAILED,
    EXIT_OK,
    _Failed,
    _reported,
    add_compile_arguments,
    compile_plans,
    load_for_compile,
)

STAGES = ("compiled", "partitioned")


def add_dump_graph_parser(sub: Any) -> None:
    p = sub.add_parser("dump-graph", help="draw the compiled graph: partitions, fusions, "
                                          "streams, events, TransData",
                       description="Compile MODEL (or read an offline model) and draw the "
                                   "result with Graphviz: one cluster per partition coloured "
                                   "by engine, fused nodes with the ops they fold, layout "
                                   "conversions, streams (sN, border colour) and events "
                                   "(dashed record -> wait edges). OUT's extension picks "
                                   "the format: .dot (the text, needs nothing), .svg or .png "
                                   "(need Graphviz's dot).")
    p.add_argument("model", metavar="MODEL",
                   help="ONNX model, frozen TensorFlow GraphDef (.pb), saved graphengine.Graph, "
                        "or offline model file")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.svg, OUT.png or "
                                                                        "OUT.dot")
    add_compile_arguments(p)
    p.add_argument("--stage", choices=STAGES, default="compiled",
                   help="compiled (default): the plan that runs; partitioned: the graph "
                        "before stage 3 (placed and partitioned, nothing fused, no streams)")
    p.add_argument("--rankdir", choices=("TB", "LR"), default="TB",
                   help="layout direction: top to bottom (default) or left to right")
    p.add_argument("--max-nodes", type=int, metavar="N",
                   help="draw at most N nodes, the rest counted in a note (default 2000)")


def output_format(path: str) -> str:
    """dot, svg or png, from OUT's extension."""
    from graphengine.engine.dot import FORMATS

    ext = os.path.splitext(path)[1].lower().lstrip(".")
    if ext not in FORMATS:
        said = f"'.{ext}'" if ext else "none"
        raise _Failed(f"-o {path}: unknown extension {said}; use .svg, .png or .dot")
    return ext


def _dump_graph(args: argparse.Namespace) -> int:
    from graphengine.engine import dot, picture

    fmt = output_format(args.output)
    max_nodes = dot.MAX_NODES if args.max_nodes is None else args.max_nodes
    if not 1 <= max_nodes <= dot.MAX_NODES_LIMIT:
        raise _Failed(f"--max-nodes must be 1..{dot.MAX_NODES_LIMIT}, got {max_nodes}")
    if not os.path.isfile(args.model):
        raise _Failed(f"cannot read {args.model}: no such file")
    if fmt != "dot" and dot.dot_program() is None:  # before any work
        raise _Failed(f"-o {args.output}: drawing {fmt} needs Graphviz's `dot` program, which "
                      f"is not on PATH: {dot.INSTALL_HINT}", EXIT_FAILED)
    pic = _picture(args, picture)
    text = dot.to_dot(pic, rankdir=args.rankdir, max_nodes=max_nodes)
    try:
        if fmt == "dot":
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            dot.render(text, fmt, args.output)
    except OSError as exc:
        raise _Failed(f"cannot write {args.output}: {exc.strerror}") from None
    except dot.GraphvizError as exc:
        raise _Failed(str(exc), EXIT_FAILED) from None
    counts = picture.summary(pic)
    drawn = min(counts["nodes"], max_nodes)
    print(f"wrote {args.output}: '{pic.name}' {pic.stage}, {drawn} of "
          f"{dot.plural(counts['nodes'], 'node')} in "
          f"{dot.plural(counts['partitions'], 'partition')}, {counts['fused']} fused, "
          f"{counts['transdata']} TransData, {dot.plural(counts['streams'], 'stream')}, "
          f"{dot.plural(counts['events'], 'event edge')}")
    return EXIT_OK


def _picture(args: argparse.Namespace, picture: Any) -> Any:
    from graphengine.engine import offline

    if offline.is_offline_model(args.model):
        return _offline_picture(args, picture)
    from graphengine.engine.errors import GraphEngineError
    from graphengine.engine.pipeline import compile_graph

    graph, options = load_for_compile(args)
    ((_, bound),) = compile_plans(graph, dict(args.input_shape), None)
    kept: dict[str, Any] = {}

    def keep(stage: str, g: Any) -> None:
        if stage == "partition" and args.stage == "partitioned":
            kept["graph"] = g.copy()  # stage 3 changes the graph in place
        elif stage == "optimize" and args.stage == "compiled":
            kept["graph"] = g

    try:
        compiled = compile_graph(graph, options, input_shapes=bound, on_stage=keep)
    except GraphEngineError as exc:
        raise _Failed(f"{exc.code.name}: {exc}", EXIT_FAILED) from None
    if args.stage == "partitioned":
        return picture.from_graph(kept["graph"], None, stage="partitioned")
    return picture.from_graph(kept["graph"], compiled)


def _offline_picture(args: argparse.Namespace, picture: Any) -> Any:
    from graphengine.engine import offline
    from graphengine.engine.errors import GraphEngineError

    ignored = [flag for flag, value in (("--outputs", args.outputs),
                                        ("--max-streams", args.max_streams),
                                        ("--option", args.option)) if value]
    if ignored or args.stage != "compiled":
        raise _Failed(f"{args.model} is an offline model: its plan is fixed, so "
                      f"{', '.join(ignored) or '--stage ' + args.stage} cannot apply (draw "
                      f"the source model for that)")
    try:
        held = offline.read_all(args.model)
        model = held.find(dict(args.input_shape)) if args.input_shape else held.models[0]
    except GraphEngineError as exc:
        raise _Failed(f"{args.model}: {exc.message}") from None
    if len(held.models) > 1 and not args.input_shape:
        print(f"{args.model} holds {len(held.models)} compiled signatures; drawing the first "
              f"({', '.join(str(s) for s in model.inputs)}); pick another with --input-shape")
    return picture.from_compiled(model)


cmd_dump_graph = _reported("dump-graph", _dump_graph)

__all__ = ["add_dump_graph_parser", "cmd_dump_graph", "output_format"]
