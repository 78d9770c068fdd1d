"""Tests of the LM data path: corpus readers, tokenizer, shard format, `lm prepare`, and the loader.

The corpus is generated here (seeded sentences with some non-ASCII text); nothing is downloaded.

    pytest -q tests/test_lm_data.py
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from biosrecall.cli import main
from biosrecall.errors import BiosrecallError
from biosrecall.lm import (
    Corpus,
    ShardLoader,
    load_manifest,
    load_tokenizer,
    prepare_corpus,
    read_shard,
    read_shard_header,
    shards,
    train_tokenizer,
    validation_batches,
)
from biosrecall.lm.shards import HEADER_BYTES, MAGIC

WORDS = [
    "the",
    "a",
    "river",
    "city",
    "model",
    "loop",
    "depth",
    "recall",
    "über",
    "café",
    "naïve",
    "東京",
    "数据",
    "🙂",
    "42",
    "3.14",
    "tab\tstop",
]
VOCAB = 400
CONTEXT = 16


def make_documents(count: int, seed: int) -> list[str]:
    """Documents of one to four sentences; some span two lines (never a blank line)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(count):
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))).capitalize() + rng.choice(".!?")
            for _ in range(rng.randint(1, 4))
        ]
        docs.append(("\n" if rng.random() < 0.2 else " ").join(sentences))
    return docs


def write_txt(path: Path, docs: list[str]) -> Path:
    path.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    return path


