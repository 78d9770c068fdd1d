"""The word-level tokenizer: one token per word or punctuation mark, saved as Hugging Face `tokenizer.json`.

Words are split on spaces and every punctuation mark is its own token. A word that follows a space
(or starts the text) carries a leading "▁" (the SentencePiece convention), so decoding restores the
exact text: `decode(encode(text)) == text`. Multi-word values stay multi-token ("▁Lake", "▁Jessica");
nothing is merged to make recall easier. Because names and values always follow a space, a value
has the same token ids in every sentence, which lets the dataset store each value's tokens once.

Special tokens come first: `<pad>` = 0, `<sep>` = 1 (document separator), `<unk>` = 2 (never produced
by a dataset; it only keeps stray text encodable). Then every word in sorted order, so the same
texts always give the same ids.

    tokenizer = build_tokenizer(words)          # words: split_words() of every value and template piece
    tokenizer, text = read_tokenizer_text("data/bios-1k/tokenizer.json", MAX_TOKENIZER_BYTES)   # ids 0..N-1
    ids = encode_words(tokenizer, split_words("Ann Lee Smith"))
    tokenizer.decode(ids) == "Ann Lee Smith"
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from biosrecall.errors import BiosrecallError, first_line
from biosrecall.files import read_user_text

PAD_TOKEN = "<pad>"
SEP_TOKEN = "<sep>"
UNK_TOKEN = "<unk>"
SPECIAL_TOKENS = (PAD_TOKEN, SEP_TOKEN, UNK_TOKEN)
PAD_ID, SEP_ID, UNK_ID = 0, 1, 2
SPACE_MARK = "▁"
MAX_TOKENIZER_BYTES = 256 << 20  # a word-level vocabulary of millions of words is still far below this

# Private-use characters stand in for placeholders while a template is split, so each placeholder
# becomes exactly one recognisable word; templates are checked to be printable, so they never hold one.
NAME_SLOT = "\ue000"
VALUE_SLOT = "\ue001"


def _word_splitter() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Metaspace(replacement=SPACE_MARK, prepend_scheme="always", split=True),
            pre_tokenizers.Punctuation(behavior="isolated"),
        ]
    )


_SPLITTER = _word_splitter()


def split_words(text: str) -> list[str]:
    """The tokens (as strings) the tokenizer produces for `text`."""
    return [word for word, _ in _SPLITTER.pre_tokenize_str(text)]


def build_tokenizer(words: Iterable[str]) -> Tokenizer:
    """A WordLevel tokenizer whose vocabulary is the special tokens, then the distinct `words`, sorted."""
    words = sorted(set(words) - set(SPECIAL_TOKENS))
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *words))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = _word_splitter()
    tokenizer.decoder = decoders.Metaspace(replacement=SPACE_MARK, prepend_scheme="always", split=True)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def read_tokenizer_text(path: str | Path, max_bytes: int) -> tuple[Tokenizer, str]:
    """A tokenizer.json (a regular file of at most `max_bytes` whose token ids are exactly 0..N-1) and
    its text: the one reader of a tokenizer file, bioS's and the language model's."""
    text = read_user_text(path, "tokenizer", max_bytes)
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as exc:  # the Rust side raises a plain Exception for any malformed file
        raise BiosrecallError(f"tokenizer {path} is not a valid tokenizer.json ({first_line(exc)})") from None
    ids = set(tokenizer.get_vocab(with_added_tokens=True).values())
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if ids != set(range(size)):
        raise BiosrecallError(f"tokenizer {path}: its token ids are not exactly 0..{size - 1}")
    return tokenizer, text


def encode_words(tokenizer: Tokenizer, words: list[str]) -> list[int]:
    """Ids of already-split words, all in the vocabulary (`build_tokenizer` made it from them)."""
    return [tokenizer.token_to_id(word) for word in words]


def split_template(template: str) -> tuple[list[list[str]], list[str]]:
    """Split a template into literal word runs around its placeholders.

    Returns (pieces, slots): len(pieces) == len(slots) + 1, and the template's tokens are
    pieces[0] + slot 0 + pieces[1] + ... ; slots are "name" / "value" in the order they appear.
    """
    text = template.replace("{name}", NAME_SLOT).replace("{value}", VALUE_SLOT)
    slot_words = {SPACE_MARK + NAME_SLOT: "name", SPACE_MARK + VALUE_SLOT: "value"}
    pieces: list[list[str]] = [[]]
    slots: list[str] = []
    # A checked template has a space before each placeholder and a space or punctuation mark after it
    # (`biosrecall.bios.templates`), so each placeholder is a word of its own.
    for word in split_words(text):
        if word in slot_words:
            slots.append(slot_words[word])
            pieces.append([])
        else:
            pieces[-1].append(word)
    return pieces, slots
