"""The ledger client imports nothing of the bookie server: it talks to bookies through the
bookie protocol (:mod:`magnetar.bookie_protocol`) and to an in-process bookie through the
``LocalBookie`` seam (:mod:`magnetar.ledger.transport`)."""

from __future__ import annotations

import ast
from pathlib import Path

import magnetar.ledger

LEDGER_DIR = Path(magnetar.ledger.__file__).parent


def _imported_modules(source: str, package: str = "magnetar.ledger") -> set[str]:
    """Every module a module of ``package`` imports, and every ``module.name`` it imports
    from one (a name may be a submodule); relative imports resolved."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            modules.add(module)
            modules.update(f"{module}.{alias.name}" for alias in node.names)
    return modules


def _is_bookie_server(module: str) -> bool:
    return module == "magnetar.bookie" or module.startswith("magnetar.bookie.")


def test_no_ledger_module_imports_the_bookie_server() -> None:
    files = sorted(LEDGER_DIR.glob("*.py"))
    assert len(files) > 5, f"no ledger modules found in {LEDGER_DIR}"
    offenders = {
        f"{path.name}: {module}"
        for path in files
        for module in _imported_modules(path.read_text())
        if _is_bookie_server(module)
    }
    assert offenders == set()


def test_the_check_sees_a_server_import() -> None:
    """The walk finds each spelling of an import of the server (nothing vacuous above)."""
    for source in (
        "import magnetar.bookie.bookie",
        "from magnetar.bookie import Bookie",
        "from magnetar import bookie",
        "from magnetar.bookie.server import Reply",
        "from ..bookie import Bookie",
        "from .. import bookie",
    ):
        assert any(_is_bookie_server(m) for m in _imported_modules(source)), source
    assert not any(
        _is_bookie_server(m)
        for m in _imported_modules("from magnetar.bookie_protocol.codec import Status")
    )
