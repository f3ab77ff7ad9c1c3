"""Where a word2vec update's time goes, outside the trainer: collate (subsampling, windows, noise
words), forward, backward, gradient norm (the trainer's clip_sparse), optimizer step; milliseconds
per update on 1 thread. README.md, "Where an update's time goes".

    python examples/word2vec/phases.py wt2-w2v/data-bin skipgram 100            # model.kernel=auto
    python examples/word2vec/phases.py wt2-w2v/data-bin skipgram 100 4096 torch # the torch path
"""

import sys
import time

import torch

from seqkit.criteria.word2vec import NegativeSamplingConfig
from seqkit.models.word2vec import Word2VecConfig
from seqkit.optim.optimizers import SparseAdamConfig, build_sparse_adam
from seqkit.tasks.word2vec import Word2VecTask, Word2VecTaskConfig
from seqkit.training.precision import clip_sparse


def main(data: str, mode: str = "skipgram", n: int = 100, max_tokens: int = 4096, kernel: str = "auto") -> None:
    torch.set_num_threads(1)
    task = Word2VecTask(Word2VecTaskConfig(data=data, mode=mode))
    dataset = task.load_dataset("train")
    model = task.build_model(Word2VecConfig(kernel=kernel))
    criterion = task.build_criterion(NegativeSamplingConfig())
    optimizer = build_sparse_adam(SparseAdamConfig(lr=0.04, impl=kernel), model.parameters())
    times = dict(collate=0.0, forward=0.0, backward=0.0, norm=0.0, step=0.0)
    words, counts = 0, dict(predictions=0, noise_words=0, distinct_context_words=0, output_rows_touched=0)
    for batch in dataset.batches(max_tokens, 0, 1, 1)[:n]:
        t = [time.perf_counter()]
        sample = dataset.collate(batch)
        t.append(time.perf_counter())
        optimizer.zero_grad(set_to_none=True)
        loss, _, _ = criterion(model, sample)
        t.append(time.perf_counter())
        loss.backward()
        t.append(time.perf_counter())
        clip_sparse(list(model.parameters()), 0.0)
        t.append(time.perf_counter())
        optimizer.step()
        t.append(time.perf_counter())
        for i, k in enumerate(times):
            times[k] += t[i + 1] - t[i]
        words += sample["raw_words"]
        context, target = sample["net_input"]["context"], sample["target"]  # (P, C), (P, 1 + k)
        counts["predictions"] += target.size(0)
        counts["noise_words"] += target[:, 1:].numel()
        counts["distinct_context_words"] += context[context != task.dictionary.pad()].unique().numel()
        counts["output_rows_touched"] += target.unique().numel()
    total = sum(times.values())
    print(f"{mode}, kernel {kernel}, {n} updates of {max_tokens} words, ms per update:",
          ", ".join(f"{k} {1000 * v / n:.2f}" for k, v in times.items()),
          f"| total {1000 * total / n:.2f} | raw words/s {words / total:,.0f}")
    print(f"per update (means, not timed): {', '.join(f'{k} {v / n:,.0f}' for k, v in counts.items())}; "
          f"vocabulary {len(task.dictionary):,}")


if __name__ == "__main__":
    main(sys.argv[1], *(sys.argv[2:3]), *(int(a) for a in sys.argv[3:5]), *(sys.argv[5:6]))
