import sys, random
n = int(sys.argv[1])
rows = open("/work/shared/data/sst2/train.tsv", encoding="utf-8").read().splitlines()[1:]
rng = random.Random(0)
with open(sys.argv[2], "w", encoding="utf-8") as f:
    f.write("sentence\tlabel\n")
    for i in range(n):
        text, label = rows[rng.randrange(len(rows))].split("\t")
        f.write(f"{text}\t{label}\n")
