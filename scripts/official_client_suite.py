"""Runs the official Python client's own test suite (apache/pulsar-client-python, ``tests/``)
against a Magnetar standalone set up as that suite's CI sets up its broker
(``build-support/start-test-service-inside-container.sh``: TLS on 6651 with the suite's
certificates, token, basic and TLS authentication, the anonymous role, authorization, the
super users, the ``public/default``, ``public/default-2`` and ``private/auth`` namespaces).

    .venv/bin/python scripts/official_client_suite.py /path/to/pulsar-client-python [pytest args]

The checkout is the suite's own (e.g. ``git worktree add`` of tag v3.13.0-candidate-1); nothing
of it is copied here. The suite wants the ports 6650, 6651, 8080 and 8443 on localhost. Prints
pytest's summary and exits with its status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from magnetar.auth.tokens import create_token, new_secret_key
from magnetar.testing import StandaloneProcess

SUITE_FILES = [
    "pulsar_test.py",
    "schema_test.py",
    "reader_test.py",
    "asyncio_test.py",
    "table_view_test.py",
    "custom_logger_test.py",
    "debug_logger_test.py",
    "interrupted_test.py",
]


def _request(method: str, url: str, token: str, body: object) -> int:
    """The HTTP status of one admin request (errors included)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method=method)
    request.add_header("Content-Type", "application/json")
    request.add_header("Authorization", f"Bearer {token}")
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def _put(url: str, token: str, body: dict[str, object]) -> None:
    """Creates the resource, or (it exists: the standalone makes the defaults) brings it to
    the state the CI script's PUT describes: tenant admins updated, namespace grants added."""
    status = _request("PUT", url, token, body)
    if status < 300:
        return
    if status != 409:
        raise RuntimeError(f"PUT {url}: HTTP {status}")
    if "/tenants/" in url:
        status = _request("POST", url, token, body)
    elif "/namespaces/" in url:
        grants = body.get("auth_policies", {}).get("namespace_auth", {})  # type: ignore[attr-defined]
        for role, actions in grants.items():
            status = _request("POST", f"{url}/permissions/{role}", token, actions)
            if status >= 300:
                break
    else:
        status = _request("POST", url, token, body)
    if status >= 300:
        raise RuntimeError(f"updating {url}: HTTP {status}")


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    tests = Path(argv[0]).resolve() / "tests"
    conf = tests / "test-conf"
    if not (conf / "broker-cert.pem").is_file():
        print(f"{tests}: not the pulsar-client-python suite's tests directory", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="pcp-suite-"))
    key = work / "secret.key"
    key.write_bytes(new_secret_key())
    (tests / ".test-token.txt").write_text(
        create_token("token-principal", secret_key=key.read_bytes())
    )
    superuser = create_token("superUser", secret_key=key.read_bytes())
    args = [
        "--port", "6650", "--http-port", "8080", "--tls-port", "6651", "--https-port", "8443",
        "--advertised-address", "localhost",
        "--tls-cert-file", str(conf / "broker-cert.pem"),
        "--tls-key-file", str(conf / "broker-key.pem"),
        "--tls-trust-certs-file", str(conf / "cacert.pem"),
        "--authentication-enabled", "--authentication-providers", "tls,token,basic",
        "--token-secret-key", f"file://{key}", "--basic-auth-conf", str(conf / ".htpasswd"),
        "--anonymous-user-role", "anonymous", "--authorization-enabled",
        "--super-user-roles", "localhost,superUser,admin",
        "--max-message-size", "1024000", "--no-functions-worker",
    ]  # fmt: skip
    with StandaloneProcess(work / "data", *args) as node:
        admin = f"{node.http_url}/admin/v2"
        _put(f"{admin}/clusters/standalone", superuser, {
            "serviceUrl": "http://localhost:8080/", "serviceUrlTls": "https://localhost:8443/",
            "brokerServiceUrl": "pulsar://localhost:6650/",
            "brokerServiceUrlTls": "pulsar+ssl://localhost:6651/",
        })  # fmt: skip
        _put(f"{admin}/tenants/public", superuser,
             {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]})  # fmt: skip
        for ns in ("public/default", "public/default-2"):
            _put(f"{admin}/namespaces/{ns}", superuser, {
                "auth_policies": {"namespace_auth": {"anonymous": ["produce", "consume"]}},
                "replication_clusters": ["standalone"],
            })  # fmt: skip
        _put(
            f"{admin}/tenants/private",
            superuser,
            {"adminRoles": [], "allowedClusters": ["standalone"]},
        )
        _put(f"{admin}/namespaces/private/auth", superuser, {
            "auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]}},
            "replication_clusters": ["standalone"],
        })  # fmt: skip
        files = [f for f in SUITE_FILES if (tests / f).is_file()]
        return subprocess.call(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files, *argv[1:]],
            cwd=tests,
        )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
