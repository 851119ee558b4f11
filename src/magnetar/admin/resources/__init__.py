"""The admin domain operations (Pulsar's ``TenantResources``, ``NamespaceResources``,
``TopicResources``): plain async functions over an
:class:`~magnetar.admin.context.AdminContext` (the metadata store, the policy store, the
broker service). The HTTP routes of :mod:`magnetar.admin` parse a request, call one of
them and shape the answer; nothing here knows HTTP, and nothing here imports a route
module, so the operations can be called (and tested) without the web app.

Imports run one way: ``tenants`` → ``namespaces`` → ``topics`` → ``namespace_policies``
(and ``clusters``). Deleting a tenant deletes its namespaces; deleting a namespace deletes
its topics through :func:`~magnetar.admin.resources.topics.delete_namespace_topics`, the one
place that knows where a topic's data lives.

Errors are :class:`~magnetar.admin.errors.RestError` subclasses (each carries the HTTP
status it is answered with: ``ResourceNotFound``, ``Conflict``, ``PreconditionFailed``, …);
errors of lower layers pass through and are mapped by
:func:`~magnetar.admin.errors.http_error`.
"""
