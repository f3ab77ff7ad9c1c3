"""HuggingFace checkpoints in and out: ``seqkit-import`` turns an HF model folder into a seqkit
checkpoint, ``seqkit-export format=huggingface`` writes one back (:mod:`seqkit.hf.convert`).

One module per model family holds its config map and its weight-name map, used both ways
(:mod:`seqkit.hf.gpt2`); :mod:`seqkit.hf.vocab` maps seqkit's dictionary onto an HF vocabulary,
:mod:`seqkit.hf.folder` reads and writes the folder. ``transformers``, ``safetensors`` and
``tokenizers`` are the optional extra ``seqkit[hf]``, imported only here and only when used.
"""
