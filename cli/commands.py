"""The `graphengine` command line.

    graphengine serve [--config FILE] [--host H] [--port N] [--model-repository DIR]
                      [--model-control-mode M] [--repository-poll-secs S] [--load-model NAME]
                      [--metrics-port N] [--http-port N] [--grace-seconds S] [--log-level L]
                      [--plugin FILE] ...
    graphengine run --server HOST:PORT MODEL.onnx --input IN.npz --output OUT.npz [--report]
    graphengine --version

One `add_<name>_parser` + `cmd_<name>` pair per subcommand, registered in COMMANDS; a new
subcommand (compile, inspect, dump-graph) is one more pair and one more row.
Exit codes: 0 success, 1 the server (or the server start) failed, 2 bad usage or local
files.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import graphengine
from graphengine.cli import compile as cli_compile
from graphengine.cli import dump_graph as cli_dump_graph
from graphengine.clients.errors import ClientError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A problem with the command line or local files; reported without a traceback."""


# ---- serve -----------------------------------------------------------------------------
def add_serve_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run the gRPC server in the foreground",
                       description="Run the GraphEngine gRPC server until SIGTERM/SIGINT. "
                                   "Flags override the config file; the file overrides "
                                   "the built-in defaults.")
    p.add_argument("--config", metavar="FILE", help="YAML settings file")
    p.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port to bind; 0 picks a free one (default 50051)")
    p.add_argument("--model-repository", metavar="DIR",
                   help="folder of models to serve over KServe v2 (default: none)")
    p.add_argument("--model-control-mode", choices=("none", "poll", "explicit"),
                   help="none: load every repository model at start (default); explicit: "
                        "only --load-model ones, then RepositoryModelLoad/Unload; poll: "
                        "rescan the repository every --repository-poll-secs")
    p.add_argument("--repository-poll-secs", type=float, metavar="S",
                   help="poll mode: seconds between repository scans (default 15)")
    p.add_argument("--load-model", action="append", metavar="NAME", default=[],
                   help="explicit mode: a model to load at start ('*': all); repeatable")
    p.add_argument("--metrics-port", type=int, metavar="N",
                   help="Prometheus /metrics HTTP port; 0 disables (default 0)")
    p.add_argument("--http-port", type=int, metavar="N",
                   help="KServe v2 HTTP/REST port, with /v2/health/live and /ready; 0 picks a "
                        "free one, -1 turns HTTP off (default 8000)")
    p.add_argument("--grace-seconds", type=float, metavar="S",
                   help="on SIGTERM, time in-flight work gets to finish (default 10)")
    p.add_argument("--worker-threads", type=int, metavar="N",
                   help="gRPC worker threads (default 8)")
    p.add_argument("--tls-cert", metavar="PEM", help="TLS certificate chain (with --tls-key)")
    p.add_argument("--tls-key", metavar="PEM", help="TLS private key")
    p.add_argument("--log-level", help="DEBUG, INFO, WARNING, ERROR (default INFO)")
    p.add_argument("--log-format", choices=("kv", "json"), help="log lines (default kv)")
    p.add_argument("--replica-id", metavar="ID",
                   help="this server's name among replicas; its session ids start with it "
                        "(default: the host name, in Kubernetes the pod's name)")
    p.add_argument("--replica-address-format", metavar="FORMAT",
                   help="every replica's address, {replica} standing for its id, e.g. "
                        "'{replica}.graphengine-sessions.default.svc:50051'")
    p.add_argument("--compile-cache-dir", metavar="DIR",
                   help="keep compiled models in DIR and load them from it on restart "
                        "(shared by replicas; default: no cache)")
    p.add_argument("--plugin", action="append", metavar="FILE", default=[],
                   help="load custom operators: a .py module calling graphengine.register_op, "
                        "or a native kernel library (.so); repeatable, after the config's "
                        "`plugins`")


def serve_config(args: argparse.Namespace) -> Any:
    """The ServerConfig `graphengine serve` runs with: the file, then the flags given."""
    from graphengine.server.config import ConfigError, load_config

    try:
        config = load_config(args.config, host=args.host, port=args.port,
                             model_repository=args.model_repository,
                             model_control_mode=args.model_control_mode,
                             repository_poll_seconds=args.repository_poll_secs,
                             metrics_port=args.metrics_port, http_port=args.http_port,
                             grace_seconds=args.grace_seconds,
                             worker_threads=args.worker_threads, tls_cert_file=args.tls_cert,
                             tls_key_file=args.tls_key, log_level=args.log_level,
                             log_format=args.log_format, replica_id=args.replica_id,
                             replica_address_format=args.replica_address_format,
                             compile_cache_dir=args.compile_cache_dir)
        if args.plugin:
            config = dataclasses.replace(config, plugins=config.plugins + tuple(args.plugin))
        if args.load_model:
            config = dataclasses.replace(config,
                                         load_models=config.load_models + tuple(args.load_model))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return config


