"""``python -m magnetar.functions`` (and ``magnetar functions-worker``): one Functions Worker as
its own process — membership, leadership, the metadata, scheduler and runtime managers, and
its REST API on its own HTTP port — until SIGTERM or SIGINT.

It prints one line to stdout per event, flushed, so a supervising process can follow it::

    joined w1:127.0.0.1:6750      # serving http://127.0.0.1:6750, member of the cluster
    leader 1                      # became leader, term 1
    follower 1                    # lost leadership after term 1

``--port 0`` picks a free port (the joined line names it). The security options are the
brokers' (:mod:`magnetar.auth.server_options`): ``--broker-client-auth-*`` are what the
worker and its instances present to the brokers; with ``--authentication-enabled`` the REST
API checks its callers (:mod:`magnetar.functions.rest_access`). A setting that cannot work, or a
broker that refuses the worker, prints one line to stderr (``error: …``) and exits with
status 2 (settings) or 1 (starting failed).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys

from magnetar.auth.client_credentials import NO_CREDENTIALS, ClientCredentials
from magnetar.auth.config import AuthConfig
from magnetar.auth.server_options import ServerAuthError, add_argparse_options, server_auth_from
from magnetar.common.clock import SystemClock
from magnetar.common.errors import MagnetarError
from magnetar.common.shutdown import stop_requested
from magnetar.functions.leadership import LeadershipChanged
from magnetar.functions.rest import create_worker_app
from magnetar.functions.rest_access import WorkerRestAccess
from magnetar.functions.runtime_manager import RUNTIME_KINDS, RuntimeFactory, runtime_factory
from magnetar.functions.service_slot import ServiceSlot
from magnetar.functions.worker_config import (
    DEFAULT_ASSIGNMENTS_TOPIC,
    DEFAULT_COORDINATION_SUBSCRIPTION,
    DEFAULT_COORDINATION_TOPIC,
    DEFAULT_METADATA_TOPIC,
    DEFAULT_PACKAGE_BYTES_MAX,
    DEFAULT_PACKAGES_TOPIC,
    DEFAULT_RESCHEDULE_GRACE_MS,
    DEFAULT_SCHEDULE_INTERVAL_MS,
    InvalidWorkerConfig,
    WorkerConfig,
)
from magnetar.functions.worker_info import InvalidWorkerInfo, WorkerInfo
from magnetar.functions.worker_service import WorkerService


def add_worker_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worker-id", required=True)
    p.add_argument("--host", default="127.0.0.1", help="address to bind and advertise")
    p.add_argument("--port", type=int, default=6750, help="HTTP port (0: any free port)")
    p.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    p.add_argument("--admin-url", default="http://127.0.0.1:8080")
    p.add_argument("--coordination-topic", default=DEFAULT_COORDINATION_TOPIC)
    p.add_argument("--coordination-subscription", default=DEFAULT_COORDINATION_SUBSCRIPTION)
    p.add_argument("--assignments-topic", default=DEFAULT_ASSIGNMENTS_TOPIC)
    p.add_argument("--metadata-topic", default=DEFAULT_METADATA_TOPIC)
    p.add_argument("--packages-topic", default=DEFAULT_PACKAGES_TOPIC)
    p.add_argument("--work-dir", default="functions-work")
    p.add_argument("--reschedule-grace-ms", type=int, default=DEFAULT_RESCHEDULE_GRACE_MS)
    p.add_argument("--schedule-interval-ms", type=int, default=DEFAULT_SCHEDULE_INTERVAL_MS)
    p.add_argument("--package-bytes-max", type=int, default=DEFAULT_PACKAGE_BYTES_MAX)
    p.add_argument(
        "--runtime",
        choices=RUNTIME_KINDS,
        default="process",
        help="how instances run: one subprocess each (default), or threads of the worker",
    )


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="One Functions Worker with its REST API on its own HTTP port.",
    )
    add_worker_arguments(p)
    add_argparse_options(p)
    return p


def config_from_args(
    args: argparse.Namespace, credentials: ClientCredentials = NO_CREDENTIALS
) -> WorkerConfig:
    """Raises InvalidWorkerConfig / InvalidWorkerInfo."""
    return WorkerConfig(
        worker=WorkerInfo(args.worker_id, args.host, args.port),
        service_url=args.service_url,
        admin_url=args.admin_url,
        coordination_topic=args.coordination_topic,
        coordination_subscription=args.coordination_subscription,
        assignments_topic=args.assignments_topic,
        metadata_topic=args.metadata_topic,
        packages_topic=args.packages_topic,
        work_dir=args.work_dir,
        reschedule_grace_ms=args.reschedule_grace_ms,
        schedule_interval_ms=args.schedule_interval_ms,
        package_bytes_max=args.package_bytes_max,
        client_credentials=credentials,
    )


def _say(line: str) -> None:
    print(line, flush=True)


def _report(change: LeadershipChanged) -> None:
    _say(f"{'leader' if change.is_leader else 'follower'} {change.term}")


async def run_worker(
    config: WorkerConfig, factory: RuntimeFactory | None = None, auth: AuthConfig | None = None
) -> int:
    """Serve HTTP, join, run until SIGTERM/SIGINT. Returns the exit status. ``auth``: what
    the REST API checks of its callers (nothing when None or disabled)."""
    from magnetar.admin.server import (  # a generic ASGI host on this loop
        AdminServer,
        build_route_matching_off_loop,
    )

    slot = ServiceSlot()
    access = None
    if auth is not None and auth.authentication_enabled:
        access = WorkerRestAccess(
            auth,
            admin_url=config.admin_url,
            credentials=config.client_credentials,
            clock=SystemClock(),
        )
    app = create_worker_app(slot, access)
    http = AdminServer(app, config.worker.host, config.worker.port)
    try:
        await http.start()
    except OSError as exc:
        print(f"error: {exc.strerror or exc}", file=sys.stderr)
        return 1
    # the routes' matching is built off the loop while the worker joins, not on the loop by
    # the first request (which would hold the function instances' loop as long)
    route_matching = asyncio.create_task(build_route_matching_off_loop(app))
    worker = dataclasses.replace(
        config.worker, port=http.port
    )  # the bound port, when 0 was asked for
    config = dataclasses.replace(config, worker=worker)
    service = WorkerService(config, runtime_factory=factory)
    service.worker.add_leadership_listener(_report)
    try:
        await service.start()
    except MagnetarError as exc:
        print(f"error: the worker cannot start: {exc}", file=sys.stderr)
        await http.close()
        return 1
    slot.service = service
    _say(f"joined {config.worker.consumer_name}")
    stop = stop_requested()
    try:
        await stop.wait()
    finally:
        slot.service = None
        await service.close()
        await http.close()
        await route_matching  # logs its own failure; done long before a stop, as a rule
    return 0


def main(argv: list[str] | None = None, prog: str = "python -m magnetar.functions") -> int:
    args = _parser(prog).parse_args(argv)
    try:
        security = server_auth_from(vars(args))
        config = config_from_args(args, security.broker_client)
    except (InvalidWorkerConfig, InvalidWorkerInfo, ServerAuthError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(run_worker(config, runtime_factory(args.runtime), security.auth))


if __name__ == "__main__":
    sys.exit(main())
