"""The cloze demo from Python: top-5 fillers for each [MASK] of a few sentences.

    python examples/masked_lm/wikitext2/cloze.py WORK/checkpoints/checkpoint_best.pt
"""

import sys

from seqkit.generation.cloze import Cloze

SENTENCES = [
    "The [MASK] was released in North America in 2011 .",
    "The city is the [MASK] of the state .",
    "In 1945 , the war [MASK] .",
]

cloze = Cloze.from_checkpoint(sys.argv[1])
for sentence, slots in zip(SENTENCES, cloze.fill(SENTENCES, topk=5)):
    print(sentence)
    for k, fillers in enumerate(slots):
        print(f"  [MASK] {k}: " + ", ".join(f"{word} ({p:.3f})" for word, p in fillers))
