"""A local stand-in for Kubernetes: runs the Pods that rendered manifests describe as local
processes, so a test can check that a chart's commands start a working system.

    kubelet = LocalKubelet(objects, tmp_path)        # objects: rendered manifests (dicts)
    kubelet.install(ready_timeout_s=120)             # workloads, readiness, post-install hooks
    kubelet.service_address("mg-magnetar-proxy")    # ("127.77.0.9", {"pulsar": 6650, ...})
    kubelet.run_tests()                              # `helm test`: each test Pod's exit status
    kubelet.stop()

What it does, for every component alike (nothing here knows a chart's components):

* Pods: a StatefulSet's replicas are ``<name>-<i>``, a Deployment's ``<name>-<i>``, a
  Job's and a Pod's their own name. Each gets its own loopback address (127.x.y.z), its
  "network namespace": a process binding the wildcard binds that address, so components
  keep the chart's standard ports (2181, 3181, 6650, 8080, ...) without colliding.
* Names: every string a container sees (command, args, env values, ConfigMap files) has the
  Services' DNS names (``<svc>.<ns>.svc.<domain>``: the first selected Pod's address) and
  StatefulSet Pods' names under their headless Service (``<pod>.<svc>.<ns>.svc.<domain>``)
  replaced by addresses, and ``0.0.0.0`` by the Pod's own address.
* Volumes: each Pod has a root directory; every mount path ``/m`` becomes ``<root>/m``, a
  symlink to the volume's directory (persistent claims and emptyDir: an empty directory;
  ConfigMaps and Secrets: their keys as files), nested mounts included. Absolute paths
  under a mount path are rewritten to ``<root>/...`` in every string.
* Environment: the container's env (values, downward-API ``fieldRef``, Secret and ConfigMap
  keys) with Kubernetes' ``$(VAR)`` expansion in command and args, ``HOSTNAME`` = the Pod's
  name, on top of this process's environment (``PATH`` first names this interpreter's
  directory: the image's ``magnetar`` and ``python``).
* Order, as Kubernetes and Helm give it: init containers one after another, then the
  containers; OrderedReady StatefulSets one Pod after the previous is ready; readiness by
  the probes' own endpoints (httpGet, tcpSocket, exec); then post-install hooks by weight;
  test Pods only when asked.
* No orphans: each container gets SIGKILL when the thread that started it ends (setpriv's
  parent-death signal), as when the test process is killed; :meth:`LocalKubelet.stop` ends
  the rest in order (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.testing import wait_until

Object = dict[str, Any]

STOP_TIMEOUT_S = 15.0
PROBE_TIMEOUT_S = 2.0
# A container dies with the thread that started it (which waits for it until it exits), so
# a killed test run leaves no ZooKeeper or broker behind: util-linux's setpriv sets the
# parent-death signal and execs the command, which keeps it.
_ORPHAN_GUARD = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
_HOST_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*[A-Za-z0-9]")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodFailed(AssertionError):
    """A container exited with an error (or a readiness wait ran out); the message names the
    Pod and quotes the tail of its log."""


@dataclass
class Pod:
    name: str
    spec: Object
    labels: dict[str, str]
    ip: str
    owner: Object
    subdomain: str | None = None
    root: Path = Path()
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    failure: str | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)


def _hook(obj: Object) -> str:
    return str(obj["metadata"].get("annotations", {}).get("helm.sh/hook", ""))


class LocalKubelet:
    def __init__(self, objects: list[Object], directory: Path, namespace: str = "default",
                 cluster_domain: str = "cluster.local") -> None:  # fmt: skip
        self._objects = objects
        self._dir = directory
        self._namespace = namespace
        self._domain = cluster_domain
        block = 64 + os.getpid() % 128  # apart from another run's addresses
        self._next_ip = (f"127.{block}.{i // 250}.{i % 250 + 1}" for i in range(60000))
        self.pods: dict[str, Pod] = {}
        for obj in objects:
            for pod in self._pods_of(obj):
                self.pods[pod.name] = pod
        self._names = self._dns_names()
        self._threads: list[threading.Thread] = []

    # -- the objects ---------------------------------------------------------------------------
    def _of_kind(self, kind: str) -> list[Object]:
        return [o for o in self._objects if o["kind"] == kind]

    def _pods_of(self, obj: Object) -> list[Pod]:
        kind, name = obj["kind"], obj["metadata"]["name"]
        if kind == "Pod":
            templates = [(name, obj["spec"], obj["metadata"].get("labels", {}), None)]
        elif kind == "Job":
            t = obj["spec"]["template"]
            templates = [(name, t["spec"], t["metadata"].get("labels", {}), None)]
        elif kind in ("StatefulSet", "Deployment"):
            t = obj["spec"]["template"]
            sub = obj["spec"].get("serviceName") if kind == "StatefulSet" else None
            templates = [
                (f"{name}-{i}", t["spec"], t["metadata"].get("labels", {}), sub)
                for i in range(int(obj["spec"].get("replicas", 1)))
            ]
        else:
            return []
        return [
            Pod(n, spec, labels, next(self._next_ip), obj, subdomain)
            for n, spec, labels, subdomain in templates
        ]

    def _workloads(self) -> list[Pod]:
        return [p for p in self.pods.values() if p.owner["kind"] in ("StatefulSet", "Deployment")]

    def _selected(self, service: Object) -> list[Pod]:
        selector = service["spec"].get("selector", {})
        return sorted(
            (p for p in self._workloads() if selector and selector.items() <= p.labels.items()),
            key=lambda p: p.name,
        )

    def _dns_names(self) -> dict[str, str]:
        names: dict[str, str] = {}
        for service in self._of_kind("Service"):
            svc = service["metadata"]["name"]
            fqdn = f"{svc}.{self._namespace}.svc.{self._domain}"
            selected = self._selected(service)
            if selected:
                names[fqdn] = selected[0].ip
            for pod in selected:
                if pod.subdomain == svc:
                    names[f"{pod.name}.{fqdn}"] = pod.ip
        return names

    def service_address(self, service: str) -> tuple[str, dict[str, int]]:
        """The address a Service's name stands for, and its ports by name (port == target
        port here: the Pod's own address carries the container's port)."""
        (obj,) = [s for s in self._of_kind("Service") if s["metadata"]["name"] == service]
        fqdn = f"{service}.{self._namespace}.svc.{self._domain}"
        ports = {
            p.get("name", str(p["port"])): self._target_port(obj, p) for p in obj["spec"]["ports"]
        }
        return self._names[fqdn], ports

    def _target_port(self, service: Object, port: Object) -> int:
        target = port.get("targetPort", port["port"])
        if isinstance(target, int):
            number = target
        else:
            number = self._container_port(self._selected(service)[0], target)
        if number != port["port"]:
            raise NotImplementedError(f"Service port {port['port']} -> {number}: not mapped here")
        return number

    @staticmethod
    def _container_port(pod: Pod, port: int | str) -> int:
        if isinstance(port, int):
            return port
        for container in pod.spec["containers"]:
            for p in container.get("ports", []):
                if p.get("name") == port:
                    return int(p["containerPort"])
        raise KeyError(f"{pod.name} has no port named {port}")

    # -- translation ---------------------------------------------------------------------------
    def _translate(self, pod: Pod, text: str, mounts: list[str]) -> str:
        def host(match: re.Match[str]) -> str:
            token = match[0]
            if token == "0.0.0.0":
                return pod.ip
            return self._names.get(token, token)

        text = _HOST_TOKEN.sub(host, text)
        if mounts:
            paths = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
            text = re.sub(rf"(?<![\w.-])(?:{paths})(?=/|\b|$)", lambda m: f"{pod.root}{m[0]}", text)
        return text

    def _object(self, kind: str, name: str) -> Object:
        (obj,) = [o for o in self._of_kind(kind) if o["metadata"]["name"] == name]
        return obj

    def _data(self, kind: str, name: str) -> dict[str, bytes]:
        obj = self._object(kind, name)
        if kind == "Secret":
            data = {k: base64.b64decode(v) for k, v in obj.get("data", {}).items()}
            data.update({k: v.encode() for k, v in obj.get("stringData", {}).items()})
            return data
        return {k: v.encode() for k, v in obj.get("data", {}).items()}

    def _mount_volumes(self, pod: Pod, container: Object) -> list[str]:
        """Lay out the container's mounts under the Pod's root; returns the mount paths."""
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        mounts = sorted(container.get("volumeMounts", []), key=lambda m: len(m["mountPath"]))
        all_paths = [m["mountPath"] for m in mounts]
        for mount in mounts:
            directory = self._dir / "volumes" / pod.name / mount["name"]
            if not directory.exists():
                directory.mkdir(parents=True)
                volume = volumes.get(mount["name"], {})
                self._fill(pod, volume, directory, all_paths)
            target = directory / mount.get("subPath", "")
            link = Path(f"{pod.root}{mount['mountPath']}")
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(target, target_is_directory=True)
        return all_paths

    def _fill(self, pod: Pod, volume: Object, directory: Path, mounts: list[str]) -> None:
        for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
            if key not in volume:
                continue
            source = volume[key]
            data = self._data(kind, source.get("name") or source["secretName"])
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                content = data[item["key"]]
                if kind == "ConfigMap":
                    content = self._translate(pod, content.decode(), mounts).encode()
                path = directory / item["path"]
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)

    def _environment(self, pod: Pod, container: Object, mounts: list[str]) -> dict[str, str]:
        env = {"HOSTNAME": pod.name}
        fields = {"metadata.name": pod.name, "metadata.namespace": self._namespace,
                  "status.podIP": pod.ip, "status.hostIP": pod.ip}  # fmt: skip
        for var in container.get("env", []):
            if "value" in var:
                value = _expand(var["value"], env)
            else:
                source = var["valueFrom"]
                if "fieldRef" in source:
                    value = fields[source["fieldRef"]["fieldPath"]]
                elif "secretKeyRef" in source:
                    ref = source["secretKeyRef"]
                    value = self._data("Secret", ref["name"])[ref["key"]].decode()
                else:
                    ref = source["configMapKeyRef"]
                    value = self._data("ConfigMap", ref["name"])[ref["key"]].decode()
            env[var["name"]] = self._translate(pod, value, mounts)
        return env

    # -- running -------------------------------------------------------------------------------
    def _start_container(self, pod: Pod, container: Object) -> subprocess.Popen[bytes]:
        mounts = self._mount_volumes(pod, container)
        env = self._environment(pod, container, mounts)
        argv = [*container.get("command", []), *container.get("args", [])]
        argv = [self._translate(pod, _expand(a, env), mounts) for a in argv]
        process_env = {**os.environ, **env}
        process_env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        if "PYTHONPATH" in os.environ:  # the Pod's working directory is its root
            entries = os.environ["PYTHONPATH"].split(os.pathsep)
            process_env["PYTHONPATH"] = os.pathsep.join(
                str(Path(e).resolve()) for e in entries if e
            )
        log = (self._dir / "logs" / f"{pod.name}.{container['name']}.log").open("ab")
        try:
            return subprocess.Popen(
                [*_ORPHAN_GUARD, *argv], cwd=pod.root, env=process_env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()

    def _run_pod(self, pod: Pod) -> None:
        try:
            pod.root = self._dir / "pods" / pod.name
            pod.root.mkdir(parents=True, exist_ok=True)
            for container in pod.spec.get("initContainers", []):
                process = self._start_container(pod, container)
                pod.processes.append(process)
                if process.wait() != 0:
                    pod.failure = f"init container {container['name']} exited {process.returncode}"
                    return
            for container in pod.spec["containers"]:
                pod.processes.append(self._start_container(pod, container))
            pod.started.set()
            codes = [p.wait() for p in pod.processes[-len(pod.spec["containers"]) :]]
            if any(codes):
                pod.failure = f"exited {codes}"
        finally:
            pod.started.set()
            pod.finished.set()

    def _launch(self, pods: list[Pod]) -> None:
        for pod in pods:
            thread = threading.Thread(target=self._run_pod, args=(pod,), name=pod.name, daemon=True)
            self._threads.append(thread)
            thread.start()

    def log_tail(self, pod: Pod, lines: int = 15) -> str:
        tails = []
        for log in sorted((self._dir / "logs").glob(f"{pod.name}.*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(tails)

    def _fail(self, pod: Pod, why: str) -> PodFailed:
        return PodFailed(f"pod {pod.name}: {why}\n{self.log_tail(pod)}")

    def probe(self, pod: Pod) -> bool:
        """Whether the Pod's containers are started and their readiness probes pass."""
        if not pod.started.is_set() or pod.finished.is_set():
            if pod.failure is not None or pod.finished.is_set():
                raise self._fail(pod, pod.failure or "exited")
            return False
        for container in pod.spec["containers"]:
            probe = container.get("readinessProbe")
            if probe is not None and not self._probe_passes(pod, container, probe):
                return False
        return True

    def _probe_passes(self, pod: Pod, container: Object, probe: Object) -> bool:
        if "httpGet" in probe:
            get = probe["httpGet"]
            port = self._container_port(pod, get["port"])
            url = f"http://{pod.ip}:{port}{get.get('path', '/')}"
            try:
                with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as answer:
                    return 200 <= answer.status < 400
            except (urllib.error.URLError, OSError):
                return False
        if "tcpSocket" in probe:
            port = self._container_port(pod, probe["tcpSocket"]["port"])
            try:
                socket.create_connection((pod.ip, port), timeout=PROBE_TIMEOUT_S).close()
            except OSError:
                return False
            return True
        mounts = [m["mountPath"] for m in container.get("volumeMounts", [])]
        argv = [self._translate(pod, a, mounts) for a in probe["exec"]["command"]]
        return subprocess.run(argv, cwd=pod.root, capture_output=True, check=False).returncode == 0

    def _wait_ready(self, pods: list[Pod], timeout_s: float) -> None:
        waiting = list(pods)

        def all_ready() -> bool:
            waiting[:] = [p for p in pods if not self.probe(p)]  # every Pod: failures raise
            return not waiting

        try:
            wait_until(all_ready, timeout_s=timeout_s, interval_s=0.2, what="readiness")
        except PodFailed:
            raise
        except AssertionError:
            raise PodFailed(
                f"not ready within {timeout_s:.0f} s: {', '.join(p.name for p in waiting)}\n"
                + "\n".join(self.log_tail(p) for p in waiting)
            ) from None

    def _wait_done(self, pod: Pod, timeout_s: float) -> None:
        if not pod.finished.wait(timeout_s):
            raise self._fail(pod, f"not finished within {timeout_s} s")
        if pod.failure is not None:
            raise self._fail(pod, pod.failure)

    def install(self, ready_timeout_s: float) -> None:
        """``helm install --wait``: pre-install hooks, the workloads (every Pod ready), then
        the post-install hooks, each run to success, by weight. Raises :class:`PodFailed`."""
        (self._dir / "logs").mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + ready_timeout_s
        self._run_hooks("pre-install", deadline)
        ordered: list[list[Pod]] = []
        for obj in self._objects:
            pods = [p for p in self._workloads() if p.owner is obj]
            if (
                obj["kind"] == "StatefulSet"
                and obj["spec"].get("podManagementPolicy") != "Parallel"
            ):
                ordered.append(pods)
            elif pods:
                self._launch(pods)
        for pods in ordered:  # OrderedReady: one after the other is ready
            threading.Thread(
                target=self._launch_in_order, args=(pods, deadline), daemon=True
            ).start()
        self._wait_ready(self._workloads(), deadline - time.monotonic())
        self._run_hooks("post-install", deadline)

    def _launch_in_order(self, pods: list[Pod], deadline: float) -> None:
        for pod in pods:
            self._launch([pod])
            with contextlib.suppress(AssertionError):
                self._wait_ready([pod], deadline - time.monotonic())

    def _run_hooks(self, hook: str, deadline: float) -> None:
        objects = [o for o in self._objects if hook in _hook(o).split(",")]
        weight = lambda o: int(o["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))  # noqa: E731
        for obj in sorted(objects, key=weight):
            pods = [p for p in self.pods.values() if p.owner is obj]
            self._launch(pods)
            for pod in pods:
                self._wait_done(pod, deadline - time.monotonic())

    def run_tests(self, timeout_s: float) -> dict[str, int]:
        """``helm test``: every test hook Pod run to its end; exit status by Pod name. A Pod
        that fails raises :class:`PodFailed` with its log."""
        results = {}
        deadline = time.monotonic() + timeout_s
        for obj in self._objects:
            if _hook(obj) == "test":
                (pod,) = [p for p in self.pods.values() if p.owner is obj]
                self._launch([pod])
                self._wait_done(pod, deadline - time.monotonic())
                results[pod.name] = 0
        return results

    def stop(self) -> None:
        """SIGTERM every process still running, SIGKILL what is left after a grace period."""
        running = [p for pod in self.pods.values() for p in pod.processes if p.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in running:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' expansion of ``$(VAR)`` in env values, command and args: defined names
    are replaced, undefined references stay as written, ``$$`` is a literal ``$``."""

    def one(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return env.get(match[1], match[0])

    return _VAR_REF.sub(one, text)
