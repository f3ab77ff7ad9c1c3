"""``seqkit-eval-lm``: perplexity of a language-model checkpoint on a binarized split (or loss and
accuracy of a masked-LM / denoising one); one JSON line on stdout, a readable line on stderr."""

from __future__ import annotations

from typing import List, Optional, Set

from seqkit.analysis.eval_lm import EvalLMConfig
from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging

PROG = "seqkit-eval-lm"


def task_keys() -> Set[str]:
    """The task settings the command line (a --config file's included) gave: ``name`` for
    ``task=NAME``, ``FIELD`` for ``task.FIELD=...``. The rest of ``cfg.task`` holds the defaults of
    the task group, which stand for nothing the user chose."""
    from seqkit.core.settings import given

    return {"name" if key == "task" else key.split(".")[1] for key in given()
            if key == "task" or key.startswith("task.")}


def eval_lm(argv: Optional[List[str]] = None) -> None:
    import json
    import logging

    from omegaconf import OmegaConf

    import seqkit
    from seqkit.analysis.eval_lm import evaluate
    from seqkit.core.settings import given

    seqkit.import_builtin_components()
    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("eval_lm", EvalLMConfig), argv, PROG))
    setup_logging()
    r = evaluate(cfg, task_keys(), given())
    if "scored_tokens" in r:  # a masked-LM or denoising checkpoint
        logging.getLogger("seqkit.eval_lm").info(
            "%s: %d scored tokens, loss %.4f (base 2), accuracy %.2f%% (top-5 %.2f%%)%s", r["split"], r["scored_tokens"],
            r["loss"], r["accuracy"], r["top5_accuracy"],
            f"; unigram baseline of these targets: loss {r['unigram_loss']}, accuracy {r['unigram_accuracy']}%" if "unigram_loss" in r else "")
        print(json.dumps(r))
        return
    word = f", per-word perplexity {r['word_ppl']} over {r['words']} words" if "word_ppl" in r else ""
    word += f", unigram baseline {r['unigram_ppl']}" if "unigram_ppl" in r else ""
    if "prefix_read" in r:
        word += f", the continuation after a prefix of {r['prefix_length']} read {r['prefix_read']}"
    how = (f"one stream, segments of {r['tokens_per_sample']}, memory {r['mem_len']}" if "mem_len" in r else
           f"blocks of {r['tokens_per_sample']}, context window {r['context_window']}")  # mem_len: Transformer-XL
    logging.getLogger("seqkit.eval_lm").info("%s: %d tokens, loss %.4f (base 2), perplexity %s%s (%s)", r["split"],
                                             r["tokens"], r["loss"], r["ppl"], word, how)
    print(json.dumps(r))


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: eval_lm(argv))


if __name__ == "__main__":
    main()
