"""The layout STYLE.md asks for, checked over seqkit's own modules (``cli/`` included, as
``seqkit.cli``), counting the imports inside functions too (a lazy import hides a cycle or an
upward import from Python, not from a reader), relative ones (``from ..training import x``) and
``importlib.import_module("seqkit.x")`` / ``__import__`` with a literal name (or an f-string's
literal start, ``f"seqkit.training.{name}"``: that package):

- no import cycles;
- imports run down the floors of :data:`FLOORS` only: a module imports its own package and
  packages on lower floors, never one on its own floor or above (docs/layout.md draws the floors);
- nothing in seqkit imports the old paths kept for users' plugins (:data:`SHIMS`).
"""

import ast
import importlib
import sys
from pathlib import Path

import pytest

import seqkit
import seqkit.cli

ROOT = Path(seqkit.__file__).parent
CLI = Path(seqkit.cli.__file__).parent  # the repository's cli/, installed as seqkit.cli

# Floor -> the packages on it, top floor first. ``models.modules`` (shared layers) is a floor of
# its own below the model families. A new package gets a floor here: the lowest floor above
# everything it imports.
FLOORS = {
    8: ("cli",),  # thin entry points
    7: ("analysis", "preprocess"),  # eval-lm, probe, prune, plots; text -> data folders
    6: ("training", "generation"),  # the trainer; search and the engines
    5: ("export",),  # CTranslate2 folders, stand-alone checkpoints
    4: ("tasks", "hf"),  # data -> batches, models, criteria; HuggingFace folders in and out
    3: ("models", "criteria"),  # one file per family; losses
    2: ("adapt", "symbolic"),  # LoRA, adapters, prompts, ULMFiT: attached to a model's own layers; sympy's
    # expressions as prefix tokens, their generator and the integral verifier (over verify)
    1: ("data", "tokenizers", "models.modules", "optim", "scoring", "verify"),  # leaves over core
    0: ("core", "hydra_conf"),  # errors, config helpers, registry, plugins, checkpoints, io, CPU settings;
    # the config YAMLs (the repository's hydra_conf/, installed inside the package as seqkit.hydra_conf)
}
FLOOR_OF = {package: floor for floor, packages in FLOORS.items() for package in packages}
# old import paths kept for users' plugins (the README's example); for users only
SHIMS = {"seqkit.dataclass_utils": "seqkit.core.config", "seqkit.errors": "seqkit.core.errors",
         "seqkit.registry": "seqkit.core.registry"}


def module_names(roots=((ROOT, ("seqkit",)), (CLI, ("seqkit", "cli")))):
    """module name -> file, for seqkit/ and cli/ (as ``seqkit.cli``): each root's files under its prefix."""
    names = {}
    for root, prefix in roots:
        for path in root.rglob("*.py"):
            parts = prefix + path.relative_to(root).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def resolve(module: str, is_package: bool, level: int, target: str) -> str:
    """The absolute name of a relative import: ``from ..x import y`` in ``seqkit.a.b`` -> ``seqkit.x``."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([target] if target else []))


def imported_by_name(call: ast.Call, module: str, is_package: bool) -> str:
    """The module an ``importlib.import_module(...)`` / ``import_module(...)`` / ``__import__(...)`` call
    names with a literal (a relative one with a literal package, ``__name__`` or ``__package__``); an
    f-string's literal start names its package. '' for anything else."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name not in ("import_module", "__import__") or not call.args:
        return ""
    arg = call.args[0]
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rpartition(".")[0]  # f"seqkit.training.{x}" -> seqkit.training
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return ""
    target = arg.value
    if not target.startswith("."):
        return target
    package = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "package"), None)
    level = len(target) - len(target.lstrip("."))
    if isinstance(package, ast.Constant) and isinstance(package.value, str):
        return resolve(package.value, True, level, target[level:])
    if isinstance(package, ast.Name) and package.id in ("__name__", "__package__"):
        own = module if is_package or package.id == "__name__" else module.rpartition(".")[0]
        return resolve(own, True, level, target[level:])
    return ""


def module_graph(names=None):
    """module -> the seqkit modules it imports. ``import_builtin_components`` (the root package's
    registration entry point, which imports every component) is left out: calling it is how any
    module asks for the registries to be filled."""
    names = names or module_names()

    def known(dep: str) -> str:  # the module itself, else the nearest package of it that exists
        while dep and dep not in names:
            dep = dep.rpartition(".")[0]
        return dep

    graph = {}
    for name, path in names.items():
        is_package, deps = path.name == "__init__.py", set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = resolve(name, is_package, node.level, node.module or "") if node.level else node.module or ""
                if base.startswith("seqkit"):
                    deps.update(known(f"{base}.{alias.name}") for alias in node.names)
            elif isinstance(node, ast.Import):
                deps.update(known(a.name) for a in node.names if a.name.startswith("seqkit."))
            elif isinstance(node, ast.Call) and imported_by_name(node, name, is_package).startswith("seqkit."):
                deps.add(known(imported_by_name(node, name, is_package)))
        graph[name] = {d for d in deps if d in names and d not in (name, "seqkit")}
    return graph


def package_of(module):
    """The key of :data:`FLOORS` a module belongs to (``seqkit.models.modules.attention`` ->
    ``models.modules``); None for the root package, the module's own name for a loose module."""
    parts = module.split(".")[1:]
    if not parts:
        return None
    if parts[:2] == ["models", "modules"]:
        return "models.modules"
    return parts[0]


