"""Tiny HuggingFace models and tokenizers built with ``transformers`` and ``tokenizers`` themselves
(no download), for the import/export parity tests; and English lines for tokenization parity."""

from __future__ import annotations

import gzip
import os
import random
from typing import List

import torch

EOS = "<|endoftext|>"


def toy_english(n: int = 400, seed: int = 1) -> List[str]:
    """English sides of the toy corpus (seqkit's own, no data folder needed)."""
    from seqkit.data.toy_corpus import sentence_pair

    rng = random.Random(seed)
    return [sentence_pair(rng)[1] for _ in range(n)]


def shared_lines(n: int = 300) -> List[str]:
    """Up to ``n`` lines each of Multi30k's English validation split and WikiText-2's validation text
    from ``$SEQKIT_DATA`` or ``../shared/data`` (empty when neither is there)."""
    root = os.environ.get("SEQKIT_DATA") or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    out: List[str] = []
    m30k = os.path.join(root, "multi30k", "val.en.gz")
    if os.path.isfile(m30k):
        with gzip.open(m30k, "rt", encoding="utf-8") as f:
            out += [line.strip() for _, line in zip(range(n), f)]
    wt2 = os.path.join(root, "wikitext2")
    for name in sorted(os.listdir(wt2)) if os.path.isdir(wt2) else []:
        if "valid" in name:
            opener = gzip.open if name.endswith(".gz") else open
            with opener(os.path.join(wt2, name), "rt", encoding="utf-8") as f:
                lines = [line.strip() for line in f if line.strip() and not line.startswith(" =")]
            out += lines[:n]
            break
    return out


def byte_level_bpe(lines: List[str], vocab_size: int = 400):
    """A GPT-2-style byte-level BPE (``tokenizers``) trained on ``lines``, ``<|endoftext|>`` first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def make_gpt2(folder: str, lines: List[str], eos_bonus: float = 0.45, tie: bool = True, slow_files: bool = False,
              **config) -> str:
    """A 2-layer GPT2LMHeadModel with random weights and its tokenizer, saved in ``folder``.

    ``eos_bonus``: added to the end token's logit through the final LayerNorm's bias, so that a
    random model ends some sentences (beam searches then finish before their length limit, where
    seqkit's and HF's rules for unfinished hypotheses differ). ``slow_files``: vocab.json +
    merges.txt instead of tokenizer.json."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast, PreTrainedTokenizerFast

    tok = byte_level_bpe(lines)
    eos = tok.token_to_id(EOS)
    torch.manual_seed(0)
    settings = dict(n_layer=2, n_embd=32, n_head=4, n_positions=128, vocab_size=tok.get_vocab_size(),
                    bos_token_id=eos, eos_token_id=eos, tie_word_embeddings=tie)
    settings.update(config)
    model = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    with torch.no_grad():
        w = model.transformer.wte.weight[eos]
        model.transformer.ln_f.bias.copy_(w * eos_bonus / w.dot(w))
    model.save_pretrained(folder)
    if slow_files:  # what older GPT-2 folders hold: vocab.json + merges.txt, read by GPT2Tokenizer
        tok.model.save(folder)
        fast = GPT2TokenizerFast(vocab_file=os.path.join(folder, "vocab.json"),
                                 merges_file=os.path.join(folder, "merges.txt"), bos_token=EOS, eos_token=EOS, unk_token=EOS)
        fast.save_pretrained(folder)
        os.remove(os.path.join(folder, "tokenizer.json"))
    else:
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, unk_token=EOS).save_pretrained(folder)
    return folder


