"""The structure of the code base, read from its source (ast): layers, import cycles, private names, size.

* ``roq`` is the ground floor: it imports no other package of ours.
* The process rooms (``exchange``, ``monitor``, ``gcm``, ``hostmanager``) and the client library import only
  the ground floor: they talk to each other over sockets, never through each other's code.
* ``deploy``, ``roqcli`` and ``simulation`` sit on top, in that order (``simulation`` is the test and benchmark
  harness: nothing product imports it).
* No module imports itself back through others, counting imports inside functions and under
  ``TYPE_CHECKING`` (a cycle hidden there is still a cycle in the design).
* Tests import public names only: no ``_private`` module of ours.
* No class of the product code is longer than :data:`MAX_CLASS_LINES`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("roq", "client", "exchange", "monitor", "gcm", "hostmanager", "deploy", "roqcli", "simulation")
#: package -> the packages of ours it may import
ALLOWED = {
    "roq": set(),
    "client": {"roq"},
    "exchange": {"roq"},
    "monitor": {"roq"},
    "gcm": {"roq"},
    "hostmanager": {"roq"},
    "deploy": {"roq", "roqcli"},
    "roqcli": {"roq", "client", "deploy"},
    "simulation": {"roq", "client", "roqcli", "gcm"},  # gcm: the benchmark of its HTTP code alone (bench_http)
}
MAX_CLASS_LINES = 300


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The modules of ours that ``name`` imports, anywhere in its file."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            # ``from pkg import mod`` imports the module pkg.mod when there is one, else pkg itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_every_package_imports_only_the_layers_below_it():
    wrong = []
    for name, targets in GRAPH.items():
        home = name.split(".")[0]
        for target in targets:
            other = target.split(".")[0]
            if other != home and other not in ALLOWED[home]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycles():
    cycles = []
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(GRAPH[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(GRAPH):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(cycles)


def test_tests_import_no_private_module_of_ours():
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] in PACKAGES and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", [p for p in PACKAGES if p != "simulation"])
def test_no_class_of_the_product_is_a_god_object(package):
    long = []
    for name, path in MODULES.items():
        if name.split(".")[0] != package:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, "\n".join(long)


def test_each_unit_test_module_is_named_after_the_module_it_tests():
    """``tests/unit/test_<package>_<module>.py`` tests ``<package>/<module>.py`` (or ``_<module>.py``)."""
    expected = {"test_" + name.replace("._", "_").replace(".", "_") for name in MODULES}
    whole = {"test_structure", "test_types"}  # checks of the whole code base: its structure, its types
    strays = [p.name for p in sorted((ROOT / "tests" / "unit").glob("test_*.py"))
              if p.stem not in expected and p.stem not in whole]
    assert not strays, f"unit test modules named after no module: {strays}"


def test_kazoo_is_called_in_one_place_and_its_errors_mapped_in_one_boundary():
    """Only roq.zk talks to kazoo (its Session maps every kazoo error to ours); roq.server's boundary names
    kazoo's base exception in case one slips through. Nothing else of the product imports it."""
    allowed = {"roq.zk", "roq.server"}
    users = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m == "kazoo" or m.startswith("kazoo.") for m in modules):
                users.add(name)
    assert users <= allowed, sorted(users - allowed)


def test_a_default_port_or_root_is_written_once():
    """The cluster's default ports and ZooKeeper root are :mod:`roq.defaults`' alone: no other module of ours
    writes them out (a value equal to one, in code; prose may name them)."""
    from roq import defaults

    written = {defaults.ROOT, defaults.ZK, defaults.ZK_PORT, defaults.MANAGEMENT_PORT, defaults.BROADCAST_PORT,
               defaults.HTTP_PORT}
    found = []
    for name, path in MODULES.items():
        if name == "roq.defaults":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and type(node.value) in (str, int) and node.value in written:
                found.append(f"{name}:{node.lineno}: {node.value!r}")
    assert not found, "\n".join(found)
