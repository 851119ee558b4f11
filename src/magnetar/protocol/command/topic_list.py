"""Topic-list commands: the topics of a namespace, and watchers of that list.

Field rules: :mod:`magnetar.protocol.command`.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar.common.frozen_struct import frozen_struct
from magnetar.protocol.command.enums import CommandType, TopicsMode


@frozen_struct
class GetTopicsOfNamespace:
    TYPE: ClassVar[CommandType] = CommandType.GET_TOPICS_OF_NAMESPACE
    request_id: int
    namespace: str
    mode: TopicsMode = TopicsMode.PERSISTENT
    topics_pattern: str | None = None
    topics_hash: str | None = None


@frozen_struct
class GetTopicsOfNamespaceResponse:
    TYPE: ClassVar[CommandType] = CommandType.GET_TOPICS_OF_NAMESPACE_RESPONSE
    request_id: int
    topics: tuple[str, ...] = ()
    filtered: bool = False
    topics_hash: str | None = None
    changed: bool = True


@frozen_struct
class WatchTopicList:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST
    request_id: int
    watcher_id: int
    namespace: str
    topics_pattern: str
    topics_hash: str | None = None


@frozen_struct
class WatchTopicListSuccess:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST_SUCCESS
    request_id: int
    watcher_id: int
    topics_hash: str
    topic: tuple[str, ...] = ()


@frozen_struct
class WatchTopicUpdate:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_UPDATE
    watcher_id: int
    topics_hash: str
    new_topics: tuple[str, ...] = ()
    deleted_topics: tuple[str, ...] = ()


@frozen_struct
class WatchTopicListClose:
    TYPE: ClassVar[CommandType] = CommandType.WATCH_TOPIC_LIST_CLOSE
    request_id: int
    watcher_id: int
