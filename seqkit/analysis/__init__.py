"""Looking at trained models: evaluating, probing, pruning and drawing them.

- :mod:`~seqkit.analysis.eval_lm`: ``seqkit-eval-lm``, perplexity per token and per word (and a
  masked-LM or denoising checkpoint's loss at the scored positions);
- :mod:`~seqkit.analysis.probe`: ``seqkit-probe``, linear probes with control tasks on every layer;
- :mod:`~seqkit.analysis.prune`: ``seqkit-prune``, attention heads by importance, or weights by magnitude;
- :mod:`~seqkit.analysis.activations`: a character LSTM's units against properties of the text;
- :mod:`~seqkit.analysis.gradients`: a recurrent LM's gradient against distance in time (the vanishing gradient);
- :mod:`~seqkit.analysis.plot`: ``seqkit-plot``, attention heatmaps, training curves, pruning and
  activation and gradient-distance pictures (matplotlib, ``seqkit[plot]``).
"""
