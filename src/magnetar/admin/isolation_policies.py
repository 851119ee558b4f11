"""Namespace isolation policies of a cluster (Pulsar's ``ns-isolation-policy``):
``/admin/v2/clusters/{cluster}/namespaceIsolationPolicies[/{policy}]``.

* ``GET …/namespaceIsolationPolicies`` — ``{name: NamespaceIsolationData}``;
* ``GET …/{policy}`` — one policy (404 when there is none of that name);
* ``POST …/{policy}`` body ``NamespaceIsolationData`` — set (create or replace); 400 for a
  body that cannot work (:class:`~magnetar.broker.controller.isolation.InvalidIsolationPolicy`);
* ``DELETE …/{policy}`` — remove (204 also when there was none).

Stored in one node per cluster (:func:`~magnetar.broker.controller.isolation
.isolation_policies_path`), written with compare-and-set; the controller reads it and
obeys it in every bundle assignment (semantics in :mod:`magnetar.broker.controller
.isolation`). Super users only (no tenant in the path).
"""

from __future__ import annotations

import json

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from magnetar.admin.context import AdminContext
from magnetar.admin.errors import BadRequest, Conflict, ResourceNotFound
from magnetar.admin.request_body import read_json
from magnetar.admin.resources.clusters import CLUSTERS_ROOT
from magnetar.admin.responses import json_response, no_content
from magnetar.broker.controller.isolation import (
    POLICIES_MAX,
    POLICY_NAME_CHARS_MAX,
    InvalidIsolationPolicy,
    IsolationPolicy,
    isolation_policies_path,
)
from magnetar.metadata.store import MUST_NOT_EXIST, BadVersion, NodeExists, NotFound

WRITE_ATTEMPTS_MAX = 5
"""Compare-and-set attempts of one change against concurrent writers."""
BASE = "/admin/v2/clusters/{cluster}/namespaceIsolationPolicies"


def router(ctx: AdminContext) -> APIRouter:
    r = APIRouter(tags=["clusters"])

    async def check_cluster(cluster: str) -> None:
        if cluster != ctx.cluster and await ctx.store.exists(f"{CLUSTERS_ROOT}/{cluster}") is None:
            raise ResourceNotFound("Cluster does not exist")

    def check_policy_name(name: str) -> None:
        if not name or len(name) > POLICY_NAME_CHARS_MAX or "/" in name:
            raise BadRequest(f"policy name {name[:40]!r}: 1 to {POLICY_NAME_CHARS_MAX} characters")

    async def read(cluster: str) -> tuple[dict[str, object], int]:
        """The stored map (raw JSON values) and its version (MUST_NOT_EXIST: none)."""
        try:
            got = await ctx.store.get(isolation_policies_path(cluster))
        except NotFound:
            return {}, MUST_NOT_EXIST
        try:
            body = json.loads(got.value) if got.value.strip() else {}
        except ValueError:
            body = {}
        return (body if isinstance(body, dict) else {}), got.stat.version

    async def change(cluster: str, name: str, policy: IsolationPolicy | None) -> None:
        path = isolation_policies_path(cluster)
        for _ in range(WRITE_ATTEMPTS_MAX):
            policies, version = await read(cluster)
            if policy is None:
                if name not in policies:
                    return
                policies.pop(name)
            else:
                if name not in policies and len(policies) >= POLICIES_MAX:
                    raise BadRequest(f"a cluster holds at most {POLICIES_MAX} isolation policies")
                policies[name] = policy.to_json()
            try:
                await ctx.store.put(path, json.dumps(policies).encode(), version)
                return
            except (BadVersion, NodeExists, NotFound):
                continue  # another writer came first: read again
        raise Conflict("the isolation policies kept changing under this request; try again")

    @r.get(BASE, summary="A cluster's namespace isolation policies")
    async def list_policies(cluster: str) -> Response:
        await check_cluster(cluster)
        return json_response((await read(cluster))[0])

    @r.get(BASE + "/{policy}", summary="One namespace isolation policy")
    async def get_policy(cluster: str, policy: str) -> Response:
        await check_cluster(cluster)
        found = (await read(cluster))[0].get(policy)
        if found is None:
            raise ResourceNotFound(f"NamespaceIsolationPolicy {policy} could not be found")
        return json_response(found)

    @r.post(BASE + "/{policy}", summary="Set a namespace isolation policy")
    async def set_policy(cluster: str, policy: str, request: Request) -> Response:
        await check_cluster(cluster)
        check_policy_name(policy)
        try:
            parsed = IsolationPolicy.from_json(await read_json(request))
        except InvalidIsolationPolicy as exc:
            raise BadRequest(str(exc)) from None
        await change(cluster, policy, parsed)
        return no_content()

    @r.delete(BASE + "/{policy}", summary="Delete a namespace isolation policy")
    async def delete_policy(cluster: str, policy: str) -> Response:
        await check_cluster(cluster)
        await change(cluster, policy, None)
        return no_content()

    return r
