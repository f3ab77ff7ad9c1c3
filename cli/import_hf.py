"""``seqkit-import``: a HuggingFace model folder (``config.json``, weights, tokenizer files) as a
seqkit checkpoint that generates, evaluates and fine-tunes like any other (:mod:`seqkit.hf`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

from seqkit.cli.common import ConfigBuilder, parse_argv, run_main, setup_logging
from seqkit.core.config import arg

PROG = "seqkit-import"


@dataclass
class ImportConfig:
    path: str = arg("", "the HuggingFace model folder (config.json, model.safetensors or pytorch_model.bin, tokenizer files)")
    output: str = arg("", "the seqkit checkpoint to write (written only when the import succeeds)")
    generator: str = arg("", "ELECTRA: the generator's folder (ElectraForMaskedLM) beside the discriminator's path; "
                             "without it seqkit's generator starts untrained")
    specials: str = arg("", "which of the vocabulary's tokens play seqkit's specials, over what the importer picks: "
                            "comma-separated SPECIAL=TOKEN, SPECIAL one of <pad>, <s>, </s>, <unk>, quoted "
                            "(in a shell: specials=\"'<unk>=<|unk|>'\")")
    eos_prefix: Optional[bool] = arg(None, "GPT-2: feed </s> (its <|endoftext|>) before every prompt and the data's first "
                                           "token; unset: only when config.json says so (seqkit_eos_prefix, written by "
                                           "seqkit's export of a seqkit-trained GPT), as transformers feeds a GPT-2 "
                                           "the tokenizer's ids")
    overwrite: bool = arg(False, "replace an existing output file")


def import_hf(argv: Optional[List[str]] = None) -> None:
    from omegaconf import OmegaConf

    from seqkit.core.errors import SeqkitError
    from seqkit.hf.convert import import_folder

    cfg = OmegaConf.to_object(parse_argv(ConfigBuilder("import", ImportConfig), argv, PROG))
    setup_logging()
    if not cfg.path:
        raise SeqkitError("path=FOLDER is required (a HuggingFace model folder)")
    if not cfg.output:
        raise SeqkitError("output=FILE is required (the seqkit checkpoint to write)")
    import_folder(cfg.path, cfg.output, cfg.overwrite, cfg.generator, cfg.specials, cfg.eos_prefix)


def main(argv: Optional[List[str]] = None) -> None:
    run_main(PROG, lambda: import_hf(argv))


if __name__ == "__main__":
    main()
