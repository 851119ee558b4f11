"""The broker's TLS listener settings: the server-side ``ssl.SSLContext``.

The TLS port serves exactly the binary protocol of the plain port, inside TLS (Pulsar's
``brokerServicePortTls``, URL scheme ``pulsar+ssl://``). The context is built once at start:

* TLS 1.2 or newer only, Python's default (secure) cipher selection;
* the server presents ``tls_cert_file`` (PEM, leaf first, intermediates may follow) with
  ``tls_key_file`` (PEM, unencrypted);
* with ``tls_trust_certs_file`` (PEM CA bundle) a client certificate, when one is sent,
  must chain to it; with ``tls_require_trusted_client_cert`` as well, a client that sends
  none is refused during the handshake (Pulsar's ``tlsRequireTrustedClientCertOnConnect``).
  With the ``tls`` authentication provider, a verified client certificate's CN is the
  client's role (:mod:`magnetar.auth.authentication`).
"""

from __future__ import annotations

import ssl

from magnetar.broker.config import BrokerConfig
from magnetar.common.errors import MagnetarError

TLS_HANDSHAKE_TIMEOUT_S = 10.0
"""A connection that has not finished its handshake by then is dropped (bounds the sockets
a silent or plain-text client can hold)."""


class TlsConfigError(MagnetarError):
    """The TLS settings are incomplete, or a certificate or key file cannot be loaded."""


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The context for the TLS listener of ``config`` (which must have ``tls_port`` set).

    Raises :class:`TlsConfigError` when the certificate or key is missing, unreadable, or
    the key does not match the certificate.
    """
    assert config.tls_port is not None, "TLS listener is off"
    if config.tls_cert_file is None or config.tls_key_file is None:
        raise TlsConfigError("the TLS port needs both tls_cert_file and tls_key_file")
    if config.tls_require_trusted_client_cert and config.tls_trust_certs_file is None:
        raise TlsConfigError("tls_require_trusted_client_cert needs tls_trust_certs_file")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.tls_cert_file), str(config.tls_key_file))
        if config.tls_trust_certs_file is not None:
            ctx.load_verify_locations(cafile=str(config.tls_trust_certs_file))
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the broker's TLS files: {exc}") from exc
    if config.tls_trust_certs_file is not None:
        ctx.verify_mode = (
            ssl.CERT_REQUIRED if config.tls_require_trusted_client_cert else ssl.CERT_OPTIONAL
        )
    return ctx
