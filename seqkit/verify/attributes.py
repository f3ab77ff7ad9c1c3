"""``generation.verifier=attributes``: a continuation that has the attributes its prompt asks for.

A language model trained on lines that begin with their own measured attributes (the recipe in
``examples/controlled_generation``) is asked for text by a prompt holding attributes only, and
the verifier measures the continuation. One syntax serves as the training prefix and as the prompt::

    words=7 sentiment=positive : a gorgeous , witty , seductive movie .    (a training line)
    words=7 sentiment=positive :                                            (a prompt)

Attributes are ``key=value`` tokens in any order, each at most once, then a lone ``:`` ending the
prompt (:func:`format_request` writes them in the order of :data:`ATTRIBUTES`):

    words=N        the text has N whitespace-separated tokens (:func:`count_words`; SST-2's text is
                   already tokenized, so ``,`` and ``'s`` count), N >= 1
    sentiment=S    a sentence classifier (``generation.verifier_model``, e.g. the SST-2 recipe's
                   checkpoint) gives S as its most probable label; GLUE SST-2's labels ``0``/``1``
                   are read as ``negative``/``positive``, other classifiers' labels as they are

The verifier needs the classifier even for prompts that ask words only: every worker process loads
it once, on CPU, on one thread. A prompt that is not a request (no ``:`` at its end, an unknown
attribute, text after the ``:``, a sentiment the classifier does not have) makes the check raise:
it counts as not verified, among the checks that raised, and the first one is logged with its cause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, List, Optional, Sequence

from seqkit.core.errors import SeqkitError
from seqkit.verify import VERIFIERS, VerifierConfig

ATTRIBUTES = ("words", "sentiment")
END = ":"  # the token that ends a request
SST2_NAMES = {"0": "negative", "1": "positive"}  # GLUE SST-2's label coding
_ATTRIBUTE = re.compile(r"^([a-z_]+)=(\S+)$")
_KINDS = {"seq2seq": "a translation model", "lm": "a language model", "tagger": "a tagging model",
          "masked_lm": "a masked language model", "classifier": "a sentence-pair classifier"}


def count_words(text: str) -> int:
    """The number of whitespace-separated tokens of ``text``: the rule the training lines were measured with."""
    return len(text.split())


@dataclass(frozen=True)
class Request:
    """The attributes a prompt asks for; None: not asked."""

    words: Optional[int] = None
    sentiment: Optional[str] = None

    def prompt(self) -> str:
        """The request as a prompt (and training prefix): ``words=7 sentiment=positive :``."""
        asked = [f"{name}={getattr(self, name)}" for name in ATTRIBUTES if getattr(self, name) is not None]
        return " ".join(asked + [END])


def format_request(words: Optional[int] = None, sentiment: Optional[str] = None, text: str = "") -> str:
    """A prompt asking for ``words`` and ``sentiment``; with ``text``, the training line measured so."""
    prompt = Request(words, sentiment).prompt()
    return f"{prompt} {text.strip()}" if text.strip() else prompt


def parse_request(prompt: str) -> Request:
    """The :class:`Request` a prompt holds; a ``ValueError`` saying what is wrong when it holds none."""
    tokens = prompt.split()
    if not tokens or END not in tokens:
        raise ValueError(f"prompt {prompt!r} is not an attribute request: write 'words=N sentiment=S :'")
    end = tokens.index(END)
    if end != len(tokens) - 1:
        raise ValueError(f"prompt {prompt!r} holds text after {END!r}: the verifier measures the continuation "
                         f"only, so end the prompt at {END!r}")
    if end == 0:
        raise ValueError(f"prompt {prompt!r} asks for no attribute: put 'words=N' or 'sentiment=S' before {END!r}")
    asked = {}
    for token in tokens[:end]:
        m = _ATTRIBUTE.match(token)
        if m is None or m.group(1) not in ATTRIBUTES:
            raise ValueError(f"prompt {prompt!r}: {token!r} is not an attribute (key=value with a key among "
                             f"{', '.join(ATTRIBUTES)})")
        if m.group(1) in asked:
            raise ValueError(f"prompt {prompt!r} asks for {m.group(1)} twice")
        asked[m.group(1)] = m.group(2)
    words = asked.get("words")
    if words is not None and not (words.isdigit() and int(words) >= 1):
        raise ValueError(f"prompt {prompt!r}: words={words} is not a count (an integer >= 1)")
    return Request(int(words) if words is not None else None, asked.get("sentiment"))


def sentiment_names(labels: Sequence[str]) -> List[str]:
    """The sentiment each of a classifier's ``labels`` stands for: SST-2's ``0``/``1`` as
    ``negative``/``positive``, any other labels as they are."""
    if sorted(labels) == sorted(SST2_NAMES):
        return [SST2_NAMES[label] for label in labels]
    return list(labels)


class SentimentMeter:
    """A sentence classifier checkpoint read as a meter: texts -> the sentiment of each, the name
    (:func:`sentiment_names`) of its most probable label. On CPU; ``threads`` > 0 sets torch's."""

    def __init__(self, path: str, threads: int = 0):
        import torch

        from seqkit.core.checkpoints import load, model_for_inference, task_for_inference

        if threads > 0:
            torch.set_num_threads(threads)
        state = load(path)
        task = task_for_inference(state)  # the kind is checked before the model is built
        kind = getattr(task, "model_kind", "seq2seq")
        if kind != "classifier" or getattr(task, "pairs", False) or getattr(task, "per_token", False):
            what = _KINDS.get(kind, f"a {kind} model")
            raise SeqkitError(f"verifier model {path} holds {what} ({kind}); sentiment is measured with a "
                              "sentence classifier checkpoint (e.g. examples/classification/sst2's)")
        self.task, self.model = task, model_for_inference(path, state, task).eval()
        self.names = sentiment_names(task.labels)
        self._torch = torch

    def __call__(self, texts: Sequence[str], batch_size: int = 64) -> List[str]:
        """The sentiment of each text (non-empty), in order; padded batches, as seqkit-generate predicts."""
        torch, d = self._torch, self.task.src_dict
        ids = [self.task.encode_example((t,))[0] for t in texts]
        limit = self.model.max_positions()[0]
        out: List[str] = []
        for start in range(0, len(ids), batch_size):
            chunk = ids[start : start + batch_size]
            longest = max(len(x) for x in chunk)
            if longest > limit:
                raise SeqkitError(f"a text of {longest} tokens: the classifier reads at most {limit}")
            tokens = torch.full((len(chunk), longest), d.pad(), dtype=torch.long)  # (B, S)
            for row, x in enumerate(chunk):
                tokens[row, : len(x)] = torch.tensor(x, dtype=torch.long)
            lengths = torch.tensor([len(x) for x in chunk], dtype=torch.long)
            with torch.inference_mode():
                best = self.model(src_tokens=tokens, src_lengths=lengths).argmax(dim=-1)  # (B,)
            out += [self.names[i] for i in best.tolist()]
        return out


