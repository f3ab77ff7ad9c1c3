"""The layout STYLE.md asks for: no import cycles between seqkit's modules, counting the imports
inside functions too (a lazy import hides a cycle from Python, not from a reader)."""

import ast
from pathlib import Path

import seqkit

ROOT = Path(seqkit.__file__).parent


def module_graph():
    """module -> the seqkit modules it imports. ``import_builtin_components`` (the root package's
    registration entry point, which imports every component) is left out: calling it is how any
    module asks for the registries to be filled."""
    names = {}
    for path in ROOT.rglob("*.py"):
        parts = ("seqkit",) + path.relative_to(ROOT).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in names.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("seqkit"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    deps.add(full if full in names else node.module)
            elif isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name.startswith("seqkit."))
        graph[name] = {d for d in deps if d in names and d not in (name, "seqkit")}
    return graph


def cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_imports():
    graph = module_graph()
    assert "seqkit.generation.ct2_engine" in graph["seqkit.generation.translator"]  # imported inside a method
    assert "seqkit.preprocess_labelled" in graph["seqkit.preprocess"]


def test_no_import_cycles():
    assert cycles(module_graph()) == []


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
