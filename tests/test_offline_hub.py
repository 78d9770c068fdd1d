"""An unreachable Hugging Face Hub: `lm prepare hf:NAME` and `--hf-model NAME` fail at once with one
line saying how to give a local copy, the offline variables are honoured, and nothing is written.

The Hub is made unreachable by pointing HF_ENDPOINT at a local port nothing listens on (or one whose
listener never answers), so these tests behave the same on a machine with network. Each failing
command must end within FAST seconds: a bound on what a user waits for, not a benchmark.

    pytest -q tests/test_offline_hub.py
"""

from __future__ import annotations

import socket
import sys
import time
from types import SimpleNamespace

import pytest
from harness import changes, snapshot

from biosrecall.cli import main
from biosrecall.hub import hub_unreachable, offline_variable

FAST = 5.0  # seconds: the libraries' own retries took 26 s and more


def cli(capsys, *argv: str) -> tuple[int, str]:
    """Run the command in this process; (exit status, stderr), once it has ended within FAST seconds."""
    start = time.monotonic()
    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert elapsed < FAST, (elapsed, err)
    return code, err


def one_line(code: int, err: str) -> str:
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    return lines[0]


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """HF_ENDPOINT on a local port that refuses connections, no offline variable, a fresh folder."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: connecting is refused
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def silent_hub(no_hub, monkeypatch):
    """HF_ENDPOINT on a local port whose listener never accepts: the system completes the connection
    (the backlog), and nothing is ever said on it, as with a hung proxy."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{sock.getsockname()[1]}")
        yield no_hub


def test_an_unreachable_hub_is_found_and_named(no_hub):
    assert hub_unreachable().startswith("127.0.0.1: ")


def test_an_endpoint_that_is_no_url_is_named_without_a_traceback(monkeypatch, capfd):
    monkeypatch.setenv("HF_ENDPOINT", "hf-mirror.com")
    assert hub_unreachable() == "hf-mirror.com: unknown url type: 'hf-mirror.com'"
    assert "Traceback" not in capfd.readouterr().err


def test_prepare_from_a_hub_that_never_answers_fails_within_seconds(silent_hub, capsys):
    before = snapshot(silent_hub)
    line = one_line(*cli(capsys, "lm", "prepare", "hf:someone/thing", "--out", "shards"))
    assert "cannot reach the Hugging Face Hub for hf:someone/thing (127.0.0.1: " in line
    assert "--local-dir DIR" in line
    assert changes(before, snapshot(silent_hub)) == []


def test_prepare_from_an_unreachable_hub_fails_at_once_saying_how_to_use_a_local_copy(no_hub, capsys):
    before = snapshot(no_hub)
    line = one_line(*cli(capsys, "lm", "prepare", "hf:someone/thing", "--out", "shards"))
    assert "cannot reach the Hugging Face Hub for hf:someone/thing (127.0.0.1: " in line
    assert "huggingface-cli download --repo-type dataset someone/thing --local-dir DIR" in line
    assert changes(before, snapshot(no_hub)) == []


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_an_offline_variable_skips_the_hub_and_the_library_reads_its_cache(
    no_hub, capsys, monkeypatch, variable
):
    def load_dataset(name, config, split, streaming):
        raise ConnectionError(f"Couldn't reach '{name}' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv(variable, "1")
    assert offline_variable() == variable
    line = one_line(*cli(capsys, "lm", "prepare", "hf:someone/thing", "--out", "shards"))
    assert f"OfflineModeIsEnabled) ({variable} is set, so only the local cache is read)" in line
    assert "--repo-type dataset someone/thing" in line and not (no_hub / "shards").exists()


def test_a_hub_model_name_is_refused_at_once_saying_how_to_download_it(no_hub, capsys):
    (no_hub / "data").mkdir()
    line = one_line(*cli(capsys, "recall-curve", "--hf-model", "someone/thing", "--data", "data"))
    assert line.startswith("error: --hf-model folder someone/thing not found; models are read from local")
    assert "huggingface-cli download someone/thing --local-dir DIR" in line
    assert not (no_hub / "recall-curve").exists()
