"""Shared pytest fixtures. Each block belongs to one area of the package; keep fixtures small."""

from __future__ import annotations

import pytest

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
