"""A `tokenizers.Tokenizer` rebuilt from the vocabulary a GGUF file stores as metadata.

Only llama.cpp's byte-level BPE (`tokenizer.ggml.model == "gpt2"`) is built. How text is cut
into words before BPE depends on `tokenizer.ggml.pre`; the supported names and their splits
are those of llama.cpp (`llama-vocab.cpp`), written as the Hugging Face pre-tokenizers of the
same models' `tokenizer.json`.

The tokenizer never adds BOS/EOS itself (no post-processor): the GGUF's
`tokenizer.ggml.add_bos_token` is returned to the caller, which prepends BOS when it is set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from exec.models.model_config import UnsupportedModelError

CONTROL = 3       # llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte
USER_DEFINED = 4
NO_VOCAB = ("none", "no_vocab")

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class SplitRule(NamedTuple):
    """How one `tokenizer.ggml.pre` splits text: GPT-2's regex (split=None) or `split`,
    optionally each digit apart first; `ignore_merges` looks whole words up first (Llama 3)."""

    split: str | None
    digits: bool = False
    ignore_merges: bool = False


PRE_TOKENIZERS = {
    "gpt-2": SplitRule(None),
    "smollm": SplitRule(None, digits=True),
    "starcoder": SplitRule(None, digits=True),
    "refact": SplitRule(None, digits=True),
    "llama-bpe": SplitRule(LLAMA3_SPLIT, ignore_merges=True),
    "llama3": SplitRule(LLAMA3_SPLIT, ignore_merges=True),
    "llama-v3": SplitRule(LLAMA3_SPLIT, ignore_merges=True),
    "qwen2": SplitRule(QWEN2_SPLIT),
    "deepseek-r1-qwen": SplitRule(QWEN2_SPLIT),
}
# llama.cpp adds BOS by default for these when the file does not say.
ADD_BOS_BY_DEFAULT = ("llama-bpe", "llama3", "llama-v3")


def build_tokenizer(model: str | None, pre: str | None, tokens: Sequence[str],
                    merges: Sequence[str], token_types: Sequence[int] | None) -> Tokenizer | None:
    """The tokenizer a GGUF describes, or None when it has no vocabulary (`model` absent,
    "none" or "no_vocab"; the model then takes token ids).

    Tokens marked CONTROL become special tokens (skipped by `decode(skip_special_tokens=True)`),
    USER_DEFINED ones plain added tokens; both are matched whole in the text, with their ids.
    Raises UnsupportedModelError naming the tokenizer model or pre-tokenizer when it is not
    byte-level BPE with a known split.
    """
    if model is None or model in NO_VOCAB:
        return None
    if model != "gpt2":
        raise UnsupportedModelError(f"GGUF tokenizer model {model!r} is not supported (only "
                                    f"'gpt2', byte-level BPE)")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedModelError(f"GGUF pre-tokenizer {pre!r} is not supported (supported: "
                                    f"{', '.join(PRE_TOKENIZERS)})")
    spec = PRE_TOKENIZERS[pre]
    vocab = {token: i for i, token in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab, pairs, ignore_merges=spec.ignore_merges))
    tok.pre_tokenizer = _pre_tokenizer(spec)
    tok.decoder = decoders.ByteLevel()
    types = list(token_types) if token_types is not None else [1] * len(tokens)
    special = [AddedToken(t, special=True, normalized=False)
               for t, kind in zip(tokens, types, strict=True) if kind == CONTROL]
    added = [AddedToken(t, special=False, normalized=False)
             for t, kind in zip(tokens, types, strict=True) if kind == USER_DEFINED]
    tok.add_special_tokens(special)
    tok.add_tokens(added)
    return tok


def default_add_bos(pre: str | None) -> bool:
    """llama.cpp's BOS default for a byte-level vocabulary without `add_bos_token`."""
    return pre in ADD_BOS_BY_DEFAULT


def _pre_tokenizer(spec: SplitRule) -> pre_tokenizers.PreTokenizer:
    steps: list[pre_tokenizers.PreTokenizer] = []
    if spec.digits:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    if spec.split is not None:
        steps.append(pre_tokenizers.Split(Regex(spec.split), behavior="isolated"))
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=spec.split is None))
    return pre_tokenizers.Sequence(steps)
