"""``magnetar admin``: the sub-command groups of the admin CLI, one module per domain
(tenants, namespaces, topics, clusters, brokers), over :class:`~magnetar.cli.admin.rest.AdminRest`."""
