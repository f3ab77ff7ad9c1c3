"""Linear probes on a pretrained model's frozen layers, with control tasks (Hewitt & Liang, 2019).

``seqkit-probe path=CHECKPOINT data=FOLDER`` reads every layer of a pretraining checkpoint (GPT,
the LSTM LM, ELMo, the BERT family, ELECTRA's discriminator, BART/T5's encoder and decoder) over a
tagging folder (one label per word, read at the word's first piece) or a classification folder
(one label per sentence, read where the model pools a sentence), both binarized with the
checkpoint's vocabulary (``seqkit-preprocess ... vocab_from=CHECKPOINT``). For each layer a
linear softmax probe is trained on the training split's frozen vectors and scored on ``split``;
so is one on a learned scalar mix of all layers (Tenney et al., 2019: softmax-normalized layer
weights and a scale, reported). Beside each per-word task runs its *control task*: every word
type gets a fixed random label drawn from the task's label distribution, so a probe can only
score by memorizing word types; *selectivity* = task accuracy - control accuracy says how much of
a probe's accuracy the representation, not the probe, provides. Each figure is also given over
only the words whose gold label is not the training split's most frequent one (``rare_``): where
one label dominates (NER: ~83% of words are ``O``) that is what the probe finds beyond it.

Layer 0 is what the first layer reads (token embeddings, with positions where the model adds
them); layer i the output of the i-th layer (BART/T5: the encoder's, then the decoder's reading
the sentence shifted right, as fine-tuning reads it).
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from seqkit.core.config import arg
from seqkit.core.errors import SeqkitError

log = logging.getLogger("seqkit.probe")


@dataclass
class ProbeConfig:
    path: str = arg("", "pretraining checkpoint whose layers are probed (required)")
    data: str = arg("", "tagging or classification folder binarized with the checkpoint's vocabulary (required)")
    split: str = arg("valid", "the split the probes are scored on (trained on train): where a layer is chosen")
    report: str = arg("", "also score every probe on this split (e.g. test: CoNLL's testb), once; the summary "
                          "names the layer best on `split` and its score here, the figure to quote")
    layers: List[int] = arg(help="the layers to probe (empty: all; 0 = the embeddings)", factory=list)
    random_init: bool = arg(False, "probe the checkpoint's architecture with fresh random weights instead "
                                   "(the baseline every layer should beat)")
    control: bool = arg(True, "per-word tasks: also probe the control task (word type -> fixed random label)")
    mix: bool = arg(True, "also probe a learned scalar mix of the layers")
    epochs: int = arg(20, "passes of each probe over the training vectors", ge=1)
    lr: float = arg(0.01, "Adam's learning rate for the probes (the vectors are standardized per layer)", gt=0)
    batch_size: int = arg(1024, "vectors per probe update", ge=1)
    max_train: int = arg(0, "use at most this many training vectors (sentences whole, first ones; 0: all)", ge=0)
    pooling: str = arg("auto", "sentence labels: where a sentence is read (auto: the model's own: first for BERT's "
                               "[CLS], last for GPT and the LSTM LM, mean for ELMo)",
                       choices=("auto", "first", "last", "mean"))
    seed: int = arg(1, "seed of the random body, the control labels and the probes")
    output: str = arg("", "write the results as JSON to this file (and a .md table and a .png beside it)")
    threads: int = arg(0, "CPU threads (0: torch's default)", ge=0)


def check_settings(cfg: ProbeConfig) -> None:
    """Refuse a split the figures would be meaningless on: the probes' own training split (scored
    there, a probe reports what it memorized), and a report split that is the chosen one."""
    for name in ("split", "report"):
        if getattr(cfg, name) == "train":
            raise SeqkitError(f"{name}=train: the probes are trained on train, so their score there measures "
                              "memorization, not the representation: score on a held-out split (split=valid, "
                              "report=test)")
    if cfg.report and cfg.report == cfg.split:
        raise SeqkitError(f"report={cfg.report} is the split layers are chosen on: report another (e.g. test)")


# -- every layer of a model --------------------------------------------------------------------------
def _stacks(model: nn.Module) -> List[Tuple[str, nn.ModuleList]]:
    """The model's Transformer layer stacks, in the order its forward pass runs them."""
    from seqkit.models.transformer import TransformerModel
    from seqkit.models.transformer_encoder import TransformerEncoder
    from seqkit.models.transformer_lm import TransformerLM

    if isinstance(model, TransformerModel):
        return [("encoder", model.encoder_layers), ("decoder", model.decoder_layers)]
    if isinstance(model, TransformerLM):
        return [("", model.layers)]
    encoder = getattr(model, "encoder", None)
    if isinstance(encoder, TransformerEncoder):  # BERT family, ELECTRA's discriminator
        return [("", encoder.layers)]
    return []


