"""The Helm chart, linted and rendered offline with the real Helm library, for the default
values, the standalone switch and every feature at once; each rendered object validated
strictly against the Kubernetes schemas of 1.29 to 1.34; each ``magnetar`` container's
arguments parsed by the real command line."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import kubernetes_validate.utils
import pytest

from magnetar.auth.server_options import add_argparse_options
from magnetar.cli.main import cli
from magnetar.functions.__main__ import add_worker_arguments
from tests.deploy.chart import Object, containers, lint, merged, notes, render, values_file

KUBERNETES_VERSIONS = ["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"]
VARIANTS = {
    "default": lambda: {},
    "standalone": lambda: values_file("standalone"),
    "all-features": lambda: values_file("all-features"),
    "standalone-all-features": lambda: merged(
        values_file("all-features"), values_file("standalone")
    ),
}


@pytest.fixture(scope="module")
def cached_schemas() -> Iterator[None]:
    """kubernetes-validate reads and parses a schema file and the (large) definitions file on
    every call; the same files serve every object here, so they are parsed once per module.
    The validation itself is the library's, unchanged."""
    original = kubernetes_validate.utils.schema_contents
    kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(original)
    try:
        yield
    finally:
        kubernetes_validate.utils.schema_contents = original


def _values(variant: str) -> dict[str, Any]:
    return VARIANTS[variant]()


def _kinds(objects: list[Object]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj["metadata"]["name"])
    return kinds


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_chart_lints_clean_in_strict_mode(variant: str) -> None:
    report = lint(_values(variant))
    assert report["errors"] == []
    # severity 2 = warning, 3 = error; info (1) such as "icon is recommended" is allowed
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.usefixtures("cached_schemas")
def test_every_rendered_object_is_valid_for_kubernetes_1_29_to_1_34(variant: str) -> None:
    objects = render(_values(variant))
    assert objects
    for obj in objects:
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(
                    f"{obj['kind']}/{obj['metadata']['name']} on {version}: {exc.message}"
                ) from None


def test_the_default_values_render_a_cluster_behind_a_proxy() -> None:
    kinds = _kinds(render({}))
    assert kinds["StatefulSet"] == [
        "mg-magnetar-bookie",
        "mg-magnetar-broker",
        "mg-magnetar-zookeeper",
    ]
    assert kinds["Deployment"] == ["mg-magnetar-proxy"]
    assert kinds["Job"] == ["mg-magnetar-init"]
    assert kinds["Pod"] == ["mg-magnetar-test"]
    assert sorted(kinds["PodDisruptionBudget"]) == [
        "mg-magnetar-bookie", "mg-magnetar-broker", "mg-magnetar-proxy", "mg-magnetar-zookeeper",
    ]  # fmt: skip
    services = {o["metadata"]["name"]: o for o in render({}) if o["kind"] == "Service"}
    assert services["mg-magnetar-proxy"]["spec"]["type"] == "LoadBalancer"
    assert services["mg-magnetar-zookeeper"]["spec"]["clusterIP"] == "None"
    assert services["mg-magnetar-bookie"]["spec"]["clusterIP"] == "None"


def test_bookies_keep_journal_and_ledgers_on_their_own_volume_claims() -> None:
    (bookie,) = [
        o
        for o in render({})
        if o["metadata"]["name"] == "mg-magnetar-bookie" and o["kind"] == "StatefulSet"
    ]
    claims = [c["metadata"]["name"] for c in bookie["spec"]["volumeClaimTemplates"]]
    assert claims == ["journal", "ledgers"]
    (container,) = bookie["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    data_dir = container["args"][container["args"].index("--data-dir") + 1]
    assert mounts == {"ledgers": data_dir, "journal": f"{data_dir}/journal"}
    advertised = container["args"][container["args"].index("--advertised-host") + 1]
    assert advertised == "$(POD_NAME).mg-magnetar-bookie.magnetar.svc.cluster.local"


def test_the_standalone_switch_renders_one_pod_and_no_cluster() -> None:
    kinds = _kinds(render(values_file("standalone")))
    assert kinds["StatefulSet"] == ["mg-magnetar-standalone"]
    assert "Deployment" not in kinds and "Job" not in kinds
    assert "helm test" in notes(values_file("standalone"))


def test_all_features_mount_the_secrets_the_flags_name() -> None:
    objects = render(values_file("all-features"))
    kinds = _kinds(objects)
    assert "mg-magnetar-functions-worker" in kinds["StatefulSet"]
    for obj in objects:
        if obj["kind"] not in ("StatefulSet", "Deployment", "Job", "Pod"):
            continue
        spec_volumes = {
            v["name"] for v in (obj["spec"].get("template", obj)["spec"].get("volumes", []))
        }
        for container in containers(obj):
            mounted = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
            assert set(mounted) <= spec_volumes | {
                c["metadata"]["name"] for c in obj["spec"].get("volumeClaimTemplates", [])
            }
            text = " ".join([*container.get("command", []), *container.get("args", [])])
            for path in (
                "/pulsar/keys",
                "/pulsar/tokens/superuser",
                "/pulsar/tokens/proxy",
                "/pulsar/certs",
            ):
                if path + "/" in text:
                    assert path in mounted.values(), (
                        obj["metadata"]["name"],
                        container["name"],
                        path,
                    )


def _check_magnetar_args(args: list[str], existing_file: Path) -> None:
    """Parse ``magnetar <args>`` as the real command line does, without running it. Paths
    into the pod's mounts (``/pulsar/...``), which flags such as --tls-cert-file require to
    exist, stand for ``existing_file``."""
    args = [str(existing_file) if a.startswith("/pulsar/") else a for a in args]
    command = args[0]
    if command == "functions-worker":
        parser = argparse.ArgumentParser(exit_on_error=False)
        add_worker_arguments(parser)
        add_argparse_options(parser)
        parser.parse_args(args[1:])
        return
    sub = cli.get_command(click.Context(cli), command)
    assert sub is not None, f"magnetar has no command {command!r}"
    with sub.make_context(command, list(args[1:])) as ctx:
        assert not ctx.args, f"magnetar {command}: unexpected {ctx.args}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_magnetar_container_passes_real_flags(variant: str, tmp_path: Path) -> None:
    existing_file = tmp_path / "mounted"
    existing_file.write_text("")
    checked = 0
    for obj in render(_values(variant)):
        if obj["kind"] not in ("StatefulSet", "Deployment", "Job", "Pod"):
            continue
        for container in containers(obj):
            if container.get("command") == ["magnetar"]:
                _check_magnetar_args(container["args"], existing_file)
                checked += 1
    assert checked > 0


def test_without_its_own_zookeeper_every_component_uses_the_external_metadata_store() -> None:
    url = "zk://zk-a.example:2181,zk-b.example:2181/prod"
    objects = render({"components": {"zookeeper": False}, "externalMetadataStoreUrl": url})
    assert "mg-magnetar-zookeeper" not in _kinds(objects)["StatefulSet"]
    flags = 0
    for obj in objects:
        if obj["kind"] in ("StatefulSet", "Deployment"):
            for container in containers(obj):
                args = [*container.get("command", []), *container.get("args", [])]
                if "--metadata-url" in args or "--metadata-store" in args:
                    assert url in args
                    flags += 1
                if container["name"] == "wait-for-zookeeper":
                    assert args[-1] == "zk-a.example:2181,zk-b.example:2181"
    assert flags == 3  # bookies, brokers, proxy
