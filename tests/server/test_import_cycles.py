"""No module of server/ takes part in an import cycle: each layer imports only the ones below it
(the database interface no backend, the backends the interface), so any of them can be read,
imported and tested on its own. The imports are read from the source with ``ast``, those inside
functions too (a deferred import is still a cycle, only a hidden one); only an import under
``if TYPE_CHECKING:`` is left out, since it never runs."""

from __future__ import annotations

import ast
from pathlib import Path

from server.config import ROOT


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every module name an import in ``tree`` may load, at any depth but ``if TYPE_CHECKING:``."""
    names: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and type_checking_only(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package this module is in (or is)
                package = module.split(".")
                package = package[: len(package) - node.level + (1 if is_package else 0)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # (a submodule, when it is one)
        pending.extend(ast.iter_child_nodes(node))
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports. Importing ``a.b.c`` runs ``a/b/__init__.py``
    first, so it counts as importing that package too."""
    paths = sorted((root / package).rglob("*.py"))
    modules = {module_name(path, root): path for path in paths}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for name in imported_names(tree, module, path.name == "__init__.py"):
            parts = name.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                if prefix in modules and prefix != module:
                    targets.add(prefix)
        graph[module] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one that imports itself
    (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_server_takes_part_in_an_import_cycle() -> None:
    graph = import_graph(ROOT, "server")
    assert "server.routes.sync" in graph and "server.db" in graph["server.event_store"]  # (the graph is read)
    assert cycles(graph) == []


def test_the_database_interface_imports_no_backend() -> None:
    graph = import_graph(ROOT, "server")
    assert graph["server.db"].isdisjoint({"server.sqlite_db", "server.postgres_db", "server.databases"})
    assert {"server.sqlite_db", "server.postgres_db"} <= graph["server.databases"]


def test_a_cycle_through_a_deferred_import_is_found_and_one_under_type_checking_is_not(tmp_path: Path) -> None:
    """The check itself: the cycle the database layer had (the interface importing its backends
    inside a function, each backend importing the interface) is found; the same import under
    ``if TYPE_CHECKING:`` is not a cycle; a relative import and a package's own imports count."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "db.py").write_text("def open_database():\n    from pkg.backend import Backend\n    return Backend()\n")
    (package / "backend.py").write_text("from pkg.db import Tx\n")
    (package / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.hinted import X\nelse:\n    X = None\n"
    )
    (package / "hinted.py").write_text("import pkg.typed\n")
    (package / "sub" / "__init__.py").write_text("from pkg import walker\n")
    (package / "sub" / "leaf.py").write_text("from . import sibling\n")
    (package / "sub" / "sibling.py").write_text("")
    (package / "walker.py").write_text("import pkg.sub.leaf\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.leaf"] == {"pkg", "pkg.sub", "pkg.sub.sibling"}
    assert cycles(graph) == [["pkg.backend", "pkg.db"], ["pkg.sub", "pkg.sub.leaf", "pkg.walker"]]
