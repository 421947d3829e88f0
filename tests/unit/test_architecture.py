"""The house rules, read off the code: layers, no import cycle, one place per name and seed.

Every import counts: at the top of a file, inside a function (lazy) and under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from fedpfn.core import protocol
from tests.support.packages import PACKAGES, ROOT


# who may import whom: a layer imports its own modules and those listed, nothing above it
LAYERS = {
    "fedpfn": (),  # the package's __init__ alone: its sub-packages are the layers below
    "partitions": (),
    "fedpfn.core": ("partitions",),
    "fedpfn.analysis": ("fedpfn.core", "partitions"),
    "clients": ("fedpfn.core", "partitions"),
    "strategies": ("fedpfn.core", "partitions", "clients"),  # clients: see the next test
    "fedpfn.runtime": ("fedpfn.core", "fedpfn.analysis", "clients", "strategies", "partitions"),
    # the commands that train models to measure them: above the runtime, which never imports them
    "fedpfn.experiments": ("fedpfn.runtime", "fedpfn.core", "fedpfn.analysis", "clients", "strategies", "partitions"),
    "fedpfn.study": ("fedpfn.experiments", "fedpfn.runtime", "fedpfn.core", "fedpfn.analysis", "clients", "strategies",
                     "partitions"),  # fmt: skip
    "fedpfn.cli": ("fedpfn.study", "fedpfn.experiments", "fedpfn.runtime", "fedpfn.core", "fedpfn.analysis", "clients",
                   "strategies", "partitions"),  # fmt: skip
}


def python_files(*packages: str) -> list[Path]:
    return [p for package in packages for p in sorted((ROOT / package).rglob("*.py"))]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every project module `path` imports, wherever in the file, as dotted names."""
    tree = ast.parse(path.read_text())
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else module_name(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {resolve(name) for name in names if name.split(".")[0] in PACKAGES}
    found.discard(None)
    return found - {module_name(path)}


def resolve(name: str) -> str | None:
    """The module a dotted import name lands in (`clients.scaffold.SCAFFOLD_C` -> `clients.scaffold`)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ROOT.joinpath(*parts[:end])
        if candidate.with_suffix(".py").exists() or (candidate / "__init__.py").exists():
            return ".".join(parts[:end])
    return None


def layer_of(module: str) -> str:
    return next(layer for layer in sorted(LAYERS, key=len, reverse=True) if module == layer or module.startswith(layer + "."))


def graph() -> dict[str, set[str]]:
    return {module_name(path): imports(path) for path in python_files(*PACKAGES)}


def test_every_module_imports_only_its_own_layer_and_those_below():
    offenders = []
    for module, targets in graph().items():
        layer = layer_of(module)
        allowed = (layer, *LAYERS[layer])
        offenders += [f"{module} -> {t}" for t in sorted(targets) if layer_of(t) not in allowed]
    assert not offenders, offenders


def test_the_layer_check_refuses_the_runtime_an_experiment(monkeypatch):
    """The runtime measures with fedpfn.analysis and never imports an experiment command (they train
    models above it): the check above names such an import."""
    edges = {"fedpfn.runtime.alignment": {"fedpfn.analysis.fusion", "fedpfn.experiments.lmc"},
             "fedpfn.experiments.lmc": {"fedpfn.runtime.alignment", "fedpfn.analysis.fusion"}}  # fmt: skip
    monkeypatch.setattr(__import__(__name__), "graph", lambda: edges)
    try:
        test_every_module_imports_only_its_own_layer_and_those_below()
    except AssertionError as err:
        assert "fedpfn.runtime.alignment -> fedpfn.experiments.lmc" in str(err)
        assert "fedpfn.experiments.lmc ->" not in str(err)  # an experiment may import the runtime
    else:
        raise AssertionError("the runtime importing an experiment went unnoticed")


def test_a_server_part_reads_only_its_own_algorithms_declarations():
    """strategies/scaffold.py may import clients/scaffold.py (its keys, its Params); no other client
    module, and clients/ never imports strategies/."""
    offenders = []
    for path in python_files("strategies"):
        own = {f"clients.{path.stem}", "clients.base"}  # clients.base: the ClientRule type, for hints
        offenders += [f"{module_name(path)} -> {t}" for t in imports(path) if t.startswith("clients") and t not in own]
    for path in python_files("clients"):
        offenders += [f"{module_name(path)} -> {t}" for t in imports(path) if t.startswith("strategies")]
    assert not offenders, offenders


def test_the_import_graph_has_no_cycle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(edges):
        if module not in state and (cycle := visit(module)):
            raise AssertionError("import cycle: " + " -> ".join(cycle))


def test_the_cycle_check_finds_a_cycle(tmp_path, monkeypatch):
    """The check above fails on a cycle (a lazy import closing it counts)."""
    a, b = tmp_path / "pkg" / "a.py", tmp_path / "pkg" / "b.py"
    a.parent.mkdir()
    (a.parent / "__init__.py").write_text("")
    a.write_text("import pkg.b\n")
    b.write_text("def f():\n    import pkg.a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    monkeypatch.setattr(__import__(__name__), "PACKAGES", ("pkg",))
    try:
        test_the_import_graph_has_no_cycle()
    except AssertionError as err:
        assert "pkg.a -> pkg.b -> pkg.a" in str(err)
    else:
        raise AssertionError("the cycle went unnoticed")


def _message_keys() -> dict[str, str]:
    """Every message key constant: the envelope's (protocol) and each algorithm's (its client file)."""
    keys = {value: "fedpfn/core/protocol.py" for name, value in vars(protocol).items() if name.isupper() and isinstance(value, str)}
    for path in python_files("clients"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                if all(isinstance(t, ast.Name) and t.id.isupper() for t in node.targets) and "-" in node.value.value:
                    keys[node.value.value] = str(path.relative_to(ROOT))
    return keys


MESSAGE_MODULES = ("client_app.py", "server_app.py", "server.py", "transport.py", "algorithms.py", "batched.py",
                   "prepared.py", "program.py", "result.py")


def test_message_keys_are_written_once_where_they_belong():
    """A key such as 'server-round' or 'scaffold-c' is written only where it is declared (the
    protocol, or its algorithm's client file); plain record names ('arrays', 'config') not in
    the code that builds or reads messages (other modules may write JSON with such words)."""
    keys = _message_keys()
    offenders = []
    for path in python_files("clients", "strategies", "fedpfn"):
        relative = str(path.relative_to(ROOT))
        outside = ("fedpfn/analysis", "fedpfn/experiments", "fedpfn/core", "fedpfn/cli", "fedpfn/study")  # no message
        handles_messages = not relative.startswith(outside) and (
            not relative.startswith("fedpfn/runtime") or path.name in MESSAGE_MODULES
        )
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and node.value in keys) or keys[node.value] == relative:
                continue
            if "-" in node.value or handles_messages:
                offenders.append(f"{relative}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


def test_seeds_are_derived_only_in_the_seeding_module():
    """No RNG is seeded with a seed made on the spot (a hash, a list, a constant): seeds come
    from fedpfn.core.seeding, or are passed in by a caller that got them there."""
    offenders = []
    for path in python_files("clients", "strategies", "fedpfn"):
        if path.name == "seeding.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            if node.func.attr not in ("default_rng", "SeedSequence", "manual_seed", "seed") or not node.args:
                continue
            argument = node.args[0]
            derived_here = isinstance(argument, ast.BinOp | ast.List | ast.Tuple | ast.Constant)
            if derived_here or (isinstance(argument, ast.Call) and "seed_for" not in ast.unparse(argument)):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert not offenders, offenders


def test_run_folder_names_are_written_only_in_the_files_module():
    """'metrics.jsonl', 'config.json', 'model_round_<n>.pt' and the other run-folder names come from
    fedpfn.core.files: no string but a docstring starts with one, alone or after a '/'."""
    from fedpfn.core import files

    names = (files.CONFIG, files.METRICS, files.CLIENTS, files.SUMMARY, files.CHECKPOINT, files.CLIENT_STATE,
             files.LOG, files.PARTITION, files.COMPARISON_CONFIG, files.PARTITION_FIGURE, files.ACCURACY_FIGURE)  # fmt: skip
    spelt = re.compile("/?(" + "|".join(map(re.escape, names)) + r"(\W|$)|model_round_)")
    elsewhere = {("fedpfn/runtime/nodedata.py", files.PARTITION)}  # a node's data folder, not a run folder
    offenders = []
    for path in python_files(*PACKAGES) + python_files("scripts") + [ROOT / "run_sim.py"]:
        if path.name == "files.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(ast.get_docstring(n, clean=False) and n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)}  # fmt: skip
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
                continue
            if spelt.match(node.value) and (str(path.relative_to(ROOT)), node.value) not in elsewhere:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


def test_no_function_in_the_packages_is_longer_than_60_lines():
    long = []
    for path in python_files(*PACKAGES):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno >= 60:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


def test_no_file_in_the_packages_is_longer_than_400_lines():
    long = [f"{p.relative_to(ROOT)}: {n}" for p in python_files(*PACKAGES) if (n := len(p.read_text().splitlines())) > 400]
    assert not long, long


def test_the_engine_setting_names_the_engine_modules():
    """`--engine`'s choices (checked in fedpfn.core before any engine loads) are the engines' modules."""
    from fedpfn.core.groups import ENGINES as CHOICES
    from fedpfn.runtime.engines.registry import ENGINES

    assert set(ENGINES) == set(CHOICES)


STARTERS = ("subprocess", "multiprocessing", "concurrent.futures", "fedpfn.runtime")  # what starts a federation


def test_the_analysis_layer_starts_no_federation():
    """fedpfn.analysis reads finished runs (its __init__ says so): no module of it imports a process
    launcher or the runtime (ensure_run, simulate); a study's runs are its cells (fedpfn.study)."""
    offenders = []
    for path in python_files("fedpfn/analysis"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Attribute) and getattr(node.value, "id", "") == "os":
                names = [f"os.{node.attr}"] if node.attr in ("system", "popen", "spawnv", "execv", "fork") else []
            else:
                continue
            offenders += [f"{module_name(path)} -> {n}" for n in names if n.startswith((*STARTERS, "os."))]
    assert not offenders, offenders


def test_the_engines_import_nothing_that_imports_them_back():
    """The engines sit below the ClientApp and the simulation that choose them: nothing an engine
    imports, however indirectly, imports an engine (the ClientApp is handed down to them)."""
    edges = graph()
    engines = {m for m in edges if m == "fedpfn.runtime.engines" or m.startswith("fedpfn.runtime.engines.")}
    reached: set[str] = set()
    todo = [t for m in engines for t in edges[m] if t not in engines]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += [t for t in edges.get(module, ()) if t not in engines]
    assert not sorted(m for m in reached if edges.get(m, set()) & engines)
    assert "fedpfn.runtime.client_app" not in reached
