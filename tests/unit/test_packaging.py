"""What the package promises about itself: its stubs beside tritonclient's in one process,
`graphengine --version`, UTC ISO 8601 log timestamps, no `*_created` metric series.

The whole wheel (built with `pip wheel .`, installed beside tritonclient[grpc,http] in a
fresh venv and with --target) is checked by `make test-wheel` (tests/packaging/).
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import logging
import os
import pathlib
import re
import subprocess
import sys

import pytest
from prometheus_client.exposition import generate_latest

import graphengine
from graphengine.cli.commands import main
from graphengine.server import logs
from graphengine.server.metrics import Metrics
from graphengine.server.timing import StageTimes

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Both KServe copies (package `inference`) in one process, messages of each parsed by the
# other, and protobuf's default pool still holding tritonclient's definition.
BOTH = """
import importlib, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from google.protobuf import descriptor_pool
import graphengine._pool
import graphengine.kserve.v2.grpc_service_pb2 as ours
import graphengine.kserve.v2.model_config_pb2 as ours_mc
import tritonclient.grpc.service_pb2 as theirs
import tritonclient.grpc.model_config_pb2 as theirs_mc
assert ours.DESCRIPTOR.pool is graphengine._pool.POOL
found = descriptor_pool.Default().FindMessageTypeByName("inference.ModelInferRequest")
assert found.file.name == theirs.DESCRIPTOR.name, found.file.name
a = theirs.ModelInferRequest(model_name="m", id="7", raw_input_contents=[b"xy"])
b = ours.ModelInferRequest.FromString(a.SerializeToString())
assert (b.model_name, b.id, list(b.raw_input_contents)) == ("m", "7", [b"xy"]), b
c = ours_mc.ModelConfig(name="m", max_batch_size=4)
c.input.add(name="x", data_type=ours_mc.TYPE_FP32, dims=[3])
d = theirs_mc.ModelConfig.FromString(c.SerializeToString())
assert d.input[0].data_type == theirs_mc.TYPE_FP32 and d.max_batch_size == 4, d
print("both")
"""

ORDERS = {
    "tritonclient-first": ["tritonclient.grpc", "graphengine.server.rpc.app"],
    "graphengine-first": ["graphengine.server.rpc.app", "tritonclient.grpc"],
}


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("impl", ["upb", "python"])
def test_kserve_stubs_beside_tritonclient(order: str, impl: str) -> None:
    """`python` is protobuf's pure-Python implementation (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION),
    which registers descriptors differently; `upb` is the default of protobuf's wheels."""
    env = {**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": impl}
    done = subprocess.run([sys.executable, "-c", BOTH, *ORDERS[order]], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "both", done.stderr


def test_version_flag(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"graphengine {graphengine.__version__}"
    # One version: the distribution's metadata reads it from graphengine.__version__.
    assert importlib.metadata.version("graphengine") == graphengine.__version__


UTC_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def _record(created: float) -> logging.LogRecord:
    record = logging.LogRecord("graphengine.test", logging.INFO, __file__, 1, "msg", None, None)
    record.created, record.msecs = created, (created % 1) * 1000
    return record


def test_log_timestamps_are_utc_iso8601() -> None:
    # 1e9 + 0.25 s after the epoch is 2001-09-09 01:46:40.250 UTC, whatever the local zone.
    assert logs.UtcFormatter("%(asctime)s").format(_record(1e9 + 0.25)) == \
        "2001-09-09T01:46:40.250Z"
    assert json.loads(logs.JsonFormatter().format(_record(1e9 + 0.25)))["ts"] == \
        "2001-09-09T01:46:40.250Z"
    for fmt in ("kv", "json"):
        stream = io.StringIO()
        logs.configure("INFO", stream, fmt)
        try:
            logs.log_event(logging.getLogger("graphengine.test"), logging.INFO, "hello", n=1)
        finally:
            logs.configure("WARNING", io.StringIO())
        line = stream.getvalue().strip()
        ts = json.loads(line)["ts"] if fmt == "json" else line.split()[0].removeprefix("ts=")
        assert re.fullmatch(UTC_ISO, ts), line


def test_log_timestamps_ignore_the_local_zone() -> None:
    """A server in a non-UTC zone still logs UTC (the zone set before anything logs)."""
    code = ("import logging, sys, time; from graphengine.server import logs; "
            "r = logging.LogRecord('x', 20, 'f', 1, 'm', None, None); r.created = 1e9; "
            "r.msecs = 0.0; print(time.strftime('%H', time.localtime(1e9)), "
            "logs.UtcFormatter('%(asctime)s').format(r))")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TZ": "Asia/Tokyo"},
                          capture_output=True, text=True, timeout=60, check=True)
    local_hour, stamp = done.stdout.split()
    assert local_hour == "10"  # the zone took effect: 01:46 UTC is 10:46 in Tokyo
    assert stamp == "2001-09-09T01:46:40.000Z"


def test_metrics_have_no_created_series() -> None:
    m = Metrics()
    times = StageTimes(api="ModelInfer")
    times.model = "mlp"
    times.add("execute", 0.002)
    m.observe_request(times, "OK")
    m.observe_request(times, "INVALID_ARGUMENT")
    m.observe_batch("mlp", 4)
    text = m.render().decode()
    assert 'graphengine_requests_total{api="ModelInfer",code="OK",model="mlp"} 1.0' in text
    assert "graphengine_request_duration_seconds_bucket" in text
    assert "graphengine_batch_size_count" in text
    assert "_created" not in text, [ln for ln in text.splitlines() if "_created" in ln]
    # The HTTP endpoint's ?name[]= queries go through restricted_registry.
    wanted = ["graphengine_requests_total", "graphengine_requests_created"]
    restricted = generate_latest(m.registry.restricted_registry(wanted)).decode()
    assert "graphengine_requests_total{" in restricted and "_created" not in restricted


def test_runtime_loads_the_onednn_beside_it() -> None:
    """The package carries libdnnl.so.3 next to _runtime and finds it through $ORIGIN, with
    no LD_LIBRARY_PATH (pip --target installs no <prefix>/lib to find it in)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    code = "from tests.packaging.check_wheel import check_onednn; check_onednn()"
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0 and "loaded from beside the runtime" in done.stdout, \
        done.stdout + done.stderr


def _nested(levels: int) -> bytes:
    """DescriptorProto bytes with `levels` nested_type (field 3) levels around a name."""
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2]) + _varint(len(payload)) + payload

    data = field(1, b"leaf")
    for _ in range(levels):
        data = field(3, data)
    return data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


@pytest.mark.parametrize("levels", [99, 100, 101, 102])
def test_nesting_measure_agrees_with_protobufs_limit(levels: int) -> None:
    """Under protobuf 6 (what tritonclient[grpc] brings) a too-deep message fails with no
    word of depth; the importers then measure the bytes, and the measure must agree with
    where the installed protobuf stops."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    from graphengine.engine.errors import decode_problem, nested_deeper_than

    data = _nested(levels)
    try:
        descriptor_pb2.DescriptorProto.FromString(data)
        parses = True
    except DecodeError as exc:
        parses = False
        assert decode_problem("not a message", "the thing", exc, data).startswith(
            "the thing is nested too deep")
    assert parses == (levels <= 100)
    assert nested_deeper_than(data, 100) == (levels > 100)


def test_nesting_measure_on_other_bytes() -> None:
    from graphengine.engine import errors

    assert not errors.nested_deeper_than(b"\xff\xff\xff", 0)  # not a message at all
    # A payload that does not read as a message (a field without its length) is no level.
    assert not errors.nested_deeper_than(b"\x1a\x03\x1a\x01\x0a", 1)
    assert errors.nested_deeper_than(b"\x1a\x04\x1a\x02\x08\x01", 1)
    assert errors.nested_deeper_than(_nested(3), 2) and not errors.nested_deeper_than(
        _nested(3), 3)
    # Past the budget of bytes descended into, the answer is "unknown": False.
    big = _nested(200)
    assert errors.nested_deeper_than(big, 100)
    saved, errors._DEPTH_BUDGET = errors._DEPTH_BUDGET, 1000
    try:
        assert not errors.nested_deeper_than(big, 100)
    finally:
        errors._DEPTH_BUDGET = saved
