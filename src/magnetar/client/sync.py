"""A thin blocking facade over the asyncio client, for scripts.

The asyncio client runs on a private event loop in a background thread; every method here
submits the matching coroutine there and waits for it. Producer, consumer and reader
objects are wrapped the same way; names and arguments are those of the asyncio API
(``send_async`` takes a callback, called on the client's thread)::

    from magnetar.client.sync import Client

    client = Client("pulsar://127.0.0.1:6650")
    producer = client.create_producer("my-topic")
    producer.send(b"hello")
    consumer = client.subscribe("my-topic", "sub")
    msg = consumer.receive(timeout_ms=1000)
    consumer.acknowledge(msg)
    client.close()
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.client import client as aio

T = TypeVar("T")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="magnetar-client", daemon=True
        )
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        async def invoke() -> Any:
            return fn(*args, **kwargs)

        return self.run(invoke())

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class _Blocking:
    """Wraps an asyncio object: coroutine methods block, plain methods run on the loop."""

    def __init__(self, loop: _Loop, target: Any) -> None:
        self._loop = loop
        self._target = target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        loop = self._loop

        def call(*args: Any, **kwargs: Any) -> Any:
            if inspect.iscoroutinefunction(attr):
                return loop.run(attr(*args, **kwargs))
            result = loop.call(attr, *args, **kwargs)
            return None if isinstance(result, asyncio.Future) else result

        return call

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Any:
        while True:
            yield self.receive() if hasattr(self._target, "receive") else self.read_next()


class Client:
    """Blocking client; same constructor arguments as :class:`magnetar.client.Client`."""

    def __init__(self, service_url: str, **kwargs: Any) -> None:
        self._loop = _Loop()

        async def make() -> aio.Client:
            return aio.Client(service_url, **kwargs)

        self._client = self._loop.run(make())

    def create_producer(self, topic: str, **kwargs: Any) -> Any:
        return _Blocking(self._loop, self._loop.run(self._client.create_producer(topic, **kwargs)))

    def subscribe(self, topic: Any, subscription_name: str, **kwargs: Any) -> Any:
        return _Blocking(
            self._loop, self._loop.run(self._client.subscribe(topic, subscription_name, **kwargs))
        )

    def create_reader(self, topic: str, start_message_id: Any, **kwargs: Any) -> Any:
        return _Blocking(
            self._loop,
            self._loop.run(self._client.create_reader(topic, start_message_id, **kwargs)),
        )

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._loop.run(self._client.get_topic_partitions(topic))

    def get_topics_of_namespace(self, namespace: str, mode: Any = None) -> list[str]:
        if mode is None:
            return self._loop.run(self._client.get_topics_of_namespace(namespace))
        return self._loop.run(self._client.get_topics_of_namespace(namespace, mode))

    def close(self) -> None:
        self._loop.run(self._client.close())
        self._loop.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
