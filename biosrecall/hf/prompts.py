"""bioS evaluation rows as text, and as token ids of another model's own tokenizer.

    texts = eval_texts(dataset, eval_set)          # prompt and answer text of every row
    check_vocabulary(tokenizer, texts, "models/gpt2-bios")   # a word it cannot encode is an error
    rows = encode_rows(tokenizer, texts)           # prompt ids and the answer's ids after the prompt

Each evaluation row of a dataset is `[sep] + prompt + answer` in the dataset's word-level tokenizer,
which decodes back to the exact text. So the prompt text is the decoded prompt ("Lindsey Eoghan
Murphy was born in") and the answer text is what decoding the whole row adds after it
(" Brandiborough", with the space that joins it to the prompt). Another tokenizer encodes the prompt
as it would any text (with its own special tokens, e.g. a beginning-of-text token) and the answer as
the tokens the prompt plus the answer adds to the prompt's encoding: the tokens a model trained on
bioS text with that tokenizer saw after the prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from biosrecall.errors import BiosrecallError


@dataclass(frozen=True)
class EvalTexts:
    """Prompt and answer text per evaluation row (answers keep their leading space)."""

    prompts: list[str]
    answers: list[str]


@dataclass(frozen=True)
class EncodedRows:
    """Per row: the prompt's token ids, and the answer's ids as they follow the prompt."""

    prompt_ids: list[list[int]]
    answer_ids: list[list[int]]


def eval_texts(dataset, eval_set) -> EvalTexts:
    """The text of each row of `eval_set` (a dataset's `EvalSet`), decoded with the dataset tokenizer."""
    tokens = eval_set.tokens
    starts, lengths = eval_set.answer_start, eval_set.answer_len
    prompt_rows = [[int(t) for t in tokens[i, 1 : starts[i]]] for i in range(len(tokens))]
    full_rows = [[int(t) for t in tokens[i, 1 : starts[i] + lengths[i]]] for i in range(len(tokens))]
    prompts = dataset.tokenizer.decode_batch(prompt_rows, skip_special_tokens=False)
    fulls = dataset.tokenizer.decode_batch(full_rows, skip_special_tokens=False)
    answers = []
    for prompt, full in zip(prompts, fulls, strict=True):
        if not full.startswith(prompt) or len(full) == len(prompt):
            raise BiosrecallError(
                f"dataset {dataset.path}: the evaluation row {prompt!r} does not decode to text"
            )
        answers.append(full[len(prompt) :])
    return EvalTexts(prompts, answers)


def check_vocabulary(tokenizer, texts: EvalTexts, where) -> None:
    """Refuse a tokenizer that maps a bioS word to its unknown token, or cannot give it back."""
    words = sorted({word for text in (*texts.prompts, *texts.answers) for word in text.split()})
    unknown = getattr(tokenizer, "unk_token_id", None)
    try:
        encoded = tokenizer(words, add_special_tokens=False)["input_ids"]
    except Exception:  # a tokenizer without an unknown token raises on a word outside its vocabulary
        encoded = [_encode_one(tokenizer, word) for word in words]
    for word, ids in zip(words, encoded, strict=True):
        back = None if ids is None else tokenizer.decode(ids, skip_special_tokens=True).strip()
        if ids is None or not ids or (unknown is not None and unknown in ids) or back != word:
            raise BiosrecallError(
                f"the tokenizer of {where} cannot encode the bioS word {word!r}; score a model trained on "
                "this dataset's text with a tokenizer that covers it"
            )


def _encode_one(tokenizer, word: str) -> list[int] | None:
    try:
        return tokenizer(word, add_special_tokens=False)["input_ids"]
    except Exception:  # this is the word that cannot be encoded
        return None


def encode_rows(tokenizer, texts: EvalTexts) -> EncodedRows:
    """Token ids of each prompt (with the tokenizer's own special tokens) and of its answer after it."""
    prompts = tokenizer(texts.prompts)["input_ids"]
    fulls = tokenizer([p + a for p, a in zip(texts.prompts, texts.answers, strict=True)])["input_ids"]
    alone = None
    answers = []
    for i, (prompt, full) in enumerate(zip(prompts, fulls, strict=True)):
        if full[: len(prompt)] == prompt and len(full) > len(prompt):
            answers.append(list(full[len(prompt) :]))
            continue
        # The prompt's last tokens merged with the answer: use the answer encoded on its own as the
        # candidate path; greedy decoding still decides, by text (see scoring.py).
        if alone is None:
            alone = tokenizer(texts.answers, add_special_tokens=False)["input_ids"]
        answers.append(list(alone[i]))
    return EncodedRows([list(p) for p in prompts], answers)


def continuation_text(tokenizer, prompt_ids: list[int], ids: list[int]) -> str:
    """The text `ids` add after the prompt (decoded in context, so a leading space is kept)."""
    before = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    after = tokenizer.decode(prompt_ids + ids, skip_special_tokens=False)
    if after.startswith(before):
        return after[len(before) :]
    return " " + tokenizer.decode(ids, skip_special_tokens=False).lstrip()