def layer_names(model: nn.Module) -> List[str]:
    """Names of the layers :func:`layer_features` returns, in order."""
    stacks = _stacks(model)
    if stacks:
        names = []
        for prefix, layers in stacks:
            n = model.cfg.encoder_layers if getattr(model.cfg, "share_layers", False) else len(layers)
            names += [f"{prefix}{'.' if prefix else ''}{i}" for i in range(n + 1)]
        return names
    layers = getattr(model, "transfer_layers", 0) or (model.cfg.layers + 1 if hasattr(model, "lstm") else 0)
    if not layers:
        raise SeqkitError(f"probing reads the layers of pretraining models (GPT, LSTM LM, ELMo, BERT family, "
                          f"ELECTRA, BART/T5), not {type(model).__name__}")
    return [str(i) for i in range(layers)]


def layer_features(model: nn.Module, src_tokens: torch.Tensor, src_lengths: torch.Tensor,
                   segments: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """Every layer's vectors ``(B, S, C_l)`` of right-padded ``src_tokens`` ``(B, S)``, model in eval mode."""
    stacks = _stacks(model)
    if stacks:
        out: List[torch.Tensor] = []
        hooks = []
        for _, layers in stacks:  # what the first layer reads, then every layer's output (ALBERT: each call)
            seen: List[bool] = []

            def first_input(m: nn.Module, args: Tuple[Any, ...], seen: List[bool] = seen) -> None:
                if not seen:  # (a shared layer is called once per layer)
                    seen.append(True)
                    out.append(args[0])

            hooks.append(layers[0].register_forward_pre_hook(first_input))
            for layer in layers:
                hooks.append(layer.register_forward_hook(
                    lambda m, args, y: out.append(y[0] if isinstance(y, tuple) else y)))  # (DecoderLayer: a tuple)
        try:
            model.transfer_features(src_tokens, src_lengths, segments)
        finally:
            for h in hooks:
                h.remove()
        return out
    if hasattr(model, "layer_representations"):  # ELMo: (L + 1, B, S, 2H)
        return list(model.layer_representations(src_tokens, src_lengths).unbind(0))
    if isinstance(getattr(model, "lstm", None), nn.RNNBase):  # the LSTM LM (any cell): its layers one at a time
        return _lstm_layers(model.lstm, model.embed(src_tokens))
    raise SeqkitError(f"probing does not know the layers of {type(model).__name__}")


# a multi-layer LSTM -> its layers as one-layer LSTMs sharing its parameters, built once per LSTM
_SINGLE_LAYERS: "weakref.WeakKeyDictionary[nn.LSTM, List[nn.LSTM]]" = weakref.WeakKeyDictionary()


def _single_layers(lstm: nn.LSTM) -> List[nn.LSTM]:
    """``lstm``'s layers as one-layer LSTMs over its own parameters (built without drawing from any
    random generator: the weights are ``lstm``'s)."""
    singles = _SINGLE_LAYERS.get(lstm)
    if singles is None:
        singles = []
        for i in range(lstm.num_layers):
            width = lstm.input_size if i == 0 else lstm.hidden_size
            elman = {"nonlinearity": lstm.nonlinearity} if isinstance(lstm, nn.RNN) else {}
            # the same kind (LSTM, GRU or Elman RNN), on meta: no weights of its own
            one = type(lstm)(width, lstm.hidden_size, batch_first=True, bias=lstm.bias, device="meta", **elman)
            for kind in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if lstm.bias else ()):
                setattr(one, f"{kind}_l0", getattr(lstm, f"{kind}_l{i}"))  # the same Parameter
            singles.append(one.train(lstm.training))
        _SINGLE_LAYERS[lstm] = singles
    return singles


