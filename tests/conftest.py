"""Shared pytest fixtures. Each block belongs to one area of the package; keep fixtures small."""

from __future__ import annotations

import os

import pytest

# Tiny models run fastest on one thread, and the tests start subprocesses (CLI runs, torchrun ranks)
# that would otherwise oversubscribe a 2-core machine. Subprocesses inherit this.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402  (after OMP_NUM_THREADS so the thread pool honours it)

torch.set_num_threads(1)

# ---- bios: small generated datasets shared by the tests/test_bios_*.py files ----------------------

BIOS_PEOPLE = 300
BIOS_SEED = 7


@pytest.fixture(scope="session")
def bios_dataset_dir(tmp_path_factory):
    """A default-pool dataset folder of BIOS_PEOPLE people (do not modify: copy it first)."""
    from biosrecall.bios import generate_dataset

    return generate_dataset(tmp_path_factory.mktemp("bios") / "data", people=BIOS_PEOPLE, seed=BIOS_SEED)


@pytest.fixture(scope="session")
def bios_dataset(bios_dataset_dir):
    from biosrecall.bios import load_dataset

    return load_dataset(bios_dataset_dir)


# ---- end bios --------------------------------------------------------------------------------------


# ---- order: the files with slow tests first --------------------------------------------------------


def pytest_collection_modifyitems(config, items):
    """Files holding slow tests run first (each file stays in its own order): `make test` hands files
    to two workers as they free up, and a long file handed out last would leave the other worker idle
    while it runs."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)
