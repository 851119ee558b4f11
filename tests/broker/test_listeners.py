"""Advertised listeners: parsing Pulsar's ``advertisedListeners`` format and its rules, and
the wire error of a missing listener (end to end: tests/compat/test_advertised_listeners.py)."""

from __future__ import annotations

import pytest

from magnetar.broker.listeners import (
    NO_LISTENERS,
    AdvertisedListener,
    ListenerConfigError,
    parse_advertised_listeners,
)
from magnetar.common.errors import (
    ListenerNotFound,
    ServerError,
    ServiceNotReady,
    error_for_code,
    wire_error,
)


def test_listeners_in_order_with_the_first_as_internal() -> None:
    got = parse_advertised_listeners(
        " internal:pulsar://10.0.0.5:6650, internal:pulsar+ssl://10.0.0.5:6651,"
        "external:pulsar://broker.example.com:16650"
    )
    assert got.listeners == (
        AdvertisedListener("internal", "pulsar://10.0.0.5:6650", "pulsar+ssl://10.0.0.5:6651"),
        AdvertisedListener("external", "pulsar://broker.example.com:16650", None),
    )
    assert got.names == ("internal", "external")
    assert got.internal_name == "internal"
    assert got.internal == got.listeners[0]
    assert got.require("external").broker_service_url == "pulsar://broker.example.com:16650"


def test_internal_listener_can_be_named() -> None:
    got = parse_advertised_listeners("a:pulsar://h:1,b:pulsar://h:2", "b")
    assert got.internal == AdvertisedListener("b", "pulsar://h:2")


def test_http_urls_are_accepted_and_not_used() -> None:
    got = parse_advertised_listeners("a:pulsar://h:1,a:http://h:8080")
    assert got.listeners == (AdvertisedListener("a", "pulsar://h:1"),)


@pytest.mark.parametrize("text", [None, "", "  ", ","])
def test_nothing_configured_means_no_listeners(text: str | None) -> None:
    got = parse_advertised_listeners(text)
    assert got == NO_LISTENERS
    assert not got and got.internal is None


def test_a_missing_listener_is_pulsars_service_not_ready() -> None:
    for listeners in (NO_LISTENERS, parse_advertised_listeners("a:pulsar://h:1")):
        with pytest.raises(ListenerNotFound) as caught:
            listeners.require("test")
        assert wire_error(caught.value) == (
            ServerError.ServiceNotReady,
            "the broker do not have test listener",
        )


def test_the_wire_error_comes_back_as_listener_not_found_and_is_final() -> None:
    err = error_for_code(ServerError.ServiceNotReady, "the broker do not have x listener")
    assert isinstance(err, ListenerNotFound) and not err.retriable
    other = error_for_code(ServerError.ServiceNotReady, "topic is being unloaded")
    assert type(other) is ServiceNotReady and other.retriable


@pytest.mark.parametrize(
    ("text", "internal", "words"),
    [
        ("pulsar://h:1", None, "no listener name"),
        (":pulsar://h:1", None, "no listener name"),
        ("a", None, "no listener name"),
        ("a:pulsar://h:1,b:pulsar://h:1", None, "h:1 is given to two advertised listeners"),
        ("a:pulsar://h:1,b:pulsar+ssl://h:1", None, "given to two advertised listeners"),
        ("a:pulsar://h:1,a:pulsar://h:2", None, "more than one pulsar:// URL"),
        ("a:pulsar+ssl://h:1,a:pulsar+ssl://h:2", None, "more than one pulsar+ssl:// URL"),
        ("a:pulsar://h:1,a:pulsar+ssl://h:2,a:http://h:3", None, "has 3 URLs"),
        ("a:pulsar+ssl://h:1", None, "has no pulsar:// URL"),
        ("a:kafka://h:1", None, "is not pulsar:// or pulsar+ssl://"),
        ("a:pulsar://h", None, "is not scheme://host:port"),
        ("a:pulsar://:1", None, "is not scheme://host:port"),
        ("a:pulsar://h:1/path", None, "is not scheme://host:port"),
        ("a:pulsar://h:99999", None, "bad URL"),
        ("a:pulsar://h:1", "b", "internal listener 'b' is not among"),
        (None, "b", "no advertised listeners"),
    ],
)
def test_rules(text: str | None, internal: str | None, words: str) -> None:
    with pytest.raises(ListenerConfigError, match=words.replace("+", r"\+")):
        parse_advertised_listeners(text, internal)
