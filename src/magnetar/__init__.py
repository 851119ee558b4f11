"""Magnetar: Apache Pulsar's architecture in Python, wire-compatible with Pulsar's clients."""

__version__ = "0.1.0"
