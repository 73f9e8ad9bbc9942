"""The structure of the code base, read from its source (ast): layers, import cycles, private names, size.

* ``roq`` is the ground floor: it imports no other package of ours.
* The process rooms (``exchange``, ``monitor``, ``gcm``, ``hostmanager``) and the client library import only
  the ground floor: they talk to each other over sockets, never through each other's code.
* ``deploy``, ``roqcli`` and ``simulation`` sit on top, in that order (``simulation`` is the test and benchmark
  harness: nothing product imports it).
* No module imports itself back through others, counting imports inside functions and under
  ``TYPE_CHECKING`` (a cycle hidden there is still a cycle in the design).
* A unit test imports the internals of the package it tests and public names of the others; every other test
  imports public names only. The process packages export their process, its settings and ``main``
  (:data:`MAX_PROCESS_EXPORTS`).
* Cohesion: no module function takes the module's own class (one with methods) as its first parameter, unless
  :data:`FREE_FUNCTIONS` says why (a method exiled to keep a class short is still that class's); nothing
  writes through two attributes into another object (``a.b.c = ...``: ask ``a.b`` to do it). The largest
  classes are printed at the end of every run (a signal, not a failure: :func:`largest_classes`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path


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
#: names a process package exports at most: its process, its settings, ``main``, and what tools read of its files
MAX_PROCESS_EXPORTS = 6
PROCESS_PACKAGES = ("exchange", "exchange.journal", "monitor", "gcm", "hostmanager", "client.link")
#: the product's packages (``simulation`` is the harness)
PRODUCT = tuple(p for p in PACKAGES if p != "simulation")
#: module functions that take their module's class first, and why they are functions
FREE_FUNCTIONS = {
    "roq.wire.control.codec.encode": "the codec's one entry point for every message, as bson.encode is",
    "roqcli.kpi.capacity.estimate": "a pure function of a record of sums that Spark ships as data",
    "roqcli.kpi.capacity._cpu_capacity": "(estimate's)",
    "roqcli.kpi.capacity._fit": "(estimate's)",
    "roqcli.kpi.capacity._link": "(estimate's)",
}


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


def _tested_package(path: Path) -> str | None:
    """The package a unit test module tests (``tests/unit/test_gcm_http.py``: gcm), None for other tests."""
    if path.parent.name != "unit" or not path.stem.startswith("test_"):
        return None
    return next((p for p in PACKAGES if path.stem[len("test_"):].startswith(p + "_")), None)


def test_tests_import_internals_only_of_the_package_they_test():
    """A unit test of a package may import its internals (as httpx's tests do); every other test, and a unit
    test reaching into another package, imports public names only."""
    wrong = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tested = _tested_package(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if (parts[0] in PACKAGES and parts[0] != tested
                        and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])):
                    wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_a_process_package_exports_its_process_its_settings_and_main():
    import importlib

    for name in PROCESS_PACKAGES:
        exported = importlib.import_module(name).__all__
        assert len(exported) <= MAX_PROCESS_EXPORTS and "main" in exported, (name, exported)


def _trees(packages: tuple[str, ...] = PRODUCT) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()
            if name.split(".")[0] in packages}


def _annotation_name(node: ast.expr | None) -> str | None:
    """The class a bare annotation names (``x: Foo`` or ``x: "Foo"``), else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
        return node.value
    return None


def exiled_functions(trees: dict[str, ast.Module]) -> list[str]:
    """Module functions whose first parameter is their module's own class, one with methods."""
    found = []
    for name, tree in trees.items():
        classes = {c.name for c in tree.body if isinstance(c, ast.ClassDef)
                   and any(isinstance(f, ast.FunctionDef) and not f.name.startswith("__") and f.args.args
                           and f.args.args[0].arg == "self" for f in c.body)}
        for fn in tree.body:
            if (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.args.args
                    and _annotation_name(fn.args.args[0].annotation) in classes
                    and f"{name}.{fn.name}" not in FREE_FUNCTIONS):
                found.append(f"{name}.{fn.name}({fn.args.args[0].arg}: {_annotation_name(fn.args.args[0].annotation)})")
    return found


def reaching_writes(trees: dict[str, ast.Module]) -> list[str]:
    """Assignments through two attributes into another object (``a.b.c = ...``, ``a.b.c += ...``)."""
    found = []
    for name, tree in trees.items():
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute):
                        found.append(f"{name}:{node.lineno}: {ast.unparse(t)} = ...")
    return found


def largest_classes(n: int = 10) -> list[tuple[int, str]]:
    """The ``n`` longest classes of the product, (lines, name), longest first."""
    sizes = [(c.end_lineno - c.lineno + 1, f"{name}.{c.name}") for name, tree in _trees().items()
             for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.end_lineno is not None]
    return sorted(sizes, reverse=True)[:n]


def test_no_module_function_is_a_method_of_its_module_class():
    exiled = exiled_functions(_trees())
    assert not exiled, "module functions that take their module's class first (make them methods):\n" + "\n".join(exiled)


