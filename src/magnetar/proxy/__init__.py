"""``magnetar proxy``: Pulsar's proxy, one address for clients outside a cluster.

* :mod:`.handshake` — sans-IO: the first frame of a connection read whole (what follows it
  kept as raw bytes), the CONNECT the proxy sends a broker, the broker address a client
  asks for.
* :mod:`.discovery` — the live brokers: from the metadata store's registrations, or static
  URLs; which broker addresses a client may be forwarded to.
* :mod:`.broker_link` — one connection from the proxy to a broker: the handshake, then either
  request/response (lookups) or raw bytes piped to a client connection.
* :mod:`.binary_proxy` — the client side of the binary protocol: CONNECT (authenticated
  here), lookups and other requests answered through a broker, or the connection forwarded
  to the owner broker named by ``proxy_to_broker_url`` and piped both ways.
* :mod:`.http_proxy` — the admin REST API forwarded to a broker, lookups over HTTP, the
  proxy's ``/metrics``, ``/ready``, ``/status.html`` and ``/proxy-stats/connections``.
* :mod:`.stats` — counters and the open connections, for the metrics and stats pages.
* :mod:`.server` — the process: the listeners and the discovery, started and stopped.

docs/proxy.md describes the behaviour and the settings.
"""
