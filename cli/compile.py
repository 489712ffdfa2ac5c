"""`graphengine compile` (GE's ATC role) and `graphengine inspect`: offline model files, locally.

    graphengine compile MODEL -o OUT [--input-shape NAME:D0,D1,...]... [--gears DIM:V1,V2,...]
                        [--outputs NAME,...] [--max-streams N] [--option KEY=VALUE]...
                        [--json-report FILE]
    graphengine inspect OUT [--json]

`compile` imports the ONNX file or frozen TensorFlow GraphDef (.pb; --input-shape then
replaces its Placeholders' shapes and --outputs picks its outputs, as ATC's --framework=3),
runs GE's stages 1-4 once per gear value (or once) and writes every compiled signature into
one offline model file (engine/offline.py); `inspect` summarizes a file from its header and
description without building anything. Neither needs a server.

Progress: the compile pipeline takes no progress callback, so each compile prints a line when
it starts and its per-stage lines (pass runs, how many changed the graph, time) from the compile
report as soon as it ends; the full compile report follows.

This module does not import cli/commands.py (which imports it to register the commands), so
it reports its own errors. Exit codes as in cli/commands.py: 0 success, 1 the compile failed,
2 bad usage or local files. The engine is imported inside the handlers, so `run` never pays for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Failed(Exception):
    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _reported(command: str, handler: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except _Failed as exc:
            prefix = "error" if exc.code == EXIT_USAGE else "failed"
            print(f"graphengine {command}: {prefix}: {exc}", file=sys.stderr)
            return exc.code

    return run


# ---- argument types ------------------------------------------------------------------------
def input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """NAME:D0,D1,... (a scalar input is NAME:); the name may itself contain ':'.

    -1 marks the dim --gears sets, as in ATC: `--input-shape x:-1,3,224,224 --gears b:1,8`.
    """
    name, sep, dims = text.rpartition(":")
    try:
        shape = tuple(int(d) for d in dims.split(",")) if dims else ()
    except ValueError:
        shape = None
    if not sep or not name or shape is None or any(d < -1 for d in shape):
        raise argparse.ArgumentTypeError(f"expected NAME:D0,D1,... with sizes >= 0 (or -1 for "
                                         f"the gear dim), got {text!r}")
    return name, shape


def gears(text: str) -> Any:
    """DIM:V1,V2,... : compile once per value of the symbolic dim DIM."""
    from graphengine.engine.offline import Gear

    dim, sep, values = text.partition(":")
    try:
        parsed = tuple(int(v) for v in values.split(","))
    except ValueError:
        parsed = ()
    if not sep or not dim or not parsed or any(v < 1 for v in parsed):
        raise argparse.ArgumentTypeError(f"expected DIM:V1,V2,... with values >= 1, got {text!r}")
    if len(set(parsed)) != len(parsed):
        raise argparse.ArgumentTypeError(f"gear values repeat in {text!r}")
    return Gear(dim, parsed)


def output_names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME,NAME,... without empty names, got "
                                         f"{text!r}")
    return names


def option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


# ---- compile -------------------------------------------------------------------------------
def add_compile_parser(sub: Any) -> None:
    p = sub.add_parser("compile", help="compile an ONNX model or frozen TensorFlow graph into "
                                       "an offline model file",
                       description="Compile MODEL (GE's stages 1-4) for concrete input shapes "
                                   "and write an offline model file that loads and runs "
                                   "without compiling. With --gears, compile once per value "
                                   "of a symbolic dim and store every signature in one file.")
    p.add_argument("model", metavar="MODEL",
                   help="ONNX model file, or frozen TensorFlow GraphDef (.pb)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="offline model to write")
    add_compile_arguments(p)
    p.add_argument("--gears", type=gears, metavar="DIM:V1,V2,...",
                   help="compile ahead for each value of the symbolic dim DIM, e.g. batch:1,4,16")
    p.add_argument("--json-report", metavar="FILE", help="also write the compile report(s) as JSON")


def add_compile_arguments(p: argparse.ArgumentParser) -> None:
    """--input-shape, --outputs, --max-streams, --option: what load_for_compile reads
    (compile's and dump-graph's)."""
    p.add_argument("--input-shape", type=input_shape, action="append", default=[],
                   metavar="NAME:D0,D1,...", help="concrete shape of an input (repeatable)")
    p.add_argument("--outputs", type=output_names, metavar="NAME,...",
                   help="a TensorFlow graph's outputs (node or node:k); by default the nodes "
                        "no other node reads")
    p.add_argument("--max-streams", type=int, metavar="N", help="streams per device program")
    p.add_argument("--option", type=option, action="append", default=[], metavar="KEY=VALUE",
                   help="another compile option, e.g. layouts=false (repeatable)")


def _compile(args: argparse.Namespace) -> int:
    from graphengine.engine import offline
    from graphengine.engine.errors import GraphEngineError
    from graphengine.engine.pipeline import compile_graph

    if offline.is_offline_model(args.model):
        raise _Failed(f"{args.model} is an offline model already; compile takes an ONNX "
                      f"model or a TensorFlow GraphDef")
    graph, options = load_for_compile(args)
    plans = compile_plans(graph, dict(args.input_shape), args.gears)

    models = []
    for k, (label, shapes) in enumerate(plans, start=1):
        print(f"[{k}/{len(plans)}] compiling '{graph.name}'{label} ...", flush=True)
        try:
            compiled = compile_graph(graph, options, input_shapes=shapes, on_pass=_progress)
        except GraphEngineError as exc:
            raise _Failed(f"{exc.code.name}: {exc}", EXIT_FAILED) from None
        for line in stage_lines(compiled.report):
            print(line, flush=True)
        models.append(compiled)

    try:
        size = offline.write(models, args.output, gear=args.gears)
    except OSError as exc:
        raise _Failed(f"cannot write {args.output}: {exc.strerror}") from None
    print(models[0].report.render())
    for label_shapes, compiled in list(zip(plans, models))[1:]:
        r = compiled.report
        print(f"compile report{label_shapes[0]}: arena {r.memory.arena_bytes} B (lower bound "
              f"{r.memory.lower_bound_bytes} B), weights {r.memory.weight_bytes} B, streams "
              f"{r.streams}, events {r.events}, tasks {r.tasks} (in full: inspect, "
              f"--json-report)")
    if args.json_report:
        _write_json(args.json_report, {
            "model": args.model, "output": args.output,
            "gear": {"dim": args.gears.dim, "values": list(args.gears.values)}
            if args.gears else None,
            "compiles": [{"input_shapes": {s.name: list(s.shape) for s in m.inputs},
                          "report": m.report.to_dict()} for m in models]})
    print(f"wrote {args.output}: {size} bytes, {len(models)} compiled "
          f"signature{'s' if len(models) > 1 else ''}")
    return EXIT_OK


def load_for_compile(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the IR graph, the CompileOptions) from MODEL, --input-shape, --outputs, --option and
    --max-streams (compile's and dump-graph's arguments)."""
    from graphengine.engine.errors import GraphEngineError
    from graphengine.engine.importers import load_model
    from graphengine.engine.pipeline import CompileOptions

    try:
        shapes = dict(args.input_shape)
        graph = load_model(args.model, input_shapes=shapes or None, outputs=args.outputs)
        settings = dict(args.option)
        if args.max_streams is not None:
            settings["max_streams"] = args.max_streams
        return graph, CompileOptions.from_mapping(settings)
    except GraphEngineError as exc:
        raise _Failed(exc.message) from None