def test_nothing_writes_through_two_attributes_into_another_object():
    reaching = reaching_writes(_trees())
    assert not reaching, "writes into another object's parts (ask the part to do it):\n" + "\n".join(reaching)


def test_the_cohesion_rules_catch_what_they_are_for():
    seeded = ast.parse("class Journal:\n    def beat(self): pass\n\n"
                       "def describe(journal: Journal) -> str:\n    return ''\n\n"
                       "def serve(fwd):\n    fwd.acct.busy += 1\n    fwd.held = None\n")
    assert exiled_functions({"m": seeded}) == ["m.describe(journal: Journal)"]
    assert reaching_writes({"m": seeded}) == ["m:8: fwd.acct.busy = ..."]


def test_each_unit_test_module_is_named_after_the_module_it_tests():
    """``tests/unit/test_<package>_<module>.py`` tests ``<package>/<module>.py`` (or ``_<module>.py``)."""
    expected = {"test_" + name.replace("._", "_").replace(".", "_") for name in MODULES}
    whole = {"test_structure", "test_types"}  # checks of the whole code base: its structure, its types
    strays = [p.name for p in sorted((ROOT / "tests" / "unit").glob("test_*.py"))
              if p.stem not in expected and p.stem not in whole]
    assert not strays, f"unit test modules named after no module: {strays}"


def test_kazoo_is_called_in_one_place_and_its_errors_mapped_in_one_boundary():
    """Only roq.zk's operations and session talk to kazoo (each maps kazoo's errors to ours); roq.server's
    boundary names kazoo's base exception in case one slips through. Nothing else of the product imports it."""
    allowed = {"roq.zk.ops", "roq.zk.session", "roq.server"}
    users = set()
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(m == "kazoo" or m.startswith("kazoo.") for m in modules):
                users.add(name)
    assert users <= allowed, sorted(users - allowed)


def _named_constants(node: ast.AST) -> list[tuple[str, ast.expr]]:
    """The values ``node`` gives a name: an assignment's, a keyword argument's, a parameter's default, a dict's
    entry under a string key."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [(ast.unparse(t), node.value) for t in targets if node.value is not None]
    if isinstance(node, ast.keyword) and node.arg is not None:
        return [(node.arg, node.value)]
    if isinstance(node, ast.arguments):
        positional = node.posonlyargs + node.args
        return ([(a.arg, d) for a, d in zip(positional[len(positional) - len(node.defaults):], node.defaults)]
                + [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None])
    if isinstance(node, ast.Dict):
        return [(k.value, v) for k, v in zip(node.keys, node.values)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def written_defaults(trees: dict[str, ast.Module]) -> list[str]:
    """Where a module other than :mod:`roq.defaults` writes out one of the cluster's default ports or its
    ZooKeeper root: the value itself in code (prose may name them), or in an address (``host:port``). The
    look-up port's number is as common as a timeout in milliseconds: it counts where what it is given to is
    named a port or a look-up."""
    from roq import defaults

    written = {defaults.ROOT, defaults.ZK, defaults.ZK_PORT, defaults.MANAGEMENT_PORT, defaults.BROADCAST_PORT,
               defaults.HTTP_PORT}
    ports = {defaults.ZK_PORT, defaults.LOOKUP_PORT, defaults.MANAGEMENT_PORT, defaults.BROADCAST_PORT,
             defaults.HTTP_PORT}
    address = re.compile(":(" + "|".join(str(p) for p in sorted(ports)) + r")(?!\d)")
    found = []
    for name, tree in trees.items():
        if name == "roq.defaults":
            continue
        prose = {id(n.body[0].value) for n in ast.walk(tree)
                 if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                 and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and type(node.value) in (str, int) and id(node) not in prose
                    and (node.value in written or isinstance(node.value, str) and address.search(node.value))):
                found.append(f"{name}:{node.lineno}: {node.value!r}")
            for target, value in _named_constants(node):
                if (isinstance(value, ast.Constant) and type(value.value) is int
                        and value.value == defaults.LOOKUP_PORT and any(w in target.lower() for w in ("port", "lookup"))):
                    found.append(f"{name}:{value.lineno}: {target} = {value.value!r}")
    return sorted(found, key=lambda line: (line.split(":")[0], int(line.split(":")[1])))


def test_a_default_port_or_root_is_written_once():
    """The cluster's default ports and ZooKeeper root are :mod:`roq.defaults`' alone."""
    found = written_defaults({name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()})
    assert not found, "\n".join(found)


def test_the_defaults_rule_catches_what_it_is_for():
    seeded = ast.parse("ROOT = '/roq'\nGCM_LOOKUP = 5000\ntimeout_ms = 5000\n"
                       "def connect(lookup_port=5000, poll_ms=5000): pass\n"
                       "connect(port=5000)\nADDRESS = 'tcp://127.0.0.1:5003'\nOTHER = 'tcp://127.0.0.1:50031'\n")
    assert written_defaults({"m": seeded}) == ["m:1: '/roq'", "m:2: GCM_LOOKUP = 5000", "m:4: lookup_port = 5000",
                                               "m:5: port = 5000", "m:6: 'tcp://127.0.0.1:5003'"]