def run_prepare(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(["lm", "prepare", *args])
        code = 0
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> tuple[Path, list[str], Path]:
    """A prepared folder (small shards, so windows cross shard boundaries), its documents and input."""
    root = tmp_path_factory.mktemp("lm")
    docs = make_documents(400, seed=1)
    source = write_txt(root / "corpus.txt", docs)
    kwargs = dict(vocab_size=VOCAB, val_fraction=0.05, seed=3, shard_tokens=1000)
    prepare_corpus(Corpus([source]), root / "data", **kwargs)
    return root / "data", docs, source


def split_stream(data: Path, split: str) -> np.ndarray:
    manifest = load_manifest(data)
    parts = [np.asarray(read_shard(data / s["file"])[1]) for s in manifest["splits"][split]["shards"]]
    return np.concatenate(parts).astype(np.int64)


@pytest.mark.parametrize("dtype", ["<u2", "<u4"])
def test_shard_format_round_trips(tmp_path, dtype):
    tokens = np.random.default_rng(0).integers(0, np.iinfo(np.dtype(dtype)).max, size=1234)
    sha = "ab" * 32
    writer = shards.ShardWriter(tmp_path, "s", dtype, sha, shard_tokens=10_000)
    writer.add(tokens)
    [entry] = writer.close()
    raw = (tmp_path / entry["file"]).read_bytes()
    assert raw[:8] == MAGIC and len(raw) == HEADER_BYTES + tokens.size * np.dtype(dtype).itemsize
    header, read = read_shard(tmp_path / entry["file"])
    assert (header.version, header.dtype, header.tokens, header.tokenizer_sha256) == (1, dtype, 1234, sha)
    np.testing.assert_array_equal(np.asarray(read), tokens)
    assert entry["max_token"] == tokens.max()
    (tmp_path / "empty.bin").write_bytes(raw[:16] + bytes(8) + raw[24:HEADER_BYTES])  # a count of 0
    assert read_shard(tmp_path / "empty.bin")[1].size == 0
    (tmp_path / "cut.bin").write_bytes(raw[:-2])
    with pytest.raises(BiosrecallError, match="truncated"):
        read_shard_header(tmp_path / "cut.bin")
    (tmp_path / "bad.bin").write_bytes(b"X" + raw[1:])
    with pytest.raises(BiosrecallError, match="not a biosrecall token shard"):
        read_shard_header(tmp_path / "bad.bin")


def test_tokenizer_round_trips_text_and_is_deterministic(tmp_path):
    docs = make_documents(200, seed=2)
    tok = train_tokenizer(docs, VOCAB)
    assert tok.json_text == train_tokenizer(iter(docs), VOCAB).json_text
    assert tok.eod_id == 0 and tok.vocab_size <= VOCAB
    for text in [*docs[:50], "  leading and trailing  \n", "ünïcödé 東京 🙂\r\n\tx", ""]:
        ids = tok.encode(text)
        assert tok.eod_id not in ids
        assert tok.decode(ids) == text
    tok.save(tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    assert loaded.sha256 == tok.sha256 and loaded.encode_batch(docs[:5]) == tok.encode_batch(docs[:5])


def test_corpus_readers(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("one\nline two\n\n\n  \nthree\n", encoding="utf-8")
    rows = [{"text": "four"}, {"text": None}, {"text": "   "}, {"text": "five", "x": 1}]
    (tmp_path / "in" / "b.jsonl").write_text(
        "\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8"
    )
    pq.write_table(pa.table({"text": ["six", "", "seven"], "n": [1, 2, 3]}), tmp_path / "in" / "c.parquet")
    (tmp_path / "in" / ".hidden.txt").write_text("never", encoding="utf-8")
    (tmp_path / "in" / "notes.md").write_text("ignored", encoding="utf-8")
    corpus = Corpus([tmp_path / "in"])
    assert list(corpus) == ["one\nline two", "three", "four", "five", "six", "seven"]
    assert list(corpus) == list(corpus) and len(corpus.fingerprints()) == 6
    assert list(Corpus([tmp_path / "in"], max_documents=3)) == ["one\nline two", "three", "four"]
    assert [e["kind"] for e in corpus.describe()["inputs"]] == ["txt", "jsonl", "parquet"]


def test_hugging_face_input_is_streamed_with_config_and_split(tmp_path, monkeypatch):
    calls = []

    def load_dataset(name, config, split, streaming):
        calls.append((name, config, split, streaming))
        return iter([{"content": doc, "score": 1.0} for doc in make_documents(40, seed=8)])

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # the stand-in is local: no Hub to check
    corpus = Corpus(["hf:org/set:cfg"], text_column="content", hf_split="en", max_documents=30)
    result = prepare_corpus(
        corpus, tmp_path / "out", vocab_size=300, val_fraction=0.1, tokenizer_documents=10
    )
    assert calls[0] == ("org/set", "cfg", "en", True)
    assert result.manifest["splits"]["train"]["documents"] == 27
    assert result.manifest["tokenizer"]["trained_on"] == 10
    assert result.manifest["source"]["inputs"] == [
        {"kind": "huggingface", "location": "org/set", "config": "cfg", "split": "en"}
    ]
    with pytest.raises(BiosrecallError, match="has no column 'text'"):
        list(Corpus(["hf:org/set"]))


def test_prepare_is_deterministic_and_keeps_every_document(prepared, tmp_path):
    data, docs, source = prepared
    prepare_corpus(
        Corpus([source]), tmp_path / "again", vocab_size=VOCAB, val_fraction=0.05, seed=3, shard_tokens=1000
    )
    names = sorted(p.name for p in data.iterdir())
    assert names == sorted(p.name for p in (tmp_path / "again").iterdir())
    for name in names:
        assert (data / name).read_bytes() == (tmp_path / "again" / name).read_bytes(), name
    manifest = load_manifest(data)
    assert len(manifest["splits"]["train"]["shards"]) > 1
    assert manifest["splits"]["validation"]["documents"] == round(len(docs) * 0.05)
    tok = load_tokenizer(data / "tokenizer.json")
    assert tok.sha256 == manifest["tokenizer"]["sha256"]
    decoded = []
    for split in ("train", "validation"):
        stream = split_stream(data, split)
        assert stream.size == manifest["splits"][split]["tokens"] and stream[-1] == tok.eod_id
        pieces = np.split(stream, np.flatnonzero(stream == tok.eod_id) + 1)[:-1]
        decoded.extend(tok.decode(piece[:-1].tolist()) for piece in pieces)
    assert sorted(decoded) == sorted(docs)


def test_each_epoch_reads_every_window_once_in_a_new_order(prepared):
    data, _, _ = prepared
    loader = ShardLoader(data, CONTEXT, seed=5)
    for epoch in (0, 1):
        assert sorted(loader.epoch_windows(epoch).tolist()) == list(range(loader.num_windows))
    assert not np.array_equal(loader.epoch_windows(0), loader.epoch_windows(1))
    stream = split_stream(data, "train")
    rows = loader.batch(4)
    assert rows.dtype == np.int64 and rows.shape == (4, CONTEXT + 1)
    for row, window in zip(rows, loader.epoch_windows(0)[:4], strict=True):
        np.testing.assert_array_equal(row, stream[window * CONTEXT : window * CONTEXT + CONTEXT + 1])


def test_loader_resumes_exactly_across_epochs(prepared):
    data, _, _ = prepared
    first = ShardLoader(data, CONTEXT, seed=7)
    batch_size = 7
    for _ in range(first.num_windows // batch_size):  # stop just before the epoch boundary
        first.batch(batch_size)
    state = json.loads(json.dumps(first.state_dict()))
    expected = [first.batch(batch_size) for _ in range(4)]
    assert first.epoch == 1
    resumed = ShardLoader(data, CONTEXT, seed=7)
    resumed.load_state_dict({**state, "world_size": 1, "rank": 0})  # as a state of earlier releases
    for want in expected:
        np.testing.assert_array_equal(resumed.batch(batch_size), want)


def test_validation_order_is_fixed(prepared):
    data, _, _ = prepared
    full = np.concatenate(list(validation_batches(data, CONTEXT, batch_size=3)))
    assert np.array_equal(full, np.concatenate(list(validation_batches(data, CONTEXT, batch_size=5))))
    stream = split_stream(data, "validation")
    np.testing.assert_array_equal(full[1], stream[CONTEXT : 2 * CONTEXT + 1])
    loader = ShardLoader(data, CONTEXT, split="validation")
    list(loader.ordered_batches(4, max_windows=5))
    assert (loader.epoch, loader.position) == (0, 0)


def test_loader_rejects_bad_input(prepared, tmp_path):
    data, docs, _ = prepared
    with pytest.raises(BiosrecallError, match="needs 10001 tokens"):
        ShardLoader(data, 10_000, split="validation")
    other = train_tokenizer(docs[:50], VOCAB - 20)
    other.save(tmp_path / "other.json")
    with pytest.raises(BiosrecallError, match="tokenizer and shards do not match"):
        ShardLoader(data, CONTEXT, tokenizer=tmp_path / "other.json")
    ShardLoader(data, CONTEXT, tokenizer=data / "tokenizer.json")
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in data.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    raw = bytearray((copy / "train-00001.bin").read_bytes())
    raw[24:56] = bytes.fromhex(other.sha256)
    (copy / "train-00001.bin").write_bytes(bytes(raw))
    with pytest.raises(BiosrecallError, match="train-00001.bin was written with tokenizer"):
        ShardLoader(copy, CONTEXT)
    state = ShardLoader(data, CONTEXT, seed=2).state_dict()
    with pytest.raises(BiosrecallError, match="seed=2"):
        ShardLoader(data, CONTEXT, seed=3).load_state_dict(state)


def test_prepare_cli_success_overwrite_and_given_tokenizer(prepared, tmp_path, capsys):
    data, _, source = prepared
    out = tmp_path / "out"
    args = [str(source), "--out", str(out), "--vocab-size", str(VOCAB), "--val-fraction", "0.05"]
    code, stdout, _ = run_prepare(capsys, *args, "--seed", "3", "--shard-tokens", "1000")
    assert code == 0 and "tokens/s" in stdout
    assert (out / "train-00000.bin").read_bytes() == (data / "train-00000.bin").read_bytes()
    code, _, _ = run_prepare(capsys, *args, "--overwrite")
    assert code == 0 and load_manifest(out)["split"]["seed"] == 0
    code, _, _ = run_prepare(
        capsys, str(source), "--out", str(tmp_path / "t"), "--tokenizer", str(data / "tokenizer.json")
    )
    assert code == 0
    assert (tmp_path / "t" / "tokenizer.json").read_bytes() == (data / "tokenizer.json").read_bytes()


def _bad_inputs(root: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments before --out, expected message fragment); files are created here."""
    good = write_txt(root / "good.txt", make_documents(30, seed=4))
    (root / "blank.txt").write_text("\n  \n\n\t\n", encoding="utf-8")
    (root / "rows.jsonl").write_text('{"body": "no text field"}\n', encoding="utf-8")
    pq.write_table(pa.table({"body": ["x", "y"]}), root / "rows.parquet")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait".encode("latin-1"))
    (root / "junk.parquet").write_bytes(b"not parquet at all")
    (root / "table.csv").write_text("text\nhello\n", encoding="utf-8")
    (root / "one.txt").write_text("a single document\n", encoding="utf-8")
    (root / "broken.json").write_text("{not json", encoding="utf-8")
    no_eod = Tokenizer(models.BPE())
    no_eod.pre_tokenizer = pre_tokenizers.ByteLevel()
    no_eod.save(str(root / "no_eod.json"))
    return {
        "empty corpus": ([str(root / "blank.txt")], "corpus is empty"),
        "jsonl column": ([str(root / "rows.jsonl")], "rows.jsonl:1 has no column 'text' (columns: body;"),
        "parquet column": ([str(root / "rows.parquet")], "no column 'text'"),
        "missing input": ([str(root / "nope.txt")], "does not exist"),
        "not utf-8": ([str(root / "latin1.txt")], "not valid UTF-8"),
        "junk parquet": ([str(root / "junk.parquet")], "cannot read parquet"),
        "unknown type": ([str(root / "table.csv")], "unsupported file type"),
        "too few documents": ([str(root / "one.txt")], "too few to hold out"),
        "bad tokenizer": ([str(good), "--tokenizer", str(root / "broken.json")], "not a valid tokenizer"),
        "tokenizer without eod": ([str(good), "--tokenizer", str(root / "no_eod.json")], "no end-of-doc"),
        "missing tokenizer": ([str(good), "--tokenizer", str(root / "absent.json")], "absent.json does not exist"),
        "tokenizer and vocab": ([str(good), "--tokenizer", "t.json", "--vocab-size", "300"], "not both"),
        "tiny vocab": ([str(good), "--vocab-size", "100"], "out of range"),
        "val fraction": ([str(good), "--val-fraction", "1.5"], "val-fraction"),
        "hf without datasets": (["hf:openbmb/Ultra-FineWeb"], "optional 'datasets' package"),
    }  # fmt: skip


def test_prepare_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # behave as if `datasets` were not installed
    root = tmp_path / "inputs"
    root.mkdir()
    for name, (args, fragment) in _bad_inputs(root).items():
        out = tmp_path / name.replace(" ", "_")
        code, stdout, stderr = run_prepare(capsys, *args, "--out", str(out))
        assert code == 2, name
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], (name, stderr)
        assert "Traceback" not in stderr and not out.exists(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "a temporary folder was left"


def test_prepare_cli_keeps_a_non_empty_output(tmp_path, capsys):
    source = write_txt(tmp_path / "c.txt", make_documents(30, seed=6))
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious", encoding="utf-8")
    code, _, stderr = run_prepare(capsys, str(source), "--out", str(out), "--vocab-size", "300")
    assert code == 2 and stderr.startswith("error: ") and "--overwrite" in stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"] and (out / "keep.txt").read_text() == "precious"


def test_failure_inside_the_new_folder_leaves_the_old_one(tmp_path, capsys, monkeypatch):
    source = write_txt(tmp_path / "c.txt", make_documents(30, seed=6))
    out = tmp_path / "out"
    assert run_prepare(capsys, str(source), "--out", str(out), "--vocab-size", "300")[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail_midway(corpus, is_val, tokenizer, folder, shard_tokens):
        (folder / "train-00000.bin").write_bytes(b"partial")
        raise BiosrecallError("disk full (simulated)")

    monkeypatch.setattr(shards, "_encode_splits", fail_midway)
    code, _, stderr = run_prepare(
        capsys, str(source), "--out", str(out), "--vocab-size", "320", "--overwrite"
    )
    assert (code, stderr) == (2, "error: disk full (simulated)\n")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "out"]


def test_stdlib_corpus_script_keeps_long_docstrings_and_skips_tests(tmp_path):
    long_text = " ".join(["A long enough docstring about rivers and recall."] * 5)
    library = tmp_path / "lib"
    (library / "tests").mkdir(parents=True)
    (library / "pkg.py").write_text(f'"""{long_text}"""\n\ndef short():\n    """Too short."""\n')
    (library / "tests" / "test_pkg.py").write_text(f'"""{long_text}"""\n')
    (library / "broken.py").write_text("def (:\n")
    out = tmp_path / "corpus.jsonl"
    script = Path(__file__).parents[1] / "scripts" / "lm" / "stdlib_corpus.py"
    subprocess.run([sys.executable, str(script), str(out), "--root", str(library)], check=True)
    documents = [json.loads(line) for line in out.read_text().splitlines()]
    assert documents == [{"text": long_text}]
    assert list(Corpus([out])) == [long_text]
