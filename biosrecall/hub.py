"""The Hugging Face Hub from a machine that may have no network: the offline variables, and a check
that the Hub answers which takes seconds, not the minute of retries the libraries spend on their own.

    offline_variable()         # "HF_DATASETS_OFFLINE" when that variable (or another) asks for offline
    hub_unreachable()          # None, or why the Hub does not answer ("huggingface.co: Name or ...")
    dataset_download_hint("openbmb/Ultra-FineWeb")   # how to give a local copy instead
    check_model_folder("someone/thing")      # a --hf-model folder, or one line saying how to get one

A cluster node without network is the normal case, so an `hf:` input there fails at once with one
line saying how to point at a local copy, before any output is made.
"""

from __future__ import annotations

import http.client
import os
import re
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from biosrecall.errors import BiosrecallError

# The variables huggingface_hub, datasets and transformers each read to stay offline.
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
DEFAULT_ENDPOINT = "https://huggingface.co"
# A connection to the Hub (or the proxy) and its first reply take well under a second where there is
# network.
CONNECT_TIMEOUT_SECONDS = 3.0


def offline_variable() -> str | None:
    """The first offline variable set to a true value (1, ON, YES, TRUE, as the libraries read them)."""
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return name
    return None


def hub_unreachable(timeout: float = CONNECT_TIMEOUT_SECONDS) -> str | None:
    """Why the Hub's endpoint ($HF_ENDPOINT) did not answer a HEAD request within `timeout` seconds,
    through the https proxy where one applies (urllib reads the proxy variables as the libraries do), or
    None when it did. Any reply counts, an HTTP error status included: an accepted connection alone is
    not enough, as a listener that never replies (a hung proxy, a firewall's) keeps the libraries
    retrying for half a minute. Name resolution has no timeout of its own, so the request runs in a
    thread of its own, given up on (it is a daemon) once `timeout` has passed."""
    endpoint = os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    host = urllib.parse.urlsplit(endpoint).hostname or endpoint
    # Only whether a server answers is asked here; the libraries check its certificate.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            urllib.request.urlopen(
                urllib.request.Request(endpoint, method="HEAD"), timeout=timeout, context=context
            ).close()
            outcome.append(None)
        except (urllib.error.HTTPError, http.client.HTTPException):  # a status, or any reply, is an answer
            outcome.append(None)
        except (OSError, ValueError) as exc:  # URLError wraps the socket's error; ValueError: no URL
            reason = getattr(exc, "reason", exc)
            outcome.append(getattr(reason, "strerror", None) or str(reason) or type(reason).__name__)

    thread = threading.Thread(target=probe, name="hub-check", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"{host}: no answer within {timeout:g} s"
    return None if outcome[0] is None else f"{host}: {outcome[0]}"


def dataset_download_hint(name: str) -> str:
    """How to give a Hub dataset as local files instead (for a machine without network)."""
    return (
        f"download it where there is network (huggingface-cli download --repo-type dataset {name} "
        "--local-dir DIR), copy DIR here and give its .parquet/.jsonl/.txt files or the folder instead"
    )


def check_model_folder(model_dir: str | Path) -> Path:
    """`model_dir` as a Path when it is a folder; otherwise one line, saying how to download a Hub name."""
    folder = Path(model_dir)
    if folder.is_dir():
        return folder
    message = f"--hf-model folder {folder} not found"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", str(model_dir)) and not os.path.lexists(folder.parent):
        message += (
            "; models are read from local folders only (nothing is downloaded): download it where there "
            f"is network (huggingface-cli download {model_dir} --local-dir DIR), copy DIR here and pass "
            "--hf-model DIR"
        )
    raise BiosrecallError(message)
