"""The config tree (installed as ``seqkit.hydra_conf``): one primary YAML per subcommand.

Each primary config's defaults list names its typed schema (a dataclass stored in hydra's
ConfigStore by ``seqkit.cli.common``) and a default option for each component group; the options
of a group are the registered components and presets of :mod:`seqkit.core.registry`.
"""
