"""`generate --pools-dir`: pools of your own in the format of data/pools/, the bits per person that follow,
byte-identical datasets from the package's own pools, and one clear error line for a bad pool file."""

from __future__ import annotations

import hashlib
import json
import math
import shutil

import pytest
from harness import changes, run_cli, snapshot

from biosrecall.bios import ATTRIBUTES, load_dataset
from biosrecall.bios.pools import POOL_NAMES
from biosrecall.cli import main
from biosrecall.paths import POOLS_DIR

# The pool sizes of PhysicsLM4's bioS; ours are longer, so their first lines make such pools.
PHYSICS_LM4_SIZES = {"birth_city": 200, "employer": 263, "major": 100, "university": 300}


def pool_folder(root, lines=None, replace=None):
    """A copy of data/pools/ with each file cut to `lines[name]` lines, or replaced by `replace[name]` text."""
    folder = root / "pools"
    folder.mkdir()
    for name in POOL_NAMES:
        values = (POOLS_DIR / f"{name}.txt").read_text(encoding="utf-8").splitlines()
        text = "\n".join(values[: (lines or {}).get(name, len(values))]) + "\n"
        (folder / f"{name}.txt").write_text((replace or {}).get(name, text), encoding="utf-8")
    return folder


def generate(capsys, out, *args):
    code, err = run_cli(["generate", "--out", str(out), *args], capsys)
    assert code == 0, err
    return load_dataset(out)


def test_the_package_pools_given_as_pools_dir_give_the_same_dataset(tmp_path, capsys, bios_dataset):
    """A default-pools dataset does not change when its pools are named, or copied elsewhere and named:
    the manifest, which holds every file's hash, is byte-identical. The vocabulary is built from the
    pool values in use, which are the same, so it is the same too."""
    named = generate(
        capsys, tmp_path / "named", "--people", "300", "--seed", "7", "--pools-dir", str(POOLS_DIR)
    )
    copy = shutil.copytree(POOLS_DIR, tmp_path / "copy")
    copied = generate(capsys, tmp_path / "copied", "--people", "300", "--seed", "7", "--pools-dir", str(copy))
    assert named.manifest_hash == copied.manifest_hash == bios_dataset.manifest_hash


def test_physics_lm4_pool_sizes_give_the_bits_computed_by_hand(tmp_path, capsys):
    folder = pool_folder(tmp_path, lines=PHYSICS_LM4_SIZES)
    sizes = [arg for name, n in PHYSICS_LM4_SIZES.items() for arg in ("--pool-size", f"{name}={n}")]
    dataset = generate(capsys, tmp_path / "d", "--people", "50", "--pools-dir", str(folder), *sizes)
    by_hand = (
        math.log2(200) + math.log2(28) + math.log2(12) + math.log2(300) + math.log2(100) + math.log2(263)
    )
    assert dataset.total_bits == pytest.approx(by_hand) and round(by_hand, 2) == 38.95
    assert dataset.pool_sizes == {**dataset.pool_sizes, **PHYSICS_LM4_SIZES}
    for name in POOL_NAMES:
        digest = hashlib.sha256((folder / f"{name}.txt").read_bytes()).hexdigest()
        assert dataset.manifest["source_hashes"][f"pools/{name}.txt"] == digest


def test_smaller_pools_of_your_own_values_lower_the_bits(tmp_path, capsys):
    cities = ["Atlantis", "El Dorado", "Zürich", "São Paulo"]
    folder = pool_folder(tmp_path, lines={"major": 8}, replace={"birth_city": "\n".join(cities) + "\n"})
    dataset = generate(
        capsys, tmp_path / "d", "--people", "40", "--pools-dir", str(folder),
        "--pool-size", "birth_city=4", "--pool-size", "major=8",
    )  # fmt: skip
    assert dataset.total_bits == pytest.approx(33.392 - 6 - 6 + 2 + 3, abs=1e-3)
    assert dataset.bits_per_attribute["birth_city"] == 2.0
    assert set(dataset.people["birth_city"]) <= set(cities)
    vocabulary = dataset.tokenizer.get_vocab()
    assert {"▁Zürich", "▁São", "▁Paulo", "▁Atlantis"} <= set(vocabulary)  # the vocabulary follows the pools
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["values"]["birth_city"] == cities


