"""The install layout: every package ships, `cli` installs as `seqkit.cli`, configs ship inside."""

import configparser
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_package_is_listed_in_setup_cfg():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    listed = set(cfg["options"]["packages"].split())
    found = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "seqkit")):
        if "__init__.py" in files:
            found.add(os.path.relpath(folder, ROOT).replace(os.sep, "."))
    assert found <= listed, f"add to setup.cfg [options] packages: {sorted(found - listed)}"
    assert {"seqkit.cli", "seqkit.hydra_conf"} <= listed and "cli" not in listed


def test_installed_package_has_cli_and_configs():
    from importlib.resources import files

    import seqkit.cli.train  # noqa: F401

    names = {p.name for p in files("seqkit.hydra_conf").iterdir()}
    assert {"train.yaml", "generate.yaml", "preprocess.yaml", "score.yaml", "average.yaml"} <= names