def _lstm_layers(lstm: nn.LSTM, x: torch.Tensor) -> List[torch.Tensor]:
    """The input and each layer's output of a multi-layer unidirectional ``lstm`` over ``x`` ``(B, S, E)``."""
    out = [x]
    for one in _single_layers(lstm):
        x, _ = one(x)
        out.append(x)
    return out


# -- the labels ----------------------------------------------------------------------------------------
def word_spans(stored: torch.Tensor) -> List[Tuple[int, int]]:
    """``[start, end)`` piece positions of each word of a tagging example (its stored label row:
    >= 1 at first pieces; the last word ends before the final ``</s>``)."""
    starts = torch.nonzero(stored >= 1).squeeze(1).tolist()
    return list(zip(starts, starts[1:] + [len(stored) - 1]))


def control_labels(types: Sequence[Tuple[int, ...]], label_counts: np.ndarray, seed: int) -> Dict[Tuple[int, ...], int]:
    """Each word type (its piece ids) -> a label drawn once from the task's label distribution
    (Hewitt & Liang's control task): a function of the type alone."""
    rng = np.random.default_rng(seed)
    p = label_counts / label_counts.sum()
    unique = sorted(set(types))
    return dict(zip(unique, rng.choice(len(p), size=len(unique), p=p).tolist()))


# -- probes --------------------------------------------------------------------------------------------
def _standardize(train: torch.Tensor, *others: torch.Tensor) -> List[torch.Tensor]:
    mean, std = train.mean(0), train.std(0).clamp_min(1e-6)
    return [(t - mean) / std for t in (train, *others)]


