"""Ways of using a pretrained network, one module each, all switched by ``model.adapt=`` of
``model=pretrained_classifier`` / ``pretrained_tagger`` (:mod:`seqkit.models.pretrained`):

- :mod:`~seqkit.adapt.modes`: the switch, what each mode trains, the trainable-parameter line;
- :mod:`~seqkit.adapt.adapters`: bottleneck adapters (Houlsby, Pfeiffer);
- :mod:`~seqkit.adapt.lora`: LoRA updates, and their merge into plain Linear weights;
- :mod:`~seqkit.adapt.prompt`: prompt tuning's learned input vectors;
- :mod:`~seqkit.adapt.ulmfit`: ULMFiT's layer groups (discriminative rates, gradual unfreezing).

Each method's settings are one small dataclass (``model.lora.rank=16``, ``model.adapter.placement=pfeiffer``,
``model.prompt.length=20``, ``model.ulmfit.lr_decay=2.6``). Methods attach to the body's own
modules (a LoRA update hangs on the ``nn.Linear`` it adapts, an adapter on the sublayer it
follows), so no model file changes for them and the base weights keep their names.
"""