def upward_imports(graph):
    """``(importer, imported, why)`` for every import that does not run down the floors."""
    found = []
    for module, deps in sorted(graph.items()):
        mine = package_of(module)
        if mine not in FLOOR_OF or module in SHIMS:  # the root package; a module without a floor fails below
            continue
        for dep in sorted(deps):
            theirs = package_of(dep)
            if dep in SHIMS:
                found.append((module, dep, f"{dep} is kept for users' plugins: import {SHIMS[dep]}"))
            elif theirs != mine and theirs in FLOOR_OF and FLOOR_OF[theirs] >= FLOOR_OF[mine]:
                found.append((module, dep, f"{mine} (floor {FLOOR_OF[mine]}) imports {theirs} "
                                           f"(floor {FLOOR_OF[theirs]})"))
    return found


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
    assert "seqkit.preprocess.labelled" in graph["seqkit.preprocess.text"]


def test_no_import_cycles():
    assert cycles(module_graph()) == []


def test_a_cycle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_is_in_a_package_with_a_floor():
    loose = sorted(m for m in module_graph() if package_of(m) is not None and m not in SHIMS
                   and package_of(m) not in FLOOR_OF)
    assert loose == [], "put these in a package and give it a floor in FLOORS: " + ", ".join(loose)


def test_imports_run_down_the_floors():
    found = upward_imports(module_graph())
    assert found == [], "imports against the floors:\n" + "\n".join(f"{a} -> {b}: {why}" for a, b, why in found)


def test_an_upward_import_is_found(tmp_path):
    files = {"seqkit.models.low": "def f():\n    from seqkit.training.trainer import Trainer\n",  # lazy: counted
             "seqkit.training.trainer": "from seqkit.models.base import EncoderDecoderModel\n",
             "seqkit.models.base": "from seqkit.models.modules.norm import layer_norm\n",
             "seqkit.models.modules.norm": "import torch\n"}
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    found = upward_imports(module_graph({name: tmp_path / f"{name}.py" for name in files}))
    assert found == [("seqkit.models.low", "seqkit.training.trainer", "models (floor 3) imports training (floor 6)")]
    # another package on the same floor is refused too
    assert upward_imports({"seqkit.tasks.x": {"seqkit.hf.y"}}) == [
        ("seqkit.tasks.x", "seqkit.hf.y", "tasks (floor 4) imports hf (floor 4)")]


@pytest.mark.parametrize("old", sorted(SHIMS))
def test_the_old_plugin_import_paths_still_work(old, monkeypatch):
    """The README's plugin example imports ``seqkit.dataclass_utils.arg`` and ``seqkit.registry.MODELS``
    (and plugins raise ``seqkit.errors.SeqkitError``): the same objects, with a DeprecationWarning."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=SHIMS[old]):
        shim = importlib.import_module(old)
    new = importlib.import_module(SHIMS[old])
    public = [name for name in vars(shim) if not name.startswith("_") and name != "warnings"]
    assert public and all(getattr(shim, name) is getattr(new, name) for name in public)


def test_relative_and_by_name_imports_are_found(tmp_path):
    """A tiny package whose upward imports are each hidden another way: all of them are flagged,
    the imports that run down the floors (relative ones too) are not."""
    files = {
        "__init__.py": "",
        "training/__init__.py": "", "training/trainer.py": "", "generation/search.py": "", "tasks/__init__.py": "",
        "models/__init__.py": "", "models/modules/__init__.py": "", "models/modules/norm.py": "",
        "models/base.py": "from .modules import norm\nfrom . import low\n",  # down and sideways: fine
        "models/low.py": "from ..training import trainer\n",
        "models/up.py": "from .. import tasks\n",
        "models/lazy.py": "def f():\n    import importlib\n"
                          "    return importlib.import_module('seqkit.generation.search')\n",
        "models/dunder.py": "search = __import__('seqkit.generation.search')\n",
        "data/__init__.py": "",
        "data/dyn.py": "from importlib import import_module\n\n\ndef f(n):\n"
                       "    return import_module(f'seqkit.training.{n}')\n",
        "data/rel.py": "import importlib\nimportlib.import_module('.trainer', package='seqkit.training')\n",
        "data/own.py": "import importlib\nimportlib.import_module('.dyn', __package__)\n",  # its own package: fine
    }
    for rel, text in files.items():
        (tmp_path / "seqkit" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "seqkit" / rel).write_text(text)
    graph = module_graph(module_names(((tmp_path / "seqkit", ("seqkit",)),)))
    assert graph["seqkit.models.base"] == {"seqkit.models.modules.norm", "seqkit.models.low"}
    assert graph["seqkit.data.own"] == {"seqkit.data.dyn"}
    assert sorted((a, b) for a, b, _ in upward_imports(graph)) == [
        ("seqkit.data.dyn", "seqkit.training"), ("seqkit.data.rel", "seqkit.training.trainer"),
        ("seqkit.models.dunder", "seqkit.generation.search"), ("seqkit.models.lazy", "seqkit.generation.search"),
        ("seqkit.models.low", "seqkit.training.trainer"), ("seqkit.models.up", "seqkit.tasks")]
