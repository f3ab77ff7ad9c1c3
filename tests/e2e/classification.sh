#!/usr/bin/env bash
# End-to-end classification or tagging in a few seconds of one CPU core:
#   synthetic data -> seqkit-preprocess -> seqkit-train (a tiny model, a few updates)
#   -> seqkit-generate on the dev split (with gold labels) and on the unlabelled test split
#   -> seqkit-generate on two raw lines from stdin -> seqkit-score.
#
#   bash tests/e2e/classification.sh WORKDIR MODEL TASK
#     TASK classification: sentence pairs in GLUE MRPC's TSV layout (BOM, Quality, '#1 String', '#2 String');
#          MODEL: cbow_tiny, kim_cnn_tiny, bilstm_classifier_tiny, transformer_classifier_tiny, ...
#     TASK tagging: CoNLL-2003 columns (-DOCSTART- lines, word POS chunk NER); MODEL: bilstm_tagger_tiny, ...
#
# The seqkit-* console scripts (and the python that has seqkit) must come first on PATH.
# Leaves in WORKDIR: raw/ (text), data-bin/, checkpoints/, gen.txt (dev split), stdin.txt,
# score.txt, predict/generate-test.txt (test split, no gold labels).
set -euo pipefail

work=${1:?usage: bash tests/e2e/classification.sh WORKDIR MODEL TASK}
model=${2:?usage: bash tests/e2e/classification.sh WORKDIR MODEL TASK}
task=${3:?usage: bash tests/e2e/classification.sh WORKDIR MODEL TASK}
mkdir -p "$work/raw"
cd "$work"
# one thread everywhere: the test is about the pipeline, not speed, and shares the machine
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# synthetic data: a pair is paraphrase-like (Quality 1) when both sentences have the same polarity;
# a tagged sentence is filler words around one (possibly multi-word) entity
python - "$task" <<'EOF'
import random
import sys

task = sys.argv[1]
rng = random.Random(0)
POLARITY = {"neg": ["bad", "awful", "dull", "poor"], "pos": ["good", "great", "lovely", "superb"]}
FILLER = ["the", "film", "was", "a", "story", "with", "very", "plot", "actors", "and", "its"]
ENTITIES = [("Peter Blackburn", "PER"), ("Johannesburg", "LOC"), ("Amsterdam", "LOC"), ("Microsoft", "ORG"),
            ("European Commission", "ORG")]
TAG_FILLER = ["the", "said", "in", "visited", "today", "and", "met", "."]


def sentence(polarity):
    words = [rng.choice(FILLER) for _ in range(rng.randint(2, 6))]
    words.insert(rng.randint(0, len(words)), rng.choice(POLARITY[polarity]))
    return " ".join(words)


def mrpc(path, n, labelled=True):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\ufeff" + ("Quality" if labelled else "index") + "\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
        for i in range(n):
            a, b = rng.choice(["neg", "pos"]), rng.choice(["neg", "pos"])
            first = ("1" if a == b else "0") if labelled else str(i)
            f.write(f"{first}\t{2 * i}\t{2 * i + 1}\t{sentence(a)}\t{sentence(b)}\n")


def conll(path, n, labelled=True):
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            if i % 5 == 0:
                f.write("-DOCSTART- -X- -X- O\n\n")
            words = [(w, "O") for w in rng.sample(TAG_FILLER, rng.randint(2, 5))]
            entity, kind = rng.choice(ENTITIES)
            at = rng.randint(0, len(words))
            words[at:at] = [(w, ("B-" if j == 0 else "I-") + kind) for j, w in enumerate(entity.split())]
            for w, tag in words:
                f.write(f"{w} NN I-NP {tag}\n" if labelled else f"{w}\n")
            f.write("\n")


if task == "classification":
    mrpc("raw/train.tsv", 80)
    mrpc("raw/dev.tsv", 16)
    mrpc("raw/test.tsv", 6, labelled=False)
elif task == "tagging":
    conll("raw/train.conll", 60)
    conll("raw/dev.conll", 10)
    conll("raw/test.conll", 4, labelled=False)
else:
    sys.exit(f"unknown TASK {task!r}: classification or tagging")
EOF

if [[ $task == classification ]]; then
    columns=('text_columns=["#1 String","#2 String"]' label_column=Quality)
    metric=accuracy
    lines=$'a good film\tthe plot was lovely\nthe actors were dull\ta great story\n'
else
    columns=()
    metric=f1
    lines=$'Peter Blackburn visited Amsterdam today\nthe European Commission said\n'
fi

seqkit-preprocess task="$task" trainpref=raw/train validpref=raw/dev testpref=raw/test destdir=data-bin \
    "${columns[@]}" tokenizer=sentencepiece_bpe tokenizer.vocab_size=60 tokenizer.num_threads=1

seqkit-train task="$task" task.data=data-bin model="$model" criterion=cross_entropy common.threads=1 \
    optimizer.lr=1e-2 lr_scheduler=fixed optimization.max_update=12 dataset.max_tokens=256 \
    checkpoint.save_dir=checkpoints checkpoint.best_checkpoint_metric=$metric \
    checkpoint.maximize_best_checkpoint_metric=true

# the dev split, with its gold labels: S-/T-/L- lines (classification, with the 2 best labels) or
# 'word gold pred' (tagging: one tag per word, so no topk)
topk=(); [[ $task == classification ]] && topk=(topk=2)
seqkit-generate path=checkpoints/checkpoint_best.pt task.data=data-bin gen_subset=valid "${topk[@]}" \
    common.threads=1 > gen.txt

seqkit-score hyp=gen.txt | tee score.txt

# the test split has no labels: predictions only
seqkit-generate path=checkpoints/checkpoint_best.pt task.data=data-bin gen_subset=test common.threads=1 \
    results_path=predict

# raw lines: a tab between the sentences of a pair; the words of a sentence to tag
printf '%s' "$lines" | seqkit-generate path=checkpoints/checkpoint_best.pt input=- "${topk[@]}" common.threads=1 \
    > stdin.txt
cat stdin.txt