@dataclass
class AttributesConfig(VerifierConfig):
    name: str = "attributes"
    MODEL: ClassVar[str] = ("a sentence classifier checkpoint (its labels the sentiments; "
                            "e.g. examples/classification/sst2's)")


def satisfies(request: Request, text: str, meter: Any) -> bool:
    """Whether ``text`` has every attribute ``request`` asks for; ``meter``: texts -> sentiments
    (a :class:`SentimentMeter`), asked only when the word count holds."""
    if request.sentiment is not None and request.sentiment not in meter.names:
        raise ValueError(f"sentiment={request.sentiment}: the classifier's sentiments are {', '.join(meter.names)}")
    if request.words is not None and count_words(text) != request.words:
        return False
    if request.sentiment is not None:
        return bool(text.strip()) and meter([text])[0] == request.sentiment
    return True


@VERIFIERS.register("attributes", AttributesConfig)
def attributes(cfg: AttributesConfig) -> Callable[[str, str], bool]:
    """Accept a continuation that has the attributes its prompt asks for (one classifier per worker)."""
    if not cfg.model:
        raise SeqkitError(f"verifier 'attributes' measures with {AttributesConfig.MODEL}: give it one "
                          "(generation.verifier_model=CHECKPOINT)")
    meter = SentimentMeter(cfg.model, threads=1)  # one thread: the workers check side by side
    return lambda source, hypothesis: satisfies(parse_request(source), hypothesis, meter)