def compile_plans(graph: Any, shapes: dict[str, tuple[int, ...]], gear: Any
                  ) -> list[tuple[str, dict[str, tuple[int, ...]]]]:
    """(label, input shapes) per compile: one, or one per gear value; every dim concrete."""
    declared = {v.name: v.meta.shape if v.meta else None for v in graph.inputs}
    for name in shapes:
        if name not in declared:
            raise _Failed(f"--input-shape names '{name}', which is not an input of the model; "
                          f"inputs are {sorted(declared)}")
    wanted = {name: shapes.get(name, shape) for name, shape in declared.items()}
    geared = [n for n, s in wanted.items() if gear is not None and s
              and (gear.dim in s or -1 in s)]
    if gear is not None and not geared:
        symbols = sorted({d for s in wanted.values() for d in s or () if isinstance(d, str)})
        raise _Failed(f"--gears: no input has a dimension named '{gear.dim}' (or -1 in "
                      f"--input-shape); the symbolic dims are {symbols}")
    plans = []
    for value in gear.values if gear is not None else [None]:
        bound = {}
        for name, shape in wanted.items():
            if shape is None:
                raise _Failed(f"input '{name}' has unknown rank: give --input-shape {name}:...")
            if name in geared:
                shape = tuple(value if d in (gear.dim, -1) else d for d in shape)
            if -1 in shape:
                raise _Failed(f"--input-shape {name}: -1 marks the gear dim; give --gears too")
            missing = [d for d in shape if isinstance(d, str)]
            if missing:
                raise _Failed(f"input '{name}' has symbolic dim '{missing[0]}': give "
                              f"--input-shape {name}:... or --gears {missing[0]}:...")
            bound[name] = shape
        plans.append(("" if value is None else f" for {gear.dim}={value}", bound))
    return plans


def _progress(stage: str, record: Any) -> None:
    """Live progress: a line as each stage starts (the per-stage summary follows)."""
    if record is None:
        print(f"    {stage} ...", flush=True)