def cmd_serve(args: argparse.Namespace) -> int:
    # Server modules are imported only here: `run` and the other client commands must not
    # pay for (or depend on) loading the compiler and the runtime.
    from graphengine.server.rpc.app import serve

    return serve(serve_config(args))


# ---- run -------------------------------------------------------------------------------
def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="run a model on a server with inputs from an .npz file",
                       description="Open a session on the server, add MODEL, compile it, run "
                                   "it on the arrays of IN.npz (keys: the model's input "
                                   "names) and write the outputs to OUT.npz (keys: output "
                                   "names).")
    p.add_argument("model", metavar="MODEL.onnx", help="ONNX model file")
    p.add_argument("--server", required=True, metavar="HOST:PORT", help="server address")
    p.add_argument("--input", required=True, metavar="IN.npz", help="input arrays")
    p.add_argument("--output", required=True, metavar="OUT.npz", help="where to write outputs")
    p.add_argument("--report", action="store_true", help="print the compile report")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="deadline for each call to the server (default: none)")


def cmd_run(args: argparse.Namespace) -> int:
    from graphengine.clients.client import Client

    try:
        with open(args.model, "rb") as f:
            model = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read model {args.model}: {exc.strerror}") from None
    inputs = load_npz(args.input)

    timings: dict[str, float] = {}
    with Client(args.server, timeout=args.timeout) as client, client.session() as session:
        with _timed(timings, "add"):
            graph_id = session.add_graph(model)
        with _timed(timings, "compile"):
            # Compile for the shapes being run, so symbolic dims are bound now.
            report = session.compile_graph(graph_id, {k: v.shape for k, v in inputs.items()})
        if args.report:
            print(report.render())
        with _timed(timings, "run"):
            outputs = session.run_graph(graph_id, inputs)
    save_npz(args.output, outputs)

    for name, array in outputs.items():
        print(f"{name}: {array.dtype}{list(array.shape)}")
    print(" ".join(f"{k} {v * 1e3:.1f} ms," for k, v in timings.items()).rstrip(",")
          + f"; wrote {args.output}")
    return EXIT_OK


class _timed:
    def __init__(self, into: dict[str, float], key: str) -> None:
        self.into, self.key = into, key

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.into[self.key] = time.perf_counter() - self.start


def load_npz(path: str) -> dict[str, np.ndarray]:
    try:
        # allow_pickle=False: an input file must not be able to run code.
        with np.load(path, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise UsageError(f"cannot read inputs from {path}: {exc}") from None


def save_npz(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Like np.savez, but exactly at `path` and for any key (np.savez reserves 'file'
    and 'allow_pickle' as parameter names and appends '.npz' to the path)."""
    try:
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, array in arrays.items():
                with zf.open(name + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asarray(array), allow_pickle=False)
    except OSError as exc:
        raise UsageError(f"cannot write outputs to {path}: {exc.strerror}") from None


# ---- main ------------------------------------------------------------------------------
COMMANDS: Sequence[tuple[str, Callable[[Any], None], Callable[[argparse.Namespace], int]]] = (
    ("serve", add_serve_parser, cmd_serve),
    ("run", add_run_parser, cmd_run),
    ("compile", cli_compile.add_compile_parser, cli_compile.cmd_compile),
    ("inspect", cli_compile.add_inspect_parser, cli_compile.cmd_inspect),
    ("dump-graph", cli_dump_graph.add_dump_graph_parser, cli_dump_graph.cmd_dump_graph),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphengine",
                                     description="GraphEngine: graph compiler and inference "
                                                 "service.")
    parser.add_argument("--version", action="version",
                        version=f"graphengine {graphengine.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, add_parser, handler in COMMANDS:
        add_parser(sub)
        sub.choices[name].set_defaults(handler=handler)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except UsageError as exc:
        print(f"graphengine {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ClientError as exc:
        # The server's own words: they name the graph, node or tensor at fault.
        print(f"graphengine {args.command}: {exc.code.name}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # stdout went away (`graphengine run ... | head`): not an error worth a traceback.
        # Point stdout at devnull so that the interpreter's final flush does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
