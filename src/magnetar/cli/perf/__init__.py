"""``magnetar perf``: load generators and their measurements (mirrors ``pulsar-perf``).

Sans-IO parts: :mod:`~magnetar.cli.perf.histogram` (latency percentiles),
:mod:`~magnetar.cli.perf.meter` (throughput windows and the summary). Asyncio shells:
:mod:`~magnetar.cli.perf.produce`, :mod:`~magnetar.cli.perf.consume`; printing in
:mod:`~magnetar.cli.perf.report`.
"""
