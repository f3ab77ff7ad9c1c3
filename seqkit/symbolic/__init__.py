"""Symbolic mathematics with sympy (the ``symbolic`` extra): expressions as prefix token sequences
(:mod:`~seqkit.symbolic.prefix`), seeded random (derivative, function) pairs for learning to
integrate (:mod:`~seqkit.symbolic.generator`), and the ``integral`` verifier that accepts a
hypothesis whose derivative is the source (:mod:`~seqkit.symbolic.verifier`).

Importing this package, or :mod:`~seqkit.symbolic.verifier` (which ``import_builtin_components``
does to register the verifier), does not import sympy; building the verifier or using the other
modules does. ``examples/symbolic_integration`` is the recipe that uses them.
"""
