"""dtype casts in one training update: autocast over fp32 weights against bf16 weights with fp32
masters (``common.param_dtype``), counted on the CPU with seqkit's CUDA-only paths forced on.

    python benchmarks/casts.py                                   # transformer_base, 16k-token update
    python benchmarks/casts.py --model transformer_big --max-tokens 65536

Every cast is a kernel launch on a GPU. A ``TorchDispatchMode`` sees each aten op of the update
(forward, loss, backward, clipping, the optimizer step) and counts ``_to_copy``, ``copy_`` between
dtypes, and any op whose floating output differs from its first floating input (a log-softmax to
fp32). The CUDA-only paths a GPU takes are forced on (:func:`as_on_a_gpu`): the lean bf16 loss, SDPA
in bf16 without the CPU's fp32 detour, the padding mask always passed, torch's fused Adam. The corpus
is seqkit's synthetic toy corpus with a 16k vocabulary's worth of words repeated (only the counts
matter, not the text). Prints one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
from typing import Any, Dict

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

aten = torch.ops.aten


class CastCounter(TorchDispatchMode):
    """Counts dtype conversions: ``_to_copy`` and ``copy_`` between dtypes, and any other op whose
    floating output differs from its first floating input's dtype (log_softmax to fp32, a promoted add)."""

    def __init__(self):
        super().__init__()
        self.casts: Dict[Any, int] = collections.Counter()  # (op, from, to) -> count

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        op = func.overloadpacket
        if op is aten.copy_:
            src, dst = args[1].dtype, args[0].dtype
        else:
            ins = [a for a in tree_leaves((args, kwargs or {})) if isinstance(a, torch.Tensor)]
            outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
            if not ins or not outs:
                return out
            src = ins[0].dtype if op is aten._to_copy else next((a.dtype for a in ins if a.is_floating_point()), None)
            dst = outs[0].dtype
            if op is not aten._to_copy and (src is None or not dst.is_floating_point):
                return out
        if src != dst:
            self.casts[(op.__name__, str(src).split(".")[-1], str(dst).split(".")[-1])] += 1
        return out

    @property
    def total(self) -> int:
        return sum(self.casts.values())


def as_on_a_gpu(setattr_: Any) -> None:
    """seqkit's CUDA-only paths on the CPU: the lean loss, SDPA in bf16 (no fp32 detour), the
    encoder's padding mask always passed. ``setattr_``: pytest's ``monkeypatch.setattr`` or ``setattr``."""
    import seqkit.criteria.cross_entropy as cross_entropy
    import seqkit.models.modules.attention as attention
    import seqkit.models.transformer as transformer

    def attend(q, k, v, mask, p, causal, scale=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal, scale=scale)

    setattr_(cross_entropy, "LEAN_DEVICES", ("cuda", "cpu"))
    setattr_(attention, "attend", attend)
    setattr_(transformer, "padding_mask", lambda keep, padded=None: keep[:, None, None, :])


def count(model: str, max_tokens: int, work: str) -> Dict[str, Any]:
    """Casts in the second update (the first builds the optimizer's state) at bf16, autocast and bf16 weights."""
    from omegaconf import OmegaConf

    import seqkit
    from seqkit.cli.common import ConfigBuilder
    from seqkit.data.toy_corpus import make_corpus
    from seqkit.preprocess.text import PreprocessConfig, preprocess
    from seqkit.tokenizers.space import SpaceConfig
    from seqkit.training.config import TrainConfig
    from seqkit.training.trainer import Trainer

    seqkit.import_builtin_components()
    raw, data = os.path.join(work, "raw"), os.path.join(work, "bin")
    if not os.path.isdir(data):
        make_corpus(raw, n_train=4000, n_valid=20, n_test=10)
        preprocess(PreprocessConfig(source_lang="de", target_lang="en", trainpref=f"{raw}/train",
                                    validpref=f"{raw}/valid", destdir=data, tokenizer=SpaceConfig()))
    as_on_a_gpu(setattr)
    result: Dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    for name, param_dtype in (("autocast", "fp32"), ("bf16_weights", "bf16")):
        overrides = [f"task.data={data}", f"checkpoint.save_dir={work}/ck", "checkpoint.no_save=true",
                     f"model={model}", f"dataset.max_tokens={max_tokens}", "common.precision=bf16",
                     f"common.param_dtype={param_dtype}", "optimizer.impl=fused", "common.log_format=json"]
        trainer = Trainer(OmegaConf.to_object(ConfigBuilder("train", TrainConfig).compose(overrides)))
        ds = trainer._load("train")
        batches = ds.batches(max_tokens, seed=1, epoch=1)[:2]
        trainer.train_step([ds.collate(batches[0])])
        sample = ds.collate(batches[1])
        with CastCounter() as counter:
            trainer.train_step([sample])
        result[name] = counter.total
        result[f"{name}_by_op"] = {"/".join(k): v for k, v in sorted(counter.casts.items())}
        result[f"{name}_target_tokens"] = sample["ntokens"]
        del trainer
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="transformer_base", help="a registered Transformer preset")
    ap.add_argument("--max-tokens", type=int, default=16384, help="the update's token budget")
    ap.add_argument("--workdir", help="where the toy corpus is binarized (default: a temporary folder)")
    args = ap.parse_args()
    if args.max_tokens <= 0:
        sys.exit(f"benchmarks/casts.py: --max-tokens {args.max_tokens}: give a positive token budget")
    work = args.workdir or tempfile.mkdtemp(prefix="seqkit-casts-")
    print(json.dumps({"torch": torch.__version__, **count(args.model, args.max_tokens, work)}))


if __name__ == "__main__":
    main()