def wordpiece(lines: List[str], vocab_size: int = 300):
    """A BERT WordPiece tokenizer (lower-casing normalizer, punctuation pre-split, [CLS] a [SEP])."""
    from tokenizers.implementations import BertWordPieceTokenizer

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(lines, vocab_size=vocab_size, show_progress=False,
                            special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    return tok


def roberta_bpe(lines: List[str], vocab_size: int):
    """RoBERTa's and BART's byte-level BPE (``tokenizers``): <s> <pad> </s> <unk> first, <mask>
    last, ``<s> a </s>`` around a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                       show_progress=False))
    tok.add_special_tokens(["<mask>"])
    return tok


def make_bert(folder: str, lines: List[str], arch: str = "BertForMaskedLM", **config) -> str:
    """A 2-layer BERT (``arch``: BertForMaskedLM, BertForPreTraining, BertModel), ALBERT
    (AlbertForMaskedLM, AlbertForPreTraining) or RoBERTa
    (RobertaForMaskedLM: byte-level BPE with <s> <pad> </s> <unk> first, <mask> last) with random
    weights and its tokenizer, saved in ``folder``."""
    import transformers
    from transformers import BertTokenizerFast, RobertaTokenizerFast

    roberta = arch.startswith("Roberta")
    if roberta:
        tok = roberta_bpe(lines, 400)
        fast = RobertaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                    cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
        settings = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, max_position_embeddings=66, type_vocab_size=1,
                        layer_norm_eps=1e-5)
        Config = transformers.RobertaConfig
    else:  # ALBERT too reads WordPiece here: the tokenizer is not what its test is about
        tok = wordpiece(lines)
        fast = BertTokenizerFast(tokenizer_object=tok._tokenizer, unk_token="[UNK]", sep_token="[SEP]",
                                 pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
        settings = dict(max_position_embeddings=64)
        Config = transformers.BertConfig
        if arch.startswith("Albert"):  # factorized embeddings E 16 < C 32, one shared layer
            settings.update(embedding_size=16, pad_token_id=0, bos_token_id=2, eos_token_id=3)
            Config = transformers.AlbertConfig
    settings.update(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
                    vocab_size=fast.backend_tokenizer.get_vocab_size(), **config)
    torch.manual_seed(0)
    model = getattr(transformers, arch)(Config(**settings)).eval()
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def make_electra(folder: str, generator: str, lines: List[str]) -> str:
    """A 2-layer ELECTRA discriminator (E 16, C 32) and a 1-layer generator (Cg 16) sharing its word
    embeddings, as ELECTRA trains them, saved in ``folder`` and ``generator``."""
    import transformers
    from transformers import BertTokenizerFast

    tok = wordpiece(lines)
    fast = BertTokenizerFast(tokenizer_object=tok._tokenizer, unk_token="[UNK]", sep_token="[SEP]",
                             pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    common = dict(vocab_size=fast.backend_tokenizer.get_vocab_size(), embedding_size=16, max_position_embeddings=64)
    torch.manual_seed(0)
    disc = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64, **common)).eval()
    gen = transformers.ElectraForMaskedLM(transformers.ElectraConfig(
        num_hidden_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=32, **common)).eval()
    with torch.no_grad():
        gen.electra.embeddings.word_embeddings.weight.copy_(disc.electra.embeddings.word_embeddings.weight)
    for model, where in ((disc, folder), (gen, generator)):
        model.save_pretrained(where)
        fast.save_pretrained(where)
    return folder


def _seq2seq_sizes(**config):
    """A 2+2-layer encoder-decoder's HF settings (d 32, 4 heads, ffn 64), ``config`` on top."""
    settings = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                    encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    settings.update(config)
    return settings


def make_bart(folder: str, lines: List[str], eos_bonus: float = 2.0, **config) -> str:
    """A BartForConditionalGeneration with random weights and a byte-level BPE (<s> <pad> </s> <unk>
    first, <mask> last), saved in ``folder``; ``eos_bonus`` in final_logits_bias ends some searches."""
    from transformers import BartConfig, BartForConditionalGeneration, BartTokenizerFast

    tok = roberta_bpe(lines, 300)
    fast = BartTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>", cls_token="<s>",
                             unk_token="<unk>", pad_token="<pad>", mask_token="<mask>")
    torch.manual_seed(0)
    settings = _seq2seq_sizes(vocab_size=tok.get_vocab_size(), pad_token_id=1, bos_token_id=0, eos_token_id=2,
                              decoder_start_token_id=2, forced_bos_token_id=None, **config)
    return _save_biased(BartForConditionalGeneration(BartConfig(**settings)), fast, folder, 2, eos_bonus)


def _save_biased(model, tok, folder: str, eos: int, eos_bonus: float) -> str:
    """A random ``final_logits_bias``, ``eos_bonus`` more for the end token; model and tokenizer saved."""
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.1)
        model.final_logits_bias[0, eos] += eos_bonus
    model.eval().save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def sentencepiece_model(lines: List[str], vocab_size: int = 200) -> bytes:
    """A sentencepiece unigram model (bytes) trained on ``lines``."""
    import io

    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=vocab_size,
                                   model_type="unigram", character_coverage=1.0, num_threads=1, minloglevel=2,
                                   hard_vocab_limit=False)
    return out.getvalue()


def make_marian(folder: str, lines: List[str], eos_bonus: float = 2.0, **config) -> str:
    """A MarianMTModel with random weights and Marian's tokenizer files (source.spm, target.spm,
    vocab.json: </s> 0, <unk> 1, the pieces of both models, <pad> last), saved in ``folder``."""
    import json

    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    os.makedirs(folder, exist_ok=True)
    pieces = ["</s>", "<unk>"]
    for name, half in (("source.spm", lines[::2]), ("target.spm", lines[1::2])):
        proto = sentencepiece_model(half, 70)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(proto)
        sp = spm.SentencePieceProcessor(model_proto=proto)
        pieces += [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i))]
    vocab = {p: i for i, p in enumerate(dict.fromkeys(pieces))}
    vocab["<pad>"] = len(vocab)
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    tok = MarianTokenizer(os.path.join(folder, "source.spm"), os.path.join(folder, "target.spm"),
                          os.path.join(folder, "vocab.json"))
    pad = vocab["<pad>"]
    torch.manual_seed(0)
    settings = _seq2seq_sizes(vocab_size=len(vocab), pad_token_id=pad, decoder_start_token_id=pad, eos_token_id=0,
                              forced_eos_token_id=0, bos_token_id=None, scale_embedding=True, activation_function="swish",
                              **config)
    return _save_biased(MarianMTModel(MarianConfig(**settings)), tok, folder, 0, eos_bonus)


