"""``builtin://webhook`` (also ``http``): a sink that POSTs each message to a URL.

Settings (``--sink-config``): ``url`` (required, ``http://`` or ``https://``), ``method``
(default ``POST``; ``PUT`` also), ``headers`` (an object of extra headers), ``contentType``
(default ``application/octet-stream``), ``timeoutMs`` (per request, default 10000),
``maxRetries`` (default 5), ``retryBackoffMs`` (default 100, doubling per retry up to
``retryBackoffMaxMs``, default 5000).

The body is the message's bytes; headers ``X-Pulsar-Topic``, ``X-Pulsar-Message-Id`` (the
id's text form), ``X-Pulsar-Key`` (when it has a key) and ``X-Pulsar-Property-<name>``
come with it. A 2xx answer writes the message. A connection error, a timeout, a 429 or a
5xx is retried after the backoff; any other answer, or the retries running out, raises, so
the input is negatively acknowledged and delivered again later (or goes to the dead-letter
topic after ``maxMessageRetries``): nothing is lost, and a receiver may see a message more
than once.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from magnetar.functions.connectors.connector import InvalidConnectorConfig, setting

RETRIES_MAX = 100
RESPONSE_BYTES_MAX = 64 * 1024
"""How much of an answer is read (only to keep the connection usable and quote errors)."""


class WebhookError(Exception):
    """The message could not be delivered; the message says what the receiver answered."""


class WebhookSink:
    def __init__(
        self, config: Mapping[str, Any], *, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self._url = setting(config, "url", str)
        parsed = urlparse(self._url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise InvalidConnectorConfig(f"url: must be an http:// or https:// URL: {self._url!r}")
        self._method = setting(config, "method", str, "POST").upper()
        if self._method not in ("POST", "PUT"):
            raise InvalidConnectorConfig("method: must be POST or PUT")
        headers = setting(config, "headers", dict, {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise InvalidConnectorConfig("headers: must map names to strings")
        self._headers: dict[str, str] = dict(headers)
        self._headers.setdefault(
            "Content-Type", setting(config, "contentType", str, "application/octet-stream")
        )
        self._timeout_ms = setting(config, "timeoutMs", int, 10_000)
        self._retries = setting(config, "maxRetries", int, 5)
        self._backoff_ms = setting(config, "retryBackoffMs", int, 100)
        self._backoff_max_ms = setting(config, "retryBackoffMaxMs", int, 5_000)
        if self._timeout_ms <= 0:
            raise InvalidConnectorConfig("timeoutMs: must be positive")
        if not 0 <= self._retries <= RETRIES_MAX:
            raise InvalidConnectorConfig(f"maxRetries: must be 0..{RETRIES_MAX}")
        if self._backoff_ms < 0 or self._backoff_max_ms < self._backoff_ms:
            raise InvalidConnectorConfig(
                "retryBackoffMs, retryBackoffMaxMs: need 0 <= retryBackoffMs <= retryBackoffMaxMs"
            )
        self._sleep = sleep

    def process(self, value: Any, context: Any) -> None:
        body = value.encode("utf-8") if isinstance(value, str) else bytes(value)
        headers = dict(self._headers)
        topic = context.get_current_message_topic_name()
        if topic:
            headers["X-Pulsar-Topic"] = topic
        message_id = context.get_message_id()
        if message_id is not None:
            headers["X-Pulsar-Message-Id"] = str(message_id)
        key = context.get_message_key()
        if key:
            headers["X-Pulsar-Key"] = key
        for name, prop in context.get_message_properties().items():
            headers[f"X-Pulsar-Property-{name}"] = prop
        delay_ms = self._backoff_ms
        attempt = 0
        while True:
            retriable, error = self._post(body, headers)
            if error is None:
                return
            if not retriable or attempt >= self._retries:
                tries = attempt + 1
                raise WebhookError(f"{self._method} {self._url}: {error} ({tries} attempt(s))")
            attempt += 1
            self._sleep(delay_ms / 1000)
            delay_ms = min(self._backoff_max_ms, max(1, delay_ms * 2))

    def _post(self, body: bytes, headers: dict[str, str]) -> tuple[bool, str | None]:
        """(retriable, error), error None when delivered."""
        request = urllib.request.Request(self._url, body, headers, method=self._method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_ms / 1000) as resp:
                resp.read(RESPONSE_BYTES_MAX)
                return False, None
        except urllib.error.HTTPError as exc:
            detail = exc.read(200).decode(errors="replace").strip()
            text = f"HTTP {exc.code}" + (f": {detail}" if detail else "")
            return exc.code == 429 or exc.code >= 500, text
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return True, f"{type(reason).__name__}: {reason}"
