"""Verifiers: checkers that accept or reject a hypothesis for its source, so that generation can
keep, per input, the first hypothesis of the n-best that verifies (``generation.verifier=NAME``).

A verifier is a component like a task or a model: a builder registered in :data:`VERIFIERS` with
a typed config whose ``name`` is its registry name. The builder is called once per worker process
with its config and returns a callable ``(source, hypothesis) -> bool`` on detokenized text; one
that measures with a checkpoint says so in its config's ``MODEL`` and reads ``cfg.model``
(``generation.verifier_model``), as ``attributes`` reads a sentence classifier. A plugin
(``common.user_dir``) registers its own the same way::

    from dataclasses import dataclass
    from seqkit.verify import VERIFIERS, VerifierConfig

    @dataclass
    class EvenConfig(VerifierConfig):
        name: str = "even_length"

    @VERIFIERS.register("even_length", EvenConfig)
    def even_length(cfg: EvenConfig):
        return lambda source, hypothesis: len(hypothesis.split()) % 2 == 0

The checks run in worker processes (:mod:`seqkit.verify.runner`), which import the built-ins
(:data:`BUILTIN`) and the plugin folder before building the verifier; a check that hangs past its
time limit or raises counts as not verified. ``seqkit-generate generation.verifier=NAME`` and
``TranslatorBase.translate_verified`` use them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import ClassVar, Union

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import Registry

VERIFIERS = Registry("verifier")


@dataclass
class VerifierConfig:
    """What every verifier is built from; a verifier's own config subclasses it."""

    name: str = arg("", "the verifier's registry name")
    model: str = arg("", "a checkpoint the verifier measures with (e.g. a classifier); empty: none")

    # what the verifier measures with, for messages ("a sentence classifier checkpoint, ..."): a verifier
    # that says so needs ``model``; one that does not (empty) reads none, and one given is refused
    MODEL: ClassVar[str] = ""


# the modules of the built-in verifiers, imported by seqkit.import_builtin_verifiers() when a verifier is
# asked for (not by import_builtin_components: a verifier may import something heavy, such as sympy)
BUILTIN = ("seqkit.verify.numbers", "seqkit.verify.attributes", "seqkit.symbolic.verifier")


def verifier_config(verifier: Union[str, VerifierConfig], model: str = "") -> VerifierConfig:
    """The config of ``verifier`` (a registered name, or a config as is), built-ins registered first;
    ``model``: the checkpoint a name's verifier measures with (``generation.verifier_model``). An
    unknown name, or a model given to a verifier that reads none or missing from one that needs it,
    is one line."""
    import seqkit

    seqkit.import_builtin_verifiers()
    name = verifier.name if isinstance(verifier, VerifierConfig) else verifier
    if not name:
        raise SeqkitError(f"no verifier given: pass a registered name ({', '.join(sorted(VERIFIERS.choices()))}) "
                          "or a VerifierConfig")
    try:
        cls = VERIFIERS.config_class(name)
    except SeqkitError as e:
        raise SeqkitError(f"{e} (a plugin registers its own with common.user_dir=DIR)") from None
    if isinstance(verifier, VerifierConfig):
        if model and model != verifier.model:
            raise SeqkitError(f"verifier {name!r}: its config holds model={verifier.model!r} and model={model!r} "
                              "was given as well: give it in one place")
        cfg = verifier
    else:
        cfg = dataclasses.replace(cls(), model=model)
    check_model(cfg)
    return cfg


def reads_model(name: str) -> bool:
    """Whether the verifier registered as ``name`` measures with a checkpoint (``VerifierConfig.model``);
    an unknown name counts as reading one, so that the unknown name is what gets reported."""
    import seqkit

    seqkit.import_builtin_verifiers()
    return name not in VERIFIERS or bool(VERIFIERS.config_class(name).MODEL)


def check_model(cfg: VerifierConfig) -> None:
    """One line when ``cfg.model`` is given to a verifier that reads none, missing from one that needs
    it, or not there (before any worker process starts)."""
    needs = type(cfg).MODEL
    if cfg.model and needs and not os.path.exists(cfg.model):
        raise SeqkitError(f"verifier {cfg.name!r}: checkpoint not found: {cfg.model} (generation.verifier_model)")
    if cfg.model and not needs:
        raise SeqkitError(f"verifier {cfg.name!r} measures without a checkpoint, and was given "
                          f"model={cfg.model}: drop it (generation.verifier_model)")
    if needs and not cfg.model:
        raise SeqkitError(f"verifier {cfg.name!r} measures with {needs}: give it one "
                          "(generation.verifier_model=CHECKPOINT; model= in Python)")