def make_t5(folder: str, lines: List[str], eos_bonus: float = 8.0, **config) -> str:
    """A T5ForConditionalGeneration (2+2 layers, d 32, 4 heads of d_kv 8, 8 relative buckets) with
    random weights and a sentencepiece unigram tokenizer (<pad> 0, </s> 1, <unk> 2, as T5's), saved
    in ``folder``. ``eos_bonus``: the end token's output row is moved towards the decoder's mean
    output, so that searches end before their length limit."""
    import io

    import sentencepiece as spm
    from transformers import T5Config, T5ForConditionalGeneration, T5TokenizerFast

    os.makedirs(folder, exist_ok=True)
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=70, model_type="unigram",
                                   pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2,
                                   hard_vocab_limit=False)
    with open(os.path.join(folder, "spiece.model"), "wb") as f:
        f.write(out.getvalue())
    tok = T5TokenizerFast(vocab_file=os.path.join(folder, "spiece.model"), extra_ids=0)
    settings = dict(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                    relative_attention_num_buckets=8, relative_attention_max_distance=20, feed_forward_proj="relu",
                    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    settings.update(config)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(T5Config(**settings)).eval()
    with torch.no_grad():  # the decoder's mean output direction, from a few random inputs
        ids = torch.randint(3, len(tok), (8, 10))
        h = model(input_ids=ids, decoder_input_ids=ids, output_hidden_states=True).decoder_hidden_states[-1]
        mean = h.mean(dim=(0, 1))
        scale = model.config.d_model**0.5 if model.config.scale_decoder_outputs else 1.0  # v1.0 scales h by d^-0.5
        model.lm_head.weight[1] += scale * eos_bonus * mean / mean.dot(mean)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def body_trains(name: str, mode: str) -> bool:
    """Whether the body parameter ``name`` (``body.``...) may change in ``mode``, by its name alone."""
    last = name.rsplit(".", 1)[-1]
    return {"full": True, "ulmfit": True, "frozen": False, "prompt": False, "bitfit": last.startswith("bias"),
            "adapter": ".adapter." in name or "norm" in name, "lora": ".lora." in name}[mode]


def assert_adapted(mode: str, before: dict, model) -> None:
    """After a short fine-tuning run in ``mode`` from parameters ``before`` (name -> tensor): what
    changed is what the mode trains (the head always, in the body only the mode's own parameters,
    and those do move), and every other parameter is bit-identical to the base."""
    named = dict(model.named_parameters())
    assert set(named) == set(before)
    changed = {n for n, p in named.items() if not torch.equal(p.detach(), before[n])}
    body = {n for n in changed if n.startswith("body.")}
    assert any(n.startswith("head.") for n in changed), changed
    assert not {n for n in body if not body_trains(n, mode)}, f"{mode}: frozen parameters changed"
    if mode in ("full", "bitfit", "adapter", "lora"):  # the body's trainable part did learn
        assert body, f"model.adapt={mode} changed nothing in the body"
    if mode == "full":  # the pretrained weights themselves, not only biases or norms
        assert any(n.endswith(".weight") and "norm" not in n for n in body), body
    if mode in ("adapter", "lora"):  # the added modules themselves learned (not only the norms)
        assert any(f".{mode}." in n for n in body), body
    if mode == "prompt":
        assert {n for n in changed if not n.startswith(("head.", "body."))}, changed  # the prompt vectors


def fine_tune_two_updates(path: str, tmp_path, mode: str) -> None:
    """model=pretrained_classifier on the checkpoint ``path`` (its vocabulary, ``mode``): two
    updates that train exactly what ``mode`` trains, then the Python Classifier loads the run and predicts."""
    from transfer_fixtures import binarize, make_text, trainer_for

    from seqkit.generation.classifier import Classifier

    data = binarize(make_text(tmp_path), tmp_path / "cls", path)
    trainer = trainer_for(["task=classification", f"task.data={data}", "model=pretrained_classifier",
                           f"model.path={path}", f"model.adapt={mode}", "criterion=cross_entropy",
                           "optimization.max_update=2", f"checkpoint.save_dir={tmp_path / 'ck'}"])
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.run()
    assert trainer.num_updates == 2
    assert_adapted(mode, before, trainer.model)
    clf = Classifier.from_checkpoint(str(tmp_path / "ck" / "checkpoint_last.pt"))
    assert len(clf.predict(["v0 v1 v2 .", "v3 v4 ."])) == 2
