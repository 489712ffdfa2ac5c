"""A `graphengine serve` subprocess on free ports, for the examples that need a server.

    with LocalServer("--model-repository", "models") as server:
        server.grpc     # "127.0.0.1:PORT": sessions (graphengine.Client) and KServe gRPC
        server.http     # "127.0.0.1:PORT": KServe v2 HTTP/REST and /v2/health/*

`--port 0 --http-port 0` let the server pick free ports; it prints them in its ready lines
(`graphengine http on ...`, then `graphengine serving on ...`), which this waits for. On
leaving, SIGTERM: the server drains, closes its sessions and exits 0. Its log (stderr) goes
to a temporary file, shown if it fails to start.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading


class LocalServer:
    def __init__(self, *args: str) -> None:
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "graphengine.cli", "serve", "--port", "0",
             "--http-port", "0", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.grpc = self.http = ""
        for line in self.proc.stdout:
            if line.startswith("graphengine http on "):
                self.http = line.split()[-1]
            elif line.startswith("graphengine serving on "):
                self.grpc = line.split()[-1]
                break
        if not self.grpc:
            self.log.seek(0)
            raise RuntimeError(f"the server did not start:\n{self.log.read()[-4000:]}")
        # Keep reading stdout so that the server never blocks on a full pipe.
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()  # SIGTERM: drain, then exit 0
        code = self.proc.wait(timeout=60)
        self.log.close()
        if code != 0 and exc[0] is None:
            raise RuntimeError(f"the server exited with {code}")
