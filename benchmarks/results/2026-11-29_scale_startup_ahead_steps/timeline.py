import time, sys, os
T0 = time.perf_counter()
def stamp(msg): print(f"[{time.perf_counter()-T0:7.3f}] {msg}", file=sys.stderr, flush=True)
import runpy, functools
stamp("start")
import torch; stamp("torch imported")
import seqkit.training.trainer as tr; stamp("trainer imported")
from seqkit.training import ahead as ah
def wrap(obj, name):
    f = getattr(obj, name)
    @functools.wraps(f)
    def g(*a, **k):
        stamp(f"> {name}"); r = f(*a, **k); stamp(f"< {name}"); return r
    setattr(obj, name, g)
for n in ("__init__", "run", "_train_set", "_epoch", "train_step", "maybe_resume"): wrap(tr.Trainer, n)
for n in ("dataset", "batches"): wrap(ah.Ahead, n)
from seqkit.core import registry
wrap(registry.OPTIMIZERS, "build"); wrap(registry.TASKS, "build")
import seqkit.data.pair_dataset as pd
wrap(pd.LanguagePairDataset, "batches")
sys.argv = ["seqkit-train"] + sys.argv[1:]
runpy.run_module("seqkit.cli.train", run_name="__main__")