def train_probe(train_x: Sequence[torch.Tensor], train_y: torch.Tensor, test_x: Sequence[torch.Tensor],
                num_labels: int, cfg: Any) -> Tuple[torch.Tensor, Optional[List[float]]]:
    """The labels ``(N_test,)`` a linear softmax probe trained on the training vectors predicts for
    the test ones. One tensor in ``train_x``: a probe on it; several (one per layer, the same width):
    a probe on their learned scalar mix ``gamma * sum_l softmax(w)_l x_l``, whose weights are
    returned too."""
    g = torch.Generator().manual_seed(cfg.seed)
    std = [_standardize(a, b) for a, b in zip(train_x, test_x)]
    tr, te = [s[0] for s in std], [s[1] for s in std]
    mixed = len(tr) > 1
    weights = nn.Parameter(torch.zeros(len(tr)))
    gamma = nn.Parameter(torch.ones(()))
    linear = torch.nn.utils.skip_init(nn.Linear, tr[0].size(1), num_labels)
    bound = 1.0 / tr[0].size(1) ** 0.5  # nn.Linear's own init, drawn from the seeded generator
    with torch.no_grad():
        for p in linear.parameters():
            p.uniform_(-bound, bound, generator=g)
    params = list(linear.parameters()) + ([weights, gamma] if mixed else [])
    opt = torch.optim.Adam(params, lr=cfg.lr)

    def read(xs: List[torch.Tensor], rows: Any) -> torch.Tensor:
        if not mixed:
            return xs[0][rows]
        w = weights.softmax(0)
        return gamma * sum(w[i] * x[rows] for i, x in enumerate(xs))

    n = len(train_y)
    for _ in range(cfg.epochs):
        order = torch.randperm(n, generator=g)
        for i in range(0, n, cfg.batch_size):
            rows = order[i : i + cfg.batch_size]
            loss = nn.functional.cross_entropy(linear(read(tr, rows)), train_y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        pred = linear(read(te, slice(None))).argmax(-1)  # (N_test,)
    return pred, ([round(float(v), 4) for v in weights.detach().softmax(0)] if mixed else None)


def most_frequent(train_y: torch.Tensor) -> int:
    """The training split's most frequent label (NER's ``O``)."""
    return int(torch.bincount(train_y).argmax())


def scores(pred: torch.Tensor, test_y: torch.Tensor, common: int) -> Tuple[float, float]:
    """Accuracy (%) over every test vector, and over those whose gold label is not ``common``: on a
    task one label dominates (NER: ~83% of words are ``O``), the second says what the probe finds
    beyond the majority (NaN where every gold label is ``common``)."""
    def acc(hit: torch.Tensor) -> float:
        return round(100.0 * float(hit.float().mean()), 2) if len(hit) else float("nan")

    hit = pred.eq(test_y)
    return acc(hit), acc(hit[test_y.ne(common)])


def majority(train_y: torch.Tensor, test_y: torch.Tensor) -> float:
    """Accuracy (%) of always predicting the training split's most frequent label."""
    return round(100.0 * float(test_y.eq(most_frequent(train_y)).float().mean()), 2)


# -- one checkpoint, one data folder -------------------------------------------------------------------
def _vectors(model: nn.Module, dataset: Any, layers: List[int], per_token: bool, pooling: str,
             limit: int) -> Tuple[List[torch.Tensor], torch.Tensor, List[Tuple[int, ...]]]:
    """The chosen layers' vectors ``(N, C_l)`` of the dataset's labelled words (or sentences), their
    labels ``(N,)`` and word types (piece ids; sentences: empty)."""
    from seqkit.models.pretrained import pool

    feats: List[List[torch.Tensor]] = [[] for _ in layers]
    labels: List[torch.Tensor] = []
    types: List[Tuple[int, ...]] = []
    count = 0
    for batch in dataset.batches(4096, 0, shuffle=False):
        batch = sorted(int(i) for i in batch)
        sample = dataset.collate(batch)
        ni = sample["net_input"]
        with torch.no_grad():  # (not inference_mode: the probes train on these vectors)
            every = layer_features(model, ni["src_tokens"], ni["src_lengths"], ni.get("segments"))
        target = sample["target"]  # (B, S) IGNORE off word starts, or (B,)
        if per_token:
            keep = target.ge(0)  # (B, S)
            for j, layer in enumerate(layers):
                feats[j].append(every[layer][keep].float())
            labels.append(target[keep])
            for b, idx in enumerate(batch):
                tokens, stored = dataset.src[idx], dataset.labels[idx]
                types += [tuple(tokens[a:e].tolist()) for a, e in word_spans(stored) if int(stored[a]) >= 2]
        else:
            for j, layer in enumerate(layers):  # (B, S, C) -> (B, C), read where fine-tuning reads
                feats[j].append(pool(every[layer].float(), ni["src_tokens"], ni["src_lengths"], pooling,
                                     dataset.src_dict.pad()))
            labels.append(target)
        count += int(labels[-1].numel())
        if limit and count >= limit:
            break
    return [torch.cat(f) for f in feats], torch.cat(labels), types


def run(cfg: ProbeConfig) -> Dict[str, Any]:
    """Probe every chosen layer (and their mix) of ``cfg.path`` on ``cfg.data``; the results."""
    import json
    import os

    from seqkit.core import checkpoints
    from seqkit.core.checkpoints import load_for_inference
    from seqkit.core.registry import MODELS, TASKS

    check_settings(cfg)
    if not cfg.path or not cfg.data:
        raise SeqkitError("path=CHECKPOINT and data=FOLDER are required")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    state = checkpoints.load(cfg.path)
    task, model = load_for_inference(cfg.path, state=state)
    if getattr(task, "model_kind", None) not in ("lm", "masked_lm") and state["cfg"]["task"].get("name") != "denoising":
        raise SeqkitError(f"{cfg.path} holds a {getattr(task, 'model_kind', 'seq2seq')} model of task "
                          f"{state['cfg']['task'].get('name')}: seqkit-probe reads pretraining checkpoints "
                          "(language_modeling, masked_lm, denoising)")
    if cfg.random_init:  # the same architecture, fresh weights
        torch.manual_seed(cfg.seed)
        model = task.build_model(MODELS.make_config(state["cfg"]["model"]))
    model.eval()
    names = layer_names(model)
    chosen = list(cfg.layers) or list(range(len(names)))
    bad = [i for i in chosen if not 0 <= i < len(names)]
    if bad:
        raise SeqkitError(f"layers={bad}: no such layer; this model has layers 0-{len(names) - 1} "
                          f"({', '.join(names)}; 0 = the embeddings)")
    meta_path = os.path.join(cfg.data, "preprocess.json")
    if not os.path.isfile(meta_path):
        raise SeqkitError(f"{cfg.data} is not a seqkit-preprocess output folder (no preprocess.json)")
    with open(meta_path, encoding="utf-8") as f:
        kind = json.load(f).get("task")
    if kind not in ("tagging", "classification"):
        raise SeqkitError(f"{cfg.data} was preprocessed for task {kind}: probing reads tagging or classification "
                          "folders")
    data = TASKS.build(TASKS.make_config({"name": kind, "data": cfg.data}))
    vocab = getattr(task, "src_dict", None) or task.dictionary
    if not data.src_dict.is_prefix_of(vocab):
        raise SeqkitError(f"{cfg.data} was binarized with another dictionary than {cfg.path}'s "
                          f"(seqkit-preprocess task={kind} vocab_from={cfg.path} ...)")
    if data.per_token and cfg.pooling != "auto":
        raise SeqkitError(f"pooling={cfg.pooling} sets where a sentence label is read; {cfg.data} holds {kind} data, "
                          "one label per word read at its first piece: drop pooling")
    pooling = getattr(model, "transfer_pooling", "mean") if cfg.pooling == "auto" else cfg.pooling
    pooling = pooling if pooling in ("first", "last", "mean") else "mean"
    train_x, train_y, train_types = _vectors(model, data.load_dataset("train"), chosen, data.per_token, pooling,
                                             cfg.max_train)
    test_x, test_y, test_types = _vectors(model, data.load_dataset(cfg.split), chosen, data.per_token, pooling, 0)
    n_test = len(test_y)
    rep_types: List[Tuple[int, ...]] = []
    if cfg.report:  # scored by the same probes: their vectors follow the chosen split's
        rep_x, rep_y, rep_types = _vectors(model, data.load_dataset(cfg.report), chosen, data.per_token, pooling, 0)
        test_x = [torch.cat([a, b]) for a, b in zip(test_x, rep_x)]
    K = len(data.labels)
    control = cfg.control and data.per_token
    if control:
        counts = np.bincount(train_y.numpy(), minlength=K).astype(np.float64)
        table = control_labels(train_types + test_types, counts, cfg.seed)
        # the report split's new types drawn apart, so the chosen split's figures do not depend on it
        table.update(control_labels([t for t in rep_types if t not in table], counts, cfg.seed + 1))
        test_types = test_types + rep_types
        ctrl_train = torch.tensor([table[t] for t in train_types])
        ctrl_all = torch.tensor([table[t] for t in test_types])
        ctrl_test = ctrl_all[:n_test]
        ctrl_common = most_frequent(ctrl_train)
    out: Dict[str, Any] = {
        "checkpoint": os.path.abspath(cfg.path), "random_init": cfg.random_init, "data": os.path.abspath(cfg.data),
        "task": kind, "split": cfg.split, "labels": K, "pooling": None if data.per_token else pooling,
        "train_vectors": len(train_y), "test_vectors": len(test_y), "majority": majority(train_y, test_y),
        "layers": [],
    }
    if cfg.report:
        out.update(report=cfg.report, report_vectors=len(rep_y), report_majority=majority(train_y, rep_y))
    common = most_frequent(train_y)
    out["common_label"] = data.labels[common]

    def probe(row: Dict[str, Any], xs: List[torch.Tensor], ts: List[torch.Tensor]) -> Optional[List[float]]:
        """The task's probe and its control's on these vectors: accuracy, the accuracy off the common
        label (``rare_``), their selectivities, into ``row``; the mix's weights (or None)."""
        pred, weights = train_probe(xs, train_y, ts, K, cfg)
        row["accuracy"], row["rare_accuracy"] = scores(pred[:n_test], test_y, common)
        if cfg.report:
            row["report_accuracy"], row["report_rare_accuracy"] = scores(pred[n_test:], rep_y, common)
        if control:
            pred, control_weights = train_probe(xs, ctrl_train, ts, K, cfg)
            row["control"], row["rare_control"] = scores(pred[:n_test], ctrl_test, ctrl_common)
            row["selectivity"] = round(row["accuracy"] - row["control"], 2)
            row["rare_selectivity"] = round(row["rare_accuracy"] - row["rare_control"], 2)
            if cfg.report:
                row["report_control"], row["report_rare_control"] = scores(pred[n_test:], ctrl_all[n_test:],
                                                                          ctrl_common)
                row["report_selectivity"] = round(row["report_accuracy"] - row["report_control"], 2)
            if control_weights is not None:
                row["control_weights"] = control_weights
        return weights

    for j, i in enumerate(chosen):
        row: Dict[str, Any] = {"layer": names[i], "dim": int(train_x[j].size(1))}
        probe(row, [train_x[j]], [test_x[j]])
        log.info("layer %s: %s", names[i], row)
        out["layers"].append(row)
    # the mix: the layers as wide as the last (the LSTM LM's embeddings may be narrower)
    same = [j for j in range(len(chosen)) if train_x[j].size(1) == train_x[-1].size(1)]
    if cfg.mix and len(same) > 1:
        mix: Dict[str, Any] = {"layers": [names[chosen[j]] for j in same]}
        mix["weights"] = probe(mix, [train_x[j] for j in same], [test_x[j] for j in same])
        log.info("scalar mix: %s", mix)
        out["mix"] = mix
    if cfg.report:  # the layer is chosen on `split`; its `report` figures are the ones to quote
        best = max(out["layers"], key=lambda r: r["accuracy"])
        out["chosen"] = {"layer": best["layer"], "chosen_on": cfg.split, "accuracy_there": best["accuracy"],
                         **{k: v for k, v in best.items() if k.startswith("report_")}}
        log.info("layer chosen on %s: %s; on %s: %s", cfg.split, best["layer"], cfg.report,
                 {k[7:]: v for k, v in out["chosen"].items() if k.startswith("report_")})
    if cfg.output:
        from seqkit.core.io import atomic_write_text

        os.makedirs(os.path.dirname(os.path.abspath(cfg.output)), exist_ok=True)
        atomic_write_text(cfg.output, json.dumps(out, indent=2) + "\n")
        atomic_write_text(os.path.splitext(cfg.output)[0] + ".md", table_markdown(out))
    return out


def table_markdown(r: Dict[str, Any]) -> str:
    """The results as a markdown table: one row per layer, then the mix; each figure over every
    test vector, then over those whose gold label is not the common one."""
    control = any("control" in row for row in r["layers"])
    keys = ["accuracy"] + (["control", "selectivity"] if control else [])
    keys += ["rare_" + k for k in keys]
    common = r.get("common_label", "the majority")
    head = "| layer | " + " | ".join(k.replace("rare_", f"not {common}: ") for k in keys) + " |"
    lines = [head, "| --- |" + " --- |" * len(keys)]
    rows = r["layers"] + ([dict(r["mix"], layer="scalar mix")] if "mix" in r else [])
    for row in rows:
        lines.append(f"| {row['layer']} | " + " | ".join(str(row.get(k, "-")) for k in keys) + " |")
    if "mix" in r:
        m = r["mix"]
        lines.append("")
        lines.append("scalar mix weights: " + ", ".join(f"{n} {w:.3f}" for n, w in zip(m["layers"], m["weights"])))
    lines.append("")
    lines.append(f"majority label ({common}): {r['majority']}; {r['train_vectors']:,} training and "
                 f"{r['test_vectors']:,} {r['split']} vectors; {'random weights' if r['random_init'] else 'trained weights'}")
    if "chosen" in r:
        c = r["chosen"]
        lines.append("")
        lines.append(f"chosen on {r['split']}: layer {c['layer']} ({c['accuracy_there']}); on {r['report']} "
                     f"({r['report_vectors']:,} vectors, majority {r['report_majority']}): "
                     + ", ".join(f"{k[7:]} {v}" for k, v in c.items() if k.startswith("report_")))
    return "\n".join(lines) + "\n"
