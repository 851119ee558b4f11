from magnetar.common.errors import (
    MagnetarError,
    ProducerFenced,
    ServerError,
    ServiceNotReady,
    TopicNotFound,
    error_for_code,
    wire_error,
)


def test_every_wire_code_round_trips_through_its_class() -> None:
    for code in ServerError:
        err = error_for_code(code, "m")
        assert isinstance(err, MagnetarError)
        assert str(err) == "m"
        if type(err) is not MagnetarError:
            assert err.code == code


def test_flags_drive_retry_decisions() -> None:
    assert ServiceNotReady.retriable and ServiceNotReady.refresh_lookup
    # what a broker answers while failing over; Pulsar's Java client retries all three
    for code in (
        ServerError.MetadataError,
        ServerError.PersistenceError,
        ServerError.ServiceNotReady,
    ):
        assert error_for_code(code, "session 0x1 is lost").retriable, code
    assert not TopicNotFound.retriable
    assert wire_error(ProducerFenced("fenced")) == (ServerError.ProducerFenced, "fenced")
    assert wire_error(RuntimeError("x"))[0] == ServerError.UnknownError


def test_unknown_code_is_a_plain_magnetar_error() -> None:
    assert type(error_for_code(999, "?")) is MagnetarError
