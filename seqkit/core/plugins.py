"""Importing a user's plugin folder (``common.user_dir=DIR``), whose modules register components."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from seqkit.core.errors import SeqkitError


def import_user_dir(path: str) -> None:
    """Import a user's plugin folder (a package or a folder of modules) so it can register."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise SeqkitError(f"common.user_dir: no such folder: {path}")
    name = os.path.basename(path.rstrip("/"))
    if name in sys.modules:
        return
    init = os.path.join(path, "__init__.py")
    if os.path.isfile(init):
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[path])
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return
    sys.path.insert(0, path)
    for fname in sorted(os.listdir(path)):
        if fname.endswith(".py"):
            importlib.import_module(fname[:-3])
