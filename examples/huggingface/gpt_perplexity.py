"""The WikiText-2 GPT (full softmax over BPE pieces) exported to GPT2LMHeadModel: the same perplexity
through transformers as through seqkit-eval-lm, block for block.

    python examples/huggingface/gpt_perplexity.py CHECKPOINT DATA_DIR HF_FOLDER [SPLIT] [TOKENS_PER_SAMPLE]

Exports CHECKPOINT to HF_FOLDER (seqkit-export format=huggingface), then scores SPLIT of DATA_DIR in
the blocks seqkit-eval-lm reads (no context window): once with seqkit's model, once with the
exported folder loaded by transformers' from_pretrained in this process, feeding it the same input
ids. Prints one JSON line: both perplexities, the largest per-token log-probability difference.
"""

import json
import math
import sys

import torch

from seqkit.core.checkpoints import load_for_inference
from seqkit.hf.convert import export_folder


def main() -> None:
    path, data, folder = sys.argv[1:4]
    split = sys.argv[4] if len(sys.argv) > 4 else "valid"
    block = int(sys.argv[5]) if len(sys.argv) > 5 else 128
    from transformers import GPT2LMHeadModel

    export_folder(path, folder, overwrite=True)
    hf = GPT2LMHeadModel.from_pretrained(folder).eval()
    task, model = load_for_inference(path, {"data": data, "tokens_per_sample": block, "context_window": 0})
    model.eval()
    from seqkit.core import checkpoints

    hf_info = checkpoints.load(path).get("hf")  # an imported model: seqkit ids -> HF ids; else the same ids
    ids = torch.tensor(hf_info["vocab"]["hf_ids"]) if hf_info else torch.arange(len(task.dictionary))
    ds = task.load_dataset(split, context_window=0)
    nll = {"seqkit": 0.0, "transformers": 0.0}
    worst, count = 0.0, 0
    with torch.inference_mode():
        for batch in ds.batches(8192, shuffle=False):
            sample = ds.collate(batch)
            src, target = sample["net_input"]["src_tokens"], sample["target"]  # (B, T)
            keep = target.ne(task.ignore_index)
            ours = model(**sample["net_input"], target=target).double()  # (B, T) log-probs of the targets
            keep_in = src.ne(task.dictionary.pad())
            logits = hf(input_ids=ids[src].clamp(min=0), attention_mask=keep_in.long()).logits  # (B, T, W)
            theirs = logits.double().log_softmax(-1).gather(-1, ids[target].clamp(min=0).unsqueeze(-1)).squeeze(-1)
            nll["seqkit"] -= float(ours[keep].sum())
            nll["transformers"] -= float(theirs[keep].sum())
            worst = max(worst, float((ours - theirs)[keep].abs().max()))
            count += int(keep.sum())
    out = {"split": split, "tokens": count, "tokens_per_sample": block,
           "ppl_seqkit": round(math.exp(nll["seqkit"] / count), 4),
           "ppl_transformers": round(math.exp(nll["transformers"] / count), 4),
           "max_abs_logprob_diff": worst}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
