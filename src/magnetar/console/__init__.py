"""The web console served by every broker at ``/`` (see docs/console.md)."""
