"""Thin command-line entry points (installed as ``seqkit.cli``): build the config, call the
library, map errors to exit codes."""
