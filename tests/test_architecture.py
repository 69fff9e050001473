"""The package's import graph: no import cycles, and the layers import only downward.

Read from the source with `ast` (nothing is imported), every import counted, including the ones inside functions
and ``TYPE_CHECKING`` blocks: a deferred import is still a dependency. The layers, lowest first:

    base         settings, stats, usage, parallel: import nothing else of the package
    library      tfgrpo_dspy.library: the experience library, its edits and its file
    inference    tfgrpo_dspy.inference: the program with a library (injection, rollouts, evaluation)
    reflection   tfgrpo_dspy.reflection and its prompts, tfgrpo_dspy.signatures
    run          tfgrpo_dspy.run: the step loop, its phases, the gate, the run log
    optimizer    tfgrpo_dspy.optimizer and the package's public face, tfgrpo_dspy/__init__.py
    ---- the core ends here: what follows uses it, and the core never imports it ----
    lm           the embedded LM back-end (the core takes any DSPy LM)
    tasks        tfgrpo_dspy.tasks and the domain kits
    report       the HTML report of a run
    demo         the offline demo
    cli          the tfgrpo command

A module may import its own layer and the layers below it. A new module must be placed in a layer here.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "tfgrpo_dspy"
# Where each package's source lives (pyproject's package-dir: the prompts are installed from signatures/).
SOURCES = {PACKAGE: ROOT / "tfgrpo_dspy", f"{PACKAGE}.signatures": ROOT / "signatures"}

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("tfgrpo_dspy.settings", "tfgrpo_dspy.stats", "tfgrpo_dspy.usage", "tfgrpo_dspy.parallel")),
    ("library", ("tfgrpo_dspy.library",)),
    ("inference", ("tfgrpo_dspy.inference",)),
    ("reflection", ("tfgrpo_dspy.reflection", "tfgrpo_dspy.signatures")),
    ("run", ("tfgrpo_dspy.run",)),
    ("optimizer", ("tfgrpo_dspy.optimizer", "tfgrpo_dspy")),
    ("lm", ("tfgrpo_dspy.lm",)),
    ("tasks", ("tfgrpo_dspy.tasks", "tfgrpo_dspy.kits")),
    ("report", ("tfgrpo_dspy.report",)),
    ("demo", ("tfgrpo_dspy.demo",)),
    ("cli", ("tfgrpo_dspy.cli", "tfgrpo_dspy.cli_args")),
]
CORE = {"base", "library", "inference", "reflection", "run", "optimizer"}
# Imported as a top-level ``sandbox`` with its folder on sys.path (tests/test_math_sandbox.py): so it imports
# only the standard library and, relatively, itself.
STANDALONE = "tfgrpo_dspy.kits.math.sandbox"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for package, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package, one level up per extra dot
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # "from a.b import c" imports the module a.b.c when there is one, else names of a.b
            candidates = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                          for alias in node.names]
        else:
            continue
        for candidate in candidates:
            while candidate and candidate not in known:  # "import a.b.c" of a name inside a.b: the module a.b
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                targets.add(candidate)
    return targets


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def layer_of(module: str) -> str | None:
    """The layer of a module: the one with the longest prefix that names it or a package above it."""
    best, best_length = None, -1
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            matches = module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))
            if matches and len(prefix) > best_length:
                best, best_length = layer, len(prefix)
    return best


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a readable path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

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
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return [_cycle_in(sorted(component), graph) for component in components]


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A path start -> ... -> start inside one strongly connected component."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for target in sorted(graph[node] & members):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                frontier.append(target)
    return component


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    rank = {layer: position for position, (layer, _) in enumerate(LAYERS)}
    violations = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            source_layer, target_layer = layer_of(module), layer_of(target)
            if source_layer is None or target_layer is None:  # reported by test_every_module_is_placed_in_a_layer
                continue
            if rank[target_layer] > rank[source_layer]:
                kind = "the core imports" if source_layer in CORE and target_layer not in CORE else "imports"
                violations.append(f"{module} ({source_layer}) {kind} {target} ({target_layer}), a higher layer")
    return violations


def test_every_module_is_placed_in_a_layer():
    unplaced = sorted(name for name in modules() if layer_of(name) is None)
    assert not unplaced, f"place these modules in a layer of LAYERS: {unplaced}"


def test_the_graph_is_read_from_the_source():
    # Guards the two checks below against a reader that finds nothing.
    graph = import_graph()
    assert "tfgrpo_dspy.run.phases" in graph["tfgrpo_dspy.run.loop"]
    assert "tfgrpo_dspy.library.library" in graph["tfgrpo_dspy.inference.injection"]
    assert "tfgrpo_dspy.inference.injection" in graph["tfgrpo_dspy.inference.evaluation"]  # inside a function
    assert "tfgrpo_dspy.library.edits" in graph["tfgrpo_dspy.signatures.update"]
    assert f"{STANDALONE}.confinement" in graph[f"{STANDALONE}.runner"]  # a relative import
    assert sum(map(len, graph.values())) > 150


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_layers_import_only_downward():
    violations = layering_violations(import_graph())
    assert not violations, "\n".join(violations)


def test_the_core_never_imports_kits_cli_demo_report_or_lm():
    graph = import_graph()
    outside = {"lm", "tasks", "report", "demo", "cli"}
    leaks = sorted(f"{module} -> {target}" for module, targets in graph.items() if layer_of(module) in CORE
                   for target in targets if layer_of(target) in outside)
    assert not leaks, leaks


def test_the_sandbox_imports_only_the_standard_library_and_itself():
    """tests/test_math_sandbox.py imports it alone, as ``sandbox``, in a process that must stay light."""
    found = modules()
    for name, path in found.items():
        if name != STANDALONE and not name.startswith(STANDALONE + "."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                tops = [alias.name.partition(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").partition(".")[0]]
            else:
                continue
            foreign = [top for top in tops if top != "__future__" and top not in sys.stdlib_module_names]
            assert not foreign, f"{name} imports {foreign}: only the standard library and (relatively) itself"


def test_the_checks_catch_an_upward_import_and_a_cycle():
    graph = import_graph()
    graph["tfgrpo_dspy.library.library"] = graph["tfgrpo_dspy.library.library"] | {"tfgrpo_dspy.run.loop"}
    graph["tfgrpo_dspy.run.results"] = graph["tfgrpo_dspy.run.results"] | {"tfgrpo_dspy.report.run"}
    violations = layering_violations(graph)
    assert any(v.startswith("tfgrpo_dspy.library.library (library) imports tfgrpo_dspy.run.loop") for v in violations)
    assert any("the core imports tfgrpo_dspy.report.run" in v for v in violations)
    cycles = find_cycles(graph)
    assert any("tfgrpo_dspy.library.library" in cycle and "tfgrpo_dspy.run.loop" in cycle for cycle in cycles)
