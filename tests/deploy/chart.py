"""The Magnetar Helm chart rendered offline with the real Helm library (helm-python-sdk, which
bundles Helm v4's Go SDK: no ``helm`` binary, no cluster), and its objects parsed.

    objects = render({"standalone": {"enabled": True}})   # every object, hooks and tests too
    report = lint({})                                      # helm lint --strict's findings
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART_DIR = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "magnetar"
VALUES_DIR = Path(__file__).resolve().parent / "values"
RELEASE = "mg"
NAMESPACE = "magnetar"

Object = dict[str, Any]


def values_file(name: str) -> dict[str, Any]:
    """The values of ``tests/deploy/values/<name>.yaml``."""
    loaded: dict[str, Any] = yaml.safe_load((VALUES_DIR / f"{name}.yaml").read_text())
    return loaded


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    """Values files layered as Helm layers ``-f a.yaml -f b.yaml``: maps merge, the rest is
    replaced by the later layer."""
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def render(
    values: dict[str, Any], release: str = RELEASE, namespace: str = NAMESPACE
) -> list[Object]:
    """Every object the chart renders for ``values`` (as ``helm template`` would for an
    install), in template order; NOTES.txt is left out."""
    manifests = helm.Chart.load(CHART_DIR).render(
        values, name=release, namespace=namespace, is_install=True
    )
    objects: list[Object] = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def notes(values: dict[str, Any]) -> str:
    """The rendered NOTES.txt."""
    manifests = helm.Chart.load(CHART_DIR).render(
        values, name=RELEASE, namespace=NAMESPACE, is_install=True
    )
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def lint(values: dict[str, Any]) -> dict[str, Any]:
    """``helm lint --strict`` of the chart with ``values``: ``{"messages": [...], "errors": [...]}``."""
    return helm.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE)


def containers(obj: Object) -> list[Object]:
    """The init containers and containers of a workload or Pod object."""
    spec = pod_spec(obj)
    return [*spec.get("initContainers", []), *spec["containers"]]


def pod_spec(obj: Object) -> Object:
    """The Pod spec of a Pod, Job, Deployment or StatefulSet object."""
    if obj["kind"] == "Pod":
        spec: Object = obj["spec"]
        return spec
    template: Object = obj["spec"]["template"]["spec"]
    return template
