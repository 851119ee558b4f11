"""Magnetar's asyncio Pulsar client (work in progress: sans-IO cores first)."""

from magnetar.client.message_id import MessageId

__all__ = ["MessageId"]
