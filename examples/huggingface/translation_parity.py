"""A seqkit translation model exported to HuggingFace (FSMTForConditionalGeneration for seqkit's
Transformer) translates a test set as seqkit does: how many of its sentences differ.

    python examples/huggingface/translation_parity.py CHECKPOINT HF_FOLDER SOURCE [BEAM] [BATCH] [OUT_JSON]

Exports CHECKPOINT to HF_FOLDER (seqkit-export format=huggingface); translates every line of SOURCE
(a text file, .gz read too) with seqkit's engine (``Translator``, what seqkit-generate runs, batches
of 64) and with ``transformers``' ``generate`` on the folder loaded by ``from_pretrained``, reading
the ids ``AutoTokenizer`` gives (BATCH sentences a call, default 1: no padding). The searches are
set alike: beam BEAM (default 5), length penalty 1, at most 200 tokens then </s>, no <pad> or <s>
generated, ``early_stopping=True`` (both stop a sentence when BEAM hypotheses have ended). Prints
and writes one JSON object: sentences, how many differ in tokens and in detokenized text, both wall
times, and the first differences.
"""

import gzip
import json
import sys
import time

import torch

from seqkit.generation.translator import Translator
from seqkit.hf.convert import export_folder


def main() -> None:
    path, folder, source = sys.argv[1:4]
    beam = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    out_json = sys.argv[6] if len(sys.argv) > 6 else ""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    opener = gzip.open if source.endswith(".gz") else open
    with opener(source, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    export_folder(path, folder, overwrite=True)
    translator = Translator.from_checkpoint(path, beam=beam, lenpen=1.0, max_len_a=0, max_len_b=200, min_len=1)
    task = translator.task
    start = time.perf_counter()
    src = [task.encode_source(line) for line in lines]
    ours = [None] * len(lines)
    for out in translator.generate_batches(src, 64):  # longest first, each with its id
        ours[out["id"]] = out["hypos"][0]["tokens"].tolist()
    seqkit_s = time.perf_counter() - start

    tok = AutoTokenizer.from_pretrained(folder)
    hf = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    banned = [task.tgt_dict.pad(), task.tgt_dict.bos()]
    theirs = []
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(lines), batch):
            enc = tok(lines[i : i + batch], return_tensors="pt", padding=True)
            gen = hf.generate(**enc, num_beams=beam, do_sample=False, max_new_tokens=201, min_new_tokens=1,
                              early_stopping=True, length_penalty=1.0, suppress_tokens=banned)
            for row in gen[:, 1:].tolist():  # after the decoder's start token
                while row and row[-1] == task.tgt_dict.pad():
                    row.pop()
                theirs.append(row)
    hf_s = time.perf_counter() - start

    ids_same = sum(a == b for a, b in zip(ours, theirs))
    text = [(task.detokenize(task.pieces(a[:-1])), tok.decode(b, skip_special_tokens=True)) for a, b in zip(ours, theirs)]
    text_same = sum(a == b for a, b in text)
    input_same = sum(s == tok(line)["input_ids"] for s, line in zip(src, lines))
    report = {"sentences": len(lines), "beam": beam, "hf_batch": batch, "source_ids_identical": input_same,
              "translations_identical_ids": ids_same, "differ_ids": len(lines) - ids_same,
              "differ_text": len(lines) - text_same, "seqkit_s": round(seqkit_s, 1), "transformers_s": round(hf_s, 1),
              "hf_class": hf.config.architectures[0],
              "first_differences": [{"line": i, "seqkit": text[i][0], "transformers": text[i][1]}
                                    for i in range(len(lines)) if ours[i] != theirs[i]][:5]}
    print(json.dumps(report, ensure_ascii=False))
    if out_json:
        with open(out_json, "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=2)


if __name__ == "__main__":
    main()
