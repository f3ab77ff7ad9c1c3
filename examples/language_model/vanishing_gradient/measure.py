"""The vanishing gradient, measured: ||dL_T / dh_{T-k}|| against the distance k for an Elman RNN, a GRU
and an LSTM language model of the same width, on the same data, at initialisation and after updates.

    python examples/language_model/vanishing_gradient/measure.py DATA OUT_DIR [--cells rnn,gru,lstm]
        [--embed-dim 128] [--hidden-dim 128] [--layers 1] [--length 64] [--distance K] [--updates 500]
        [--measure-at 0,100,500] [--batch-size 32] [--lr 0.002] [--clip 0.25] [--measure-batches 8]
        [--seed 1] [--threads 2] [--name NAME]

DATA: a folder of seqkit-preprocess task=language_modeling (WikiText-2's from
examples/language_model/wikitext2/prepare.sh). Each cell's model is lstm_lm with model.cell set, the
same sizes, built after torch.manual_seed(--seed). Training: --updates Adam steps (--lr, gradient
norm clipped to --clip, no dropout) on batches of --batch-size blocks of --length + 1 tokens drawn at
random offsets of the train stream, the same draws for every cell; the loss is the mean NLL of every
position. Measurement (seqkit.analysis.gradients, its docstring has the protocol), at each count of
--measure-at: --measure-batches fixed batches of valid blocks (evenly spaced over the valid stream,
the same for every cell and count), the gradient of the last position's loss with respect to each
earlier state, its norm per sequence, the mean and median over sequences for k = 0 .. --distance
(default --length - 1), on a float64 copy of the model (float32 underflows to 0 past 1e-45), beside
the mean valid NLL of those blocks. Writes OUT_DIR/results.json and, with matplotlib,
OUT_DIR/gradients.png (as seqkit-plot gradients draws it)."""

import argparse
import copy
import json
import os
import shlex
import sys
import time

import numpy as np
import torch

from seqkit.analysis.gradients import gradient_profile
from seqkit.analysis.plot import write_gradients
from seqkit.core.errors import SeqkitError
from seqkit.core.registry import MODELS
from seqkit.data.dictionary import Dictionary
from seqkit.data.indexed_dataset import IndexedDataset
from seqkit.models.lstm_lm import LSTMLMConfig

p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
p.add_argument("data")
p.add_argument("out")
p.add_argument("--cells", default="rnn,gru,lstm")
p.add_argument("--embed-dim", type=int, default=128)
p.add_argument("--hidden-dim", type=int, default=128)
p.add_argument("--layers", type=int, default=1)
p.add_argument("--length", type=int, default=64, help="input tokens T of a block (the scored one is the T + 1th)")
p.add_argument("--distance", type=int, help="largest distance K measured (default: --length - 1)")
p.add_argument("--updates", type=int, default=500)
p.add_argument("--measure-at", help="update counts to measure at, comma-separated (default: 0 and --updates)")
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--lr", type=float, default=0.002)
p.add_argument("--clip", type=float, default=0.25)
p.add_argument("--measure-batches", type=int, default=8)
p.add_argument("--seed", type=int, default=1)
p.add_argument("--threads", type=int, default=2)
p.add_argument("--name", help="the data's name in the picture's title (default: DATA's folder name)")
args = p.parse_args()
K = args.length - 1 if args.distance is None else args.distance
at = sorted({int(x) for x in (args.measure_at or f"0,{args.updates}").split(",")})
if not 0 <= K < args.length or at[0] < 0 or at[-1] > args.updates:
    sys.exit("measure.py: error: --distance must be below --length, --measure-at within 0 .. --updates")
torch.set_num_threads(args.threads)
os.makedirs(args.out, exist_ok=True)

dictionary = Dictionary.load(os.path.join(args.data, "dict.text.txt"))
train = np.asarray(IndexedDataset(os.path.join(args.data, "train.text")).tokens, dtype=np.int64)
valid = np.asarray(IndexedDataset(os.path.join(args.data, "valid.text")).tokens, dtype=np.int64)
span = args.length + 1
n_valid = args.measure_batches * args.batch_size
if len(valid) < n_valid * span:  # disjoint blocks, so no sequence is measured twice
    sys.exit(f"measure.py: error: the valid split has {len(valid)} tokens, fewer than {n_valid} blocks of {span}")
starts = np.linspace(0, len(valid) - span, n_valid).astype(np.int64)
measured = [torch.from_numpy(np.stack([valid[s : s + span] for s in chunk]))
            for chunk in np.split(starts, args.measure_batches)]  # each (B, T + 1)


def train_batches():
    """The same draws for every cell: --batch-size blocks at random offsets of the train stream."""
    rng = np.random.default_rng(args.seed)
    while True:
        offsets = rng.integers(0, len(train) - span + 1, size=args.batch_size)
        yield torch.from_numpy(np.stack([train[o : o + span] for o in offsets]))


def nll(model, block):
    """Mean NLL of every position of ``block`` ``(B, T + 1)``."""
    lengths = torch.full((block.size(0),), args.length)
    return -model(block[:, :-1], lengths, target=block[:, 1:]).mean()


def measure(model, cell, updates, started):
    # on a float64 copy: far gradients pass float32's smallest number (1e-45) and would read 0
    profile = gradient_profile(copy.deepcopy(model).double(), measured, K)
    model.eval()
    with torch.no_grad():
        loss = float(torch.stack([nll(model, b) for b in measured]).mean())
    model.train()
    row = {"cell": cell, "updates": updates, "valid_loss": round(loss, 4), **profile,
           "parameters": sum(p.numel() for p in model.parameters()), "seconds": round(time.time() - started, 1)}
    mean = profile["mean"]
    print(f"{cell} after {updates} updates: valid loss {loss:.4f}; mean ||dL/dh|| k=0 {mean[0]:.3e}, "
          f"k={K // 2} {mean[K // 2]:.3e}, k={K} {mean[K]:.3e}", flush=True)
    return row


runs = []
for cell in args.cells.split(","):
    torch.manual_seed(args.seed)
    cfg = LSTMLMConfig(cell=cell, embed_dim=args.embed_dim, hidden_dim=args.hidden_dim, layers=args.layers, dropout=0.0)
    model = MODELS.build(cfg, dictionary)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    started = time.time()
    batches = train_batches()
    for update in range(args.updates + 1):
        if update in at:
            runs.append(measure(model, cell, update, started))
        if update == args.updates:
            break
        loss = nll(model, next(batches))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()

size = f"{args.layers} x {args.hidden_dim}, embeddings {args.embed_dim}"
result = {
    "title": f"{args.name or os.path.basename(os.path.abspath(args.data))}: {size}, blocks of {args.length}, "
             f"mean over {n_valid} valid blocks",
    "command": " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv]),
    "settings": vars(args), "distances": list(range(K + 1)), "train_tokens": len(train), "valid_tokens": len(valid),
    "torch": torch.__version__, "runs": runs,
}
path = os.path.join(args.out, "results.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(result, f, indent=1)
print(f"wrote {path}", flush=True)
try:  # what `seqkit-plot gradients OUT_DIR/results.json output=OUT_DIR/gradients.png` draws
    write_gradients(os.path.join(args.out, "gradients.png"), [result], [""])
    print(f"wrote {os.path.join(args.out, 'gradients.png')}", flush=True)
except SeqkitError as e:  # no matplotlib: the results stand without the picture
    print(f"no picture: {e}", file=sys.stderr)
