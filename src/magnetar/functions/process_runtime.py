"""Running an instance as its own process: ``python -m magnetar.functions.instance_main``,
with the interpreter of the package's virtualenv when it has requirements.

The runtime prepares the package first (unpacking, virtualenv, pip) in the worker, then
starts the process and supervises it:

* status: the process keeps ``work_dir/status.json`` current (see
  :mod:`magnetar.functions.instance_main`); :meth:`ProcessRuntime.status` reads it, and says
  ``running`` only while the process is alive. Its stdout and stderr go to
  ``work_dir/instance.log`` (moved to ``instance.log.1`` at a restart once over
  :data:`LOG_FILE_BYTES_MAX`).
* crashes: a process that exits on its own (or is killed) is started again after a
  backoff that doubles up to :class:`RestartBackoff`'s bound; ``numRestarts`` counts them
  and ``error`` says how the last one ended. A package that cannot be imported (exit
  :data:`EXIT_PACKAGE_ERROR`) is not restarted.
* stop: SIGTERM, then SIGKILL after ``stop_timeout_ms``.
* a worker that dies (even by SIGKILL) takes its instance processes with it: each holds the
  read end of a :class:`~magnetar.common.lifeline.Lifeline` pipe whose end-of-file stops
  it, so the instances the leader reassigns elsewhere never run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
from pathlib import Path

from magnetar.common.clock import Clock, SystemClock
from magnetar.common.lifeline import Lifeline
from magnetar.functions.function_loader import PackageError
from magnetar.functions.instance_factory import prepare_instance
from magnetar.functions.instance_main import EXIT_PACKAGE_ERROR, read_status
from magnetar.functions.instance_spec import InstanceSpec
from magnetar.functions.instance_status import InstanceStatus
from magnetar.functions.restart_backoff import RestartBackoff

STOP_TIMEOUT_MS = 5_000
LOG_FILE_BYTES_MAX = 16 * 1024 * 1024
"""An instance log larger than this when the process (re)starts is moved to
``instance.log.1`` (replacing the previous one): two files at most."""
LOG_TAIL_BYTES = 4_096
"""How much of the instance's log a crash report looks at for its last line."""

_log = logging.getLogger(__name__)


class ProcessRuntime:
    """An :class:`~magnetar.functions.instance_spec.InstanceRuntime` as a subprocess."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        backoff: RestartBackoff | None = None,
        stop_timeout_ms: int = STOP_TIMEOUT_MS,
    ) -> None:
        self._clock = clock or SystemClock()
        self._backoff = backoff or RestartBackoff()
        self._stop_timeout_ms = stop_timeout_ms
        self._spec: InstanceSpec | None = None
        self._task: asyncio.Task[None] | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._error = ""
        self._restarts = 0
        self._failed_permanently = False

    @property
    def pid(self) -> int | None:
        """The instance process's id while it runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def exit_code(self) -> int | None:
        """How the last instance process ended (negative: killed by that signal); None
        while it runs or before one ran."""
        proc = self._proc
        return proc.returncode if proc is not None else None

    async def start(self, spec: InstanceSpec) -> None:
        if self._task is not None:
            raise RuntimeError("ProcessRuntime.start called twice")
        self._spec = spec
        self._task = asyncio.create_task(self._supervise(spec), name=f"fn {spec.instance_key}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._terminate()

    @property
    def failed_permanently(self) -> bool:
        """The package could not be prepared or imported: nothing will run until the
        instance is started again with another package."""
        return self._failed_permanently

    def status(self) -> InstanceStatus:
        spec = self._spec
        instance_id = spec.instance_id if spec is not None else -1
        worker_id = spec.worker_id if spec is not None else ""
        reported = read_status(spec.work_dir / "status.json") if spec is not None else None
        alive = self.pid is not None
        if reported is None:
            return InstanceStatus(
                instance_id=instance_id,
                running=False,
                worker_id=worker_id,
                error=self._error,
                num_restarts=self._restarts,
            )
        running = alive and reported.running
        error = reported.error if alive or not self._error else self._error
        return InstanceStatus(
            instance_id=instance_id,
            running=running,
            worker_id=worker_id,
            error="" if running else error,
            num_restarts=self._restarts,
            num_received=reported.num_received,
            num_successfully_processed=reported.num_successfully_processed,
            num_user_exceptions=reported.num_user_exceptions,
            num_system_exceptions=reported.num_system_exceptions,
            latest_user_exceptions=reported.latest_user_exceptions,
            latest_system_exceptions=reported.latest_system_exceptions,
            average_latency_ms=reported.average_latency_ms,
            last_invocation_time_ms=reported.last_invocation_time_ms,
        )

    async def _supervise(self, spec: InstanceSpec) -> None:
        spec_file = spec.work_dir / "spec.json"
        try:
            prepared = await prepare_instance(spec)
            spec_file.touch(mode=0o600)  # it holds the worker's credentials
            spec_file.chmod(0o600)
            spec_file.write_text(json.dumps(spec.to_json()))
        except (PackageError, OSError) as exc:
            self._error = str(exc)
            self._failed_permanently = True
            _log.warning("%s: %s", spec.instance_key, exc)
            return
        status_file = spec.work_dir / "status.json"
        log_file = spec.work_dir / "instance.log"
        argv = [
            str(prepared.python), "-m", "magnetar.functions.instance_main",
            "--spec", str(spec_file), "--status", str(status_file),
        ]  # fmt: skip
        if prepared.root is not None:
            argv += ["--package-root", str(prepared.root)]
        if prepared.venv is not None:
            argv += ["--venv", str(prepared.venv)]
        attempt = 0
        while True:
            status_file.unlink(missing_ok=True)
            _rotate(log_file)
            lifeline = Lifeline()
            try:
                try:
                    with log_file.open("ab") as log:
                        self._proc = await asyncio.create_subprocess_exec(
                            *argv, "--lifeline-fd", str(lifeline.child_fd),
                            stdin=asyncio.subprocess.DEVNULL,
                            stdout=log,
                            stderr=log,
                            start_new_session=True,
                            pass_fds=(lifeline.child_fd,),
                        )  # fmt: skip
                except OSError as exc:
                    self._error = f"could not start {argv[0]}: {exc}"
                    self._failed_permanently = True
                    return
                lifeline.child_started()
                code = await self._proc.wait()
            finally:
                # Also when this task is cancelled (stop): _terminate still has the process
                # object, and the child, seeing end-of-file, stops as on SIGTERM.
                lifeline.close()
            reported = read_status(status_file)
            if code == EXIT_PACKAGE_ERROR:
                self._error = (
                    reported.error if reported is not None else "the package failed to load"
                )
                self._failed_permanently = True
                return
            if code < 0:
                self._error = f"instance process killed by signal {-code}"
            else:
                # It failed by itself: its own report, else the last line it wrote (the
                # end of a traceback, usually).
                last = reported.error if reported is not None and reported.error else ""
                last = last or _last_line(log_file)
                self._error = f"instance process exited with status {code}" + (
                    f": {last}" if last else ""
                )
            _log.warning("%s: %s", spec.instance_key, self._error)
            self._restarts += 1
            delay_ms = self._backoff.delay_ms(attempt)
            attempt += 1
            await self._clock.sleep(delay_ms / 1000)

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self._stop_timeout_ms / 1000)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()


def _rotate(log_file: Path) -> None:
    try:
        if log_file.stat().st_size > LOG_FILE_BYTES_MAX:
            log_file.replace(log_file.with_name(log_file.name + ".1"))
    except FileNotFoundError:
        pass


def _last_line(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - LOG_TAIL_BYTES))
            lines = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
