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

import os
import re
import socket
import ssl
import threading
import urllib.parse
import urllib.request
from pathlib import Path

from biosrecall.errors import BiosrecallError

# The variables huggingface_hub, datasets and transformers each read to stay offline.
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
DEFAULT_ENDPOINT = "https://huggingface.co"
# A TCP connection to the Hub (or the proxy) and its first reply take well under a second where there
# is network.
CONNECT_TIMEOUT_SECONDS = 3.0


def offline_variable() -> str | None:
    """The first offline variable set to a true value (1, ON, YES, TRUE, as the libraries read them)."""
    for name in OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return name
    return None


def hub_unreachable(timeout: float = CONNECT_TIMEOUT_SECONDS) -> str | None:
    """Why the Hub's endpoint ($HF_ENDPOINT), or its https proxy, did not answer within `timeout`
    seconds, or None when it did. Name resolution runs in a thread of its own, as it has no timeout of
    its own; the thread is given up on (it is a daemon) once `timeout` has passed."""
    address = _address()
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            _answers(*address, timeout)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc.strerror or str(exc) or type(exc).__name__)

    thread = threading.Thread(target=probe, name="hub-check", daemon=True)
    thread.start()
    thread.join(timeout)
    host = address[0]
    if not outcome:
        return f"{host}: no answer within {timeout:g} s"
    return None if outcome[0] is None else f"{host}: {outcome[0]}"


def _answers(host: str, port: int, greeting: str, timeout: float) -> None:
    """Connect and wait for the first reply; an OSError when none comes. An accepted connection is not
    enough: a listener that never replies (a hung proxy, a firewall's) keeps the libraries retrying
    for half a minute, as a refused one does not."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        if greeting == "tls":
            # Only whether a server answers is asked here; the libraries check its certificate.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.wrap_socket(sock, server_hostname=host).close()  # the handshake is the reply
            return
        sock.sendall(greeting.encode("ascii"))
        if not sock.recv(1):
            raise ConnectionError("closed the connection without answering")


def _address() -> tuple[str, int, str]:
    """(host, port, greeting) of what a request to the Hub connects to first, its https proxy when one
    applies: the greeting is an HTTP request that any server or proxy answers, or "tls" for a TLS
    handshake with an https endpoint."""
    endpoint = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    proxy = urllib.request.getproxies().get(endpoint.scheme or "https")
    if proxy and not urllib.request.proxy_bypass(host):
        parsed = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        target = f"{host}:{port}"
        return parsed.hostname or host, parsed.port or 80, _request("CONNECT", target, target)
    if endpoint.scheme == "http":
        return host, port, _request("HEAD", "/", host)
    return host, port, "tls"


def _request(method: str, target: str, host: str) -> str:
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


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
