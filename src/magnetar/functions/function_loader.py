"""Packages: from the file a function was deployed with to a callable.

Two steps, so the process runtime can run the slow one before it starts the instance:

* :func:`prepare_package` (async; may take minutes) — a ``.py`` file or a module directory
  is used where it is; a ``.zip`` is unpacked into ``work_dir/package`` (members that would
  land outside it, and archives over :data:`PACKAGE_UNPACKED_BYTES_MAX`, are refused); a
  ``.whl`` is installed. When the package holds ``requirements.txt`` (at its root) or wheels
  under ``deps/`` — or is a wheel — a virtualenv is made at ``work_dir/venv``
  (``python -m venv --system-site-packages``, plus a ``.pth`` file naming this interpreter's
  own import path, so ``magnetar`` and ``pulsar`` stay importable) and pip installs into it.
* :func:`load_function` — imports ``class_name`` (``module.Class`` or ``module.function``).
  A class is instantiated without arguments and called as ``process(input, context)``
  (``pulsar.Function`` subclasses included); any other callable is a plain function and is
  called with the input alone.

Every failure raises :class:`PackageError` with one line saying what is wrong (the runtime
shows it as the instance's ``status().error``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import os
import shutil
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from magnetar.functions.errors import FunctionsWorkerError

PACKAGE_UNPACKED_BYTES_MAX = 512 * 1024 * 1024
"""The most a zip package may unpack to."""
PACKAGE_MEMBERS_MAX = 100_000
INSTALL_TIMEOUT_MS = 600_000
"""Bound on making the virtualenv and on each pip run."""
INSTALL_OUTPUT_TAIL_CHARS = 600
"""How much of pip's output a failed install quotes."""


class PackageError(FunctionsWorkerError):
    """The package cannot run: missing, malformed, a failed install, an import error."""


@dataclass(frozen=True, slots=True)
class PreparedPackage:
    """Where to import from: ``root`` (a directory put first on ``sys.path``, or None for
    an installed wheel) and the virtualenv, if one was made."""

    root: Path | None
    venv: Path | None = None

    @property
    def python(self) -> Path:
        """The interpreter that sees the package's requirements."""
        return self.venv / "bin" / "python" if self.venv is not None else Path(sys.executable)

    def site_packages(self) -> Path | None:
        if self.venv is None:
            return None
        return Path(
            sysconfig.get_path("purelib", vars={"base": str(self.venv), "platbase": str(self.venv)})
        )


async def prepare_package(package: Path | None, work_dir: Path) -> PreparedPackage:
    """Make ``package`` importable (see the module's docstring). Raises PackageError."""
    if package is None:
        raise PackageError("no package: the instance has no code to run")
    if not package.exists():
        raise PackageError(f"package {package} does not exist")
    work_dir.mkdir(parents=True, exist_ok=True)
    if package.is_dir():
        return await _with_requirements(package, work_dir)
    suffix = package.suffix.lower()
    if suffix == ".py":
        return PreparedPackage(package.parent)
    if suffix == ".whl":
        venv = await _make_venv(work_dir)
        await _pip(venv, [str(package)])
        return PreparedPackage(None, venv)
    if suffix == ".zip" or zipfile.is_zipfile(package):
        root = await asyncio.to_thread(_unzip, package, work_dir / "package")
        return await _with_requirements(root, work_dir)
    raise PackageError(f"package {package.name}: not a .py file, a directory, a .zip or a .whl")


async def _with_requirements(root: Path, work_dir: Path) -> PreparedPackage:
    requirements = root / "requirements.txt"
    deps = sorted((root / "deps").glob("*.whl")) if (root / "deps").is_dir() else []
    if not requirements.is_file() and not deps:
        return PreparedPackage(root)
    venv = await _make_venv(work_dir)
    if deps:
        await _pip(venv, [str(d) for d in deps])
    if requirements.is_file():
        await _pip(venv, ["-r", str(requirements)])
    return PreparedPackage(root, venv)


