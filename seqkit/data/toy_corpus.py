"""A small synthetic German->English corpus that seqkit makes itself, for the quickstart and the
end-to-end tests: no download, learnable by a tiny model in minutes.

The grammar has what makes translation non-trivial in miniature: gendered articles and
accusative case (der -> den), adjective agreement, and German verb-final subordinate clauses.

    python -m seqkit.data.toy_corpus OUTDIR [--train 3000 --valid 200 --test 200 --seed 1]

writes OUTDIR/{train,valid,test}.{de,en}.
"""

from __future__ import annotations

import argparse
import os
import random
from typing import List, Tuple

# noun: (gender, German singular, English)
NOUNS = [
    ("m", "Hund", "dog"), ("f", "Katze", "cat"), ("m", "Mann", "man"), ("f", "Frau", "woman"),
    ("n", "Kind", "child"), ("m", "Vogel", "bird"), ("m", "Junge", "boy"), ("n", "Mädchen", "girl"),
    ("n", "Pferd", "horse"), ("f", "Lehrerin", "teacher"), ("m", "Koch", "cook"), ("f", "Maus", "mouse"),
]
ADJECTIVES = [("groß", "big"), ("klein", "small"), ("alt", "old"), ("jung", "young"), ("schnell", "fast"),
              ("müde", "tired"), ("glücklich", "happy"), ("braun", "brown")]
INTRANSITIVE = [("läuft", "runs"), ("spielt", "plays"), ("schläft", "sleeps"), ("springt", "jumps"),
                ("wartet", "waits"), ("singt", "sings")]
TRANSITIVE = [("sieht", "sees"), ("sucht", "looks for"), ("mag", "likes"), ("ruft", "calls"), ("findet", "finds")]
PLACES = [("im Park", "in the park"), ("am Strand", "on the beach"), ("im Schnee", "in the snow"),
          ("auf der Straße", "on the street"), ("im Garten", "in the garden"), ("vor dem Haus", "in front of the house")]
CONJ = [("weil", "because"), ("obwohl", "although"), ("während", "while")]

_ARTICLE = {("m", "nom"): "der", ("f", "nom"): "die", ("n", "nom"): "das",
            ("m", "acc"): "den", ("f", "acc"): "die", ("n", "acc"): "das"}


def _noun_phrase(rng: random.Random, case: str) -> Tuple[str, str]:
    gender, de, en = rng.choice(NOUNS)
    art = _ARTICLE[(gender, case)]
    if rng.random() < 0.5:
        adj_de, adj_en = rng.choice(ADJECTIVES)
        # weak adjective ending after a definite article: -en for masculine accusative, else -e
        ending = "en" if (gender, case) == ("m", "acc") else "e"
        stem = adj_de[:-1] if adj_de.endswith("e") else adj_de
        return f"{art} {stem}{ending} {de}", f"the {adj_en} {en}"
    return f"{art} {de}", f"the {en}"


def _clause(rng: random.Random) -> Tuple[List[str], List[str], str, str]:
    """Subject, verb, rest: German main-clause order and its pieces for verb-final reordering."""
    subj_de, subj_en = _noun_phrase(rng, "nom")
    if rng.random() < 0.5:
        verb_de, verb_en = rng.choice(TRANSITIVE)
        obj_de, obj_en = _noun_phrase(rng, "acc")
        rest_de, rest_en = [obj_de], [obj_en]
    else:
        verb_de, verb_en = rng.choice(INTRANSITIVE)
        rest_de, rest_en = [], []
    if rng.random() < 0.5:
        place_de, place_en = rng.choice(PLACES)
        rest_de.append(place_de)
        rest_en.append(place_en)
    return [subj_de] + rest_de, [subj_en, verb_en] + rest_en, verb_de, subj_de


def sentence_pair(rng: random.Random) -> Tuple[str, str]:
    main_de, main_en, verb_de, _ = _clause(rng)
    de = [main_de[0], verb_de] + main_de[1:]
    en = list(main_en)
    if rng.random() < 0.4:
        conj_de, conj_en = rng.choice(CONJ)
        sub_de, sub_en, sub_verb, _ = _clause(rng)
        de = de + [",", conj_de] + sub_de + [sub_verb]  # German subordinate clause: verb last
        en = en + [conj_en] + sub_en
    de_text = " ".join(de).replace(" ,", ",") + "."
    en_text = " ".join(en) + "."
    return de_text[0].upper() + de_text[1:], en_text[0].upper() + en_text[1:]


def make_corpus(out_dir: str, n_train: int = 3000, n_valid: int = 200, n_test: int = 200, seed: int = 1) -> None:
    """Write ``{train,valid,test}.{de,en}`` into ``out_dir``; test pairs never occur in train."""
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    seen = set()
    splits = {}
    for split, n in (("test", n_test), ("valid", n_valid), ("train", n_train)):
        pairs = []
        while len(pairs) < n:
            pair = sentence_pair(rng)
            if pair in seen:  # held-out sentences are unique and never occur in train
                continue
            if split != "train":
                seen.add(pair)
            pairs.append(pair)
        splits[split] = pairs
    for split, pairs in splits.items():
        for side, lang in ((0, "de"), (1, "en")):
            with open(os.path.join(out_dir, f"{split}.{lang}"), "w", encoding="utf-8") as f:
                f.writelines(p[side] + "\n" for p in pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--train", type=int, default=3000)
    ap.add_argument("--valid", type=int, default=200)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    make_corpus(a.out_dir, a.train, a.valid, a.test, a.seed)


if __name__ == "__main__":
    main()
