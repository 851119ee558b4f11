"""The thread a function's ``process`` runs in: one per instance, so calls run one at a
time in input order, and a **daemon** thread, so a call stuck in user code forever never
holds up the exit of the process hosting it (``ThreadPoolExecutor`` threads are joined at
interpreter exit).

    executor = FunctionThread("fn public/default/wc:0")
    result = await loop.run_in_executor(executor, process, value, context)
    executor.shutdown(wait=False)      # the thread ends after the call in progress
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

_Item = tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None


class FunctionThread(concurrent.futures.Executor):
    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._shutdown = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("the function's thread was shut down")
            self._queue.put((future, lambda: fn(*args, **kwargs)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            self._queue.put(None)
        if wait:
            self._thread.join()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, call = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(call())
            except BaseException as exc:  # handed to the awaiting task, whatever it is
                future.set_exception(exc)