def test_the_summary_shows_how_much_of_each_file_is_in_use(tmp_path, capsys):
    """Sizes pick the first n lines whatever the folder, so a longer file of one's own is visibly cut."""
    folder = pool_folder(tmp_path, lines=PHYSICS_LM4_SIZES)
    main(["generate", "--out", str(tmp_path / "d"), "--people", "20", "--pools-dir", str(folder)])
    out = capsys.readouterr().out
    assert "birth_city 64 of 200" in out and "employer 128 of 263" in out and "bits/person   33.39" in out


def test_a_pool_shorter_than_its_size_names_the_fix(tmp_path, capsys):
    folder = pool_folder(tmp_path, lines={"employer": 50})
    code, err = run_cli(["generate", "--out", str(tmp_path / "d"), "--pools-dir", str(folder)], capsys)
    assert code == 2 and "pool size 128 for employer is above the pool length 50" in err
    assert "--pool-size employer=N with N <= 50" in err and not (tmp_path / "d").exists()


BAD_POOLS = {
    "duplicate": ("major", "Law\nArt\nLaw\n", r"major.txt line 3: duplicate of line 1 ('Law')"),
    "blank line": ("birth_city", "Paris\n\nRome\n", "birth_city.txt line 2: empty value"),
    "only spaces": ("employer", "Acme\n   \n", "employer.txt line 2: value '   ' tokenizes to nothing"),
    "leading space": ("university", "MIT\n Yale\n", "university.txt line 2: value ' Yale' has leading"),
    "tab": ("major", "Law\tArt\n", "major.txt line 1: value 'Law\\tArt' holds an unprintable"),
    "special token": ("employer", "Acme <sep>\n", "employer.txt line 1: value 'Acme <sep>' holds '<'"),
    "space mark": ("birth_city", "New▁York\n", "birth_city.txt line 1: value 'New▁York' holds '▁'"),
    "name of two words": ("first_name", "Ann\nMary Ann\n", "first_name.txt line 2: name part 'Mary Ann'"),
    "punctuation first": (
        "major",
        "-Law\n",
        "major.txt line 1: value '-Law' must start with a letter or digit",
    ),
}


@pytest.mark.parametrize("case", list(BAD_POOLS))
def test_a_bad_pool_file_is_one_line_naming_file_and_line(case, tmp_path, capsys):
    name, text, message = BAD_POOLS[case]
    folder = pool_folder(tmp_path, replace={name: text})
    before = snapshot(tmp_path)
    code, err = run_cli(["generate", "--out", str(tmp_path / "d"), "--pools-dir", str(folder)], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err and str(folder) in err, err
    assert changes(before, snapshot(tmp_path)) == []


def replace_by_folder(path):
    path.unlink()
    path.mkdir()


ODD_FILES = {
    "missing": (
        lambda f: (f / "major.txt").unlink(),
        "pool file {f}/major.txt not found (a pool folder holds",
    ),
    "a folder": (
        lambda f: replace_by_folder(f / "major.txt"),
        "pool file {f}/major.txt is not a regular file",
    ),
    "not UTF-8": (
        lambda f: (f / "last_name.txt").write_bytes(b"M\xfcller\n"),
        "pool file {f}/last_name.txt: not UTF-8",
    ),
    "no folder": (
        lambda f: shutil.rmtree(f),
        "pool file {f}/first_name.txt not found (a pool folder holds first_name.txt",
    ),
}


@pytest.mark.parametrize("case", list(ODD_FILES))
def test_missing_and_odd_pool_files_are_named(case, tmp_path, capsys):
    damage, message = ODD_FILES[case]
    folder = pool_folder(tmp_path)
    damage(folder)
    before = snapshot(tmp_path)
    code, err = run_cli(["generate", "--out", str(tmp_path / "d"), "--pools-dir", str(folder)], capsys)
    assert code == 2 and err.count("\n") == 1 and message.format(f=folder) in err, err
    assert changes(before, snapshot(tmp_path)) == []


def test_the_output_may_not_replace_the_pools_it_reads(tmp_path, capsys):
    folder = pool_folder(tmp_path)
    code, err = run_cli(["generate", "--out", str(folder), "--overwrite", "--pools-dir", str(folder)], capsys)
    assert code == 2 and "is the input" in err
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.txt" for n in POOL_NAMES)


def test_crlf_pool_files_read_like_lf_ones(tmp_path, capsys):
    folder = pool_folder(tmp_path)
    for name in ATTRIBUTES:
        path = folder / f"{name}.txt"
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    crlf = generate(capsys, tmp_path / "crlf", "--people", "30", "--pools-dir", str(folder))
    plain = generate(capsys, tmp_path / "plain", "--people", "30")
    assert crlf.manifest["values"] == plain.manifest["values"]
    assert crlf.people.equals(plain.people)