def _unzip(package: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    try:
        with zipfile.ZipFile(package) as archive:
            members = archive.infolist()
            if len(members) > PACKAGE_MEMBERS_MAX:
                raise PackageError(f"package {package.name}: more than {PACKAGE_MEMBERS_MAX} files")
            if sum(m.file_size for m in members) > PACKAGE_UNPACKED_BYTES_MAX:
                raise PackageError(
                    f"package {package.name}: unpacks to more than {PACKAGE_UNPACKED_BYTES_MAX} bytes"
                )
            base = target.resolve()
            for member in members:
                dest = (target / member.filename).resolve()
                if not dest.is_relative_to(base):
                    raise PackageError(
                        f"package {package.name}: member {member.filename!r} is outside the package"
                    )
            archive.extractall(target)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
        raise PackageError(f"package {package.name} is not a readable zip: {exc}") from None
    entries = [p for p in target.iterdir() if p.name != "__MACOSX"]
    # A zip of one folder (as `zip -r pkg.zip pkg/` makes): the folder is the root.
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return target


async def _make_venv(work_dir: Path) -> Path:
    venv = work_dir / "venv"
    if (venv / "bin" / "python").exists():
        return venv
    await _run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
        "making the virtualenv",
    )
    purelib = PreparedPackage(None, venv).site_packages()
    assert purelib is not None
    purelib.mkdir(parents=True, exist_ok=True)
    # The venv's own packages come first; then everything this interpreter imports from
    # (a virtualenv made from a virtualenv does not see its parent's packages otherwise).
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    (purelib / "_magnetar_parent.pth").write_text("\n".join(paths) + "\n")
    return venv


async def _pip(venv: Path, args: list[str]) -> None:
    await _run(
        [
            sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
            "install", "--disable-pip-version-check", "--no-input", *args,
        ],
        "installing the requirements",
    )  # fmt: skip


async def _run(argv: list[str], what: str) -> None:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        raise PackageError(f"{what} failed: {exc}") from None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), INSTALL_TIMEOUT_MS / 1000)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise PackageError(f"{what} took longer than {INSTALL_TIMEOUT_MS} ms") from None
    if proc.returncode != 0:
        text = out.decode(errors="replace").strip()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "ERROR" in ln] or lines[-3:]
        tail = " | ".join(errors)[-INSTALL_OUTPUT_TAIL_CHARS:]
        raise PackageError(f"{what} failed (exit {proc.returncode}): {tail}")


# ---------------------------------------------------------------- importing

ProcessFn = Callable[[Any, Any], Any]
"""``(input, context) -> output``."""


def activate(prepared: PreparedPackage) -> None:
    """Put the package (and its virtualenv's packages) on this interpreter's import path."""
    site_packages = prepared.site_packages()
    if site_packages is not None and str(site_packages) not in sys.path:
        sys.path.insert(0, str(site_packages))
    if prepared.root is not None and str(prepared.root) not in sys.path:
        sys.path.insert(0, str(prepared.root))


def load_function(prepared: PreparedPackage, class_name: str | None) -> ProcessFn:
    """Import ``class_name`` from the prepared package. Raises PackageError."""
    if not class_name:
        raise PackageError("className: missing (module.Class or module.function)")
    module_name, _, attr = class_name.rpartition(".")
    if not module_name or not attr:
        raise PackageError(f"className {class_name!r}: expected module.Class or module.function")
    activate(prepared)
    try:
        module = _import(prepared.root, module_name)
        target = getattr(module, attr)
    except AttributeError:
        raise PackageError(f"className {class_name!r}: module has no {attr!r}") from None
    except (Exception, SystemExit) as exc:  # user code at import: sys.exit() included
        raise PackageError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    if inspect.isclass(target):
        try:
            obj = target()
        except (Exception, SystemExit) as exc:
            raise PackageError(f"{class_name}(): {type(exc).__name__}: {exc}") from None
        process = getattr(obj, "process", None)
        if not callable(process):
            raise PackageError(f"{class_name} has no process(input, context) method")
        return process  # type: ignore[no-any-return]
    if callable(target):
        return lambda value, _context: target(value)
    raise PackageError(f"className {class_name!r} is neither a class nor a function")


def _import(root: Path | None, module_name: str) -> ModuleType:
    """Import ``module_name``, fresh from ``root`` when it is there: two functions of one
    worker (thread runtime) may each ship their own module of the same name."""
    if root is not None and "." not in module_name:
        parts = [module_name]
        base = root.joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                spec = importlib.util.spec_from_file_location(
                    module_name,
                    candidate,
                    submodule_search_locations=[str(base)]
                    if candidate.name == "__init__.py"
                    else None,
                )
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_name] = module
                spec.loader.exec_module(module)
                return module
    return importlib.import_module(module_name)