def stage_lines(report: Any) -> list[str]:
    """One line per stage from the compile report's per-pass records."""
    stages: dict[str, list[Any]] = {}
    for record in report.passes:
        stages.setdefault(record.stage, []).append(record)
    lines = []
    for stage, records in stages.items():
        changed = sum(1 for r in records if r.changed)
        ms = sum(r.seconds for r in records) * 1e3
        lines.append(f"    {stage:<10} {len(records):3d} pass runs, {changed:3d} changed "
                     f"{ms:10.2f} ms")
    lines.append(f"    {'total':<10} {report.total_seconds * 1e3:40.2f} ms")
    return lines


def _write_json(path: str, value: Any) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(value, f, indent=2)
            f.write("\n")
    except OSError as exc:
        raise _Failed(f"cannot write {path}: {exc.strerror}") from None


# ---- inspect -------------------------------------------------------------------------------
def add_inspect_parser(sub: Any) -> None:
    p = sub.add_parser("inspect", help="summarize an offline model file",
                       description="Show an offline model's header, signatures, programs "
                                   "(tensors, tasks, streams, events), memory plan, weights "
                                   "and compile report, without loading it.")
    p.add_argument("model", metavar="OUT", help="offline model file")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _inspect(args: argparse.Namespace) -> int:
    from graphengine.engine import offline
    from graphengine.engine.errors import InvalidModel

    try:
        with open(args.model, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise _Failed(f"cannot read {args.model}: {exc.strerror}") from None
    try:
        info = offline.inspect(data)
    except InvalidModel as exc:
        raise _Failed(f"{args.model}: {exc.message}") from None
    if args.json:
        for m in info["models"]:
            m.pop("report_text", None)  # "report" holds the same, as data
        print(json.dumps(info, indent=2))
    else:
        print(render_inspect(info))
    return EXIT_OK


def render_inspect(info: dict) -> str:
    h = info["header"]
    lines = [f"offline model '{info['name']}' ({h['magic']} format {h['format_version']}, "
             f"{h['file_bytes']} bytes, crc32 {h['crc32']}, {info['generator']})",
             f"  description {h['description_bytes']} B at {h['header_bytes']}, weights "
             f"{h['weights_bytes']} B at {h['weights_offset']}"]
    prov = info.get("provenance")
    if prov:
        producer = prov["producer"]
        made = " ".join(x for x in (producer.get("framework"), producer.get("version")) if x)
        lines.append(f"  producer: {made or 'unknown'}"
                     f"{' (' + producer['exporter'] + ')' if producer.get('exporter') else ''}")
        lines.append(f"  compiler {prov['compiler_version']}, runtime "
                     f"{prov['runtime_version']}, kernels {prov['kernel_library'] or '-'} "
                     f"({prov['backend']}); CPU features needed: "
                     f"{', '.join(prov['cpu_features']) or 'none beyond x86-64'}")
    if info["signature"]:
        sig = info["signature"]
        lines.append(f"  signature: {_sigs(sig['inputs'])} -> {_sigs(sig['outputs'])}")
    if info["gear"]:
        gear = info["gear"]
        lines.append(f"  gears: {gear['dim']} = {', '.join(map(str, gear['values']))}")
    for k, m in enumerate(info["models"], start=1):
        lines.append(f"  model {k}/{len(info['models'])}: {_sigs(m['inputs'])} -> "
                     f"{_sigs(m['outputs'])}")
        for p in m["programs"]:
            if p["engine"] == "device":
                lines.append(f"    program #{p['index']} device: {p['tensors']} tensors, "
                             f"{p['tasks']} tasks, streams {p['streams']}, events "
                             f"{p['events']}, arena {p['arena_bytes']} B, weights "
                             f"{p['weights_bytes']} B")
            elif p["engine"] == "host":
                lines.append(f"    program #{p['index']} host: {p['steps']} steps, "
                             f"{p['constants']} constants ({p['weights_bytes']} B)")
            else:
                lines.append(f"    program #{p['index']} {p['engine']}")
        mem = m["memory"] or {}
        lines.append(f"    memory: arena {mem.get('arena_bytes')} B (lower bound "
                     f"{mem.get('lower_bound_bytes')} B), weights {m['weights_bytes']} B")
        report = m["report_text"] or json.dumps(m["report"], indent=2)
        lines += ["    " + line for line in report.splitlines()]
    return "\n".join(lines)


def _sigs(sigs: Sequence[dict] | None) -> str:
    return ", ".join(f"{s['name']}: {s['dtype']}[{','.join(map(str, s['shape']))}]"
                     for s in sigs or ())


cmd_compile = _reported("compile", _compile)
cmd_inspect = _reported("inspect", _inspect)

__all__ = ["add_compile_arguments", "add_compile_parser", "add_inspect_parser", "cmd_compile",
           "cmd_inspect", "compile_plans", "load_for_compile", "render_inspect", "stage_lines"]
