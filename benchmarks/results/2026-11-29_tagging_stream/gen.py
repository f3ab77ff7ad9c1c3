"""N CoNLL-2003 training sentences drawn at random (seed 0), with replacement, as one CoNLL file."""
import sys, random
text = open("/work/shared/data/conll2003/eng.train", encoding="utf-8").read()
sents = [s for s in text.split("\n\n") if s.strip() and not s.startswith("-DOCSTART-")]
n, rng = int(sys.argv[1]), random.Random(0)
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for _ in range(n):
        f.write(sents[rng.randrange(len(sents))].strip("\n") + "\n\n")
