"""Sizes before work: what a command will take of memory, disk and time, estimated from its arguments
and checked against what this machine has, before anything is written.

    cost = dataset_cost(10_000_000)                 # Cost(memory=..., disk=..., seconds=...)
    check_fits("generate --people 10,000,000", cost, out_dir, "use fewer people")
    if shows_progress(cost): ...                     # long work says what it is doing

Why: an input larger than the machine otherwise fails late and badly (a MemoryError traceback after
the dataset was written, a study silent for minutes before the kernel kills it). Each estimate is a
fixed part plus a part per person (or per biography, per token), measured on real runs of this
package (a 2-core x86 machine, numpy 2, from 50,000 to 2,000,000 people; peak resident memory
beyond what the process held before the work began). `tests/test_hostile_round3.py` checks an
estimate against a measured run. The memory this machine has is the smallest of what
/proc/meminfo calls available, what the process's cgroup (v2 `memory.max`, v1
`memory.limit_in_bytes`) leaves, and what its address-space limit (RLIMIT_AS) leaves.

Every estimate lives here, and every command that allocates in proportion to its arguments
(`generate`, `capacity`, `figure1`, `lm prepare`, `recall-curve --people`) asks this module first.
"""

from __future__ import annotations

import resource
import shutil
from dataclasses import dataclass
from pathlib import Path

from biosrecall.errors import BiosrecallError

# ---- measured costs (see the module docstring) -----------------------------------------------------

GENERATE_FIXED = 75e6
"""Peak memory of generating any dataset: pools, templates, tokenizer, parquet writer."""
GENERATE_PER_PERSON = 350.0
"""Peak memory per person while a dataset is built and written (people, arrays, the parquet table)."""
GENERATE_SECONDS_PER_PERSON = 2.5e-6
DATASET_DISK_FIXED = 2e5
DATASET_DISK_PER_PERSON = 66.0
"""A dataset folder's bytes per person (zstd parquet and int32 arrays)."""
LOAD_FIXED = 70e6
LOAD_PER_PERSON = 570.0
"""Memory a process holds once it has read a dataset (people table, arrays, token store)."""
EVAL_SET_PER_PERSON = 14_000.0
"""Peak memory per person while the evaluation set is built (30 rows of int64 tokens and the
gathers that fill them; 4.8 kB per person stay held while it is scored)."""
EXACT_PER_PERSON_AND_DEPTH = 30.0
"""The exact-match flags a scoring pass keeps: one byte per row (30 per person) and depth."""
EVAL_SECONDS_PER_PERSON = 6e-5
EXPORT_FIXED = 80e6
EXPORT_PER_PERSON = 4_000.0
"""Peak memory per person of `generate --export-text` (everyone's training row, decoded in chunks)."""
EXPORT_DISK = {"jsonl": (390.0, 4_250.0), "parquet": (70.0, 130.0)}
"""Bytes per biography (person x exposure) and per person's 30 evaluation rows, by text format."""
EXPORT_SECONDS_PER_PERSON, EXPORT_SECONDS_PER_BIOGRAPHY = 3.5e-4, 6e-5
SHARD_BYTES_PER_INPUT_BYTE = 1.0
"""`lm prepare`: a byte-level BPE writes at most one token per input byte (each token 2 or 4 bytes);
English text at the default vocabulary gives about a quarter of that, so the estimate is `itemsize /
4` per byte and the bound `itemsize` per byte."""
TYPICAL_BYTES_PER_TOKEN = 4.0

PROGRESS_AFTER = 10.0
"""Work estimated to take longer than this many seconds says what it is doing as it goes."""


@dataclass(frozen=True)
class Cost:
    """What a piece of work takes: peak memory beyond what the process holds now, bytes written, and
    wall time (seconds)."""

    memory: float = 0.0
    disk: float = 0.0
    seconds: float = 0.0

    def then(self, other: Cost) -> Cost:
        """This work, then `other`: the larger peak, the sum of the rest."""
        return Cost(max(self.memory, other.memory), self.disk + other.disk, self.seconds + other.seconds)

    def alongside(self, other: Cost) -> Cost:
        """This work and `other` at the same time (two processes): their peaks add up."""
        return Cost(self.memory + other.memory, self.disk + other.disk, max(self.seconds, other.seconds))


def dataset_cost(people: int) -> Cost:
    """Generating (and writing) a dataset of `people` people."""
    return Cost(
        GENERATE_FIXED + GENERATE_PER_PERSON * people,
        DATASET_DISK_FIXED + DATASET_DISK_PER_PERSON * people,
        0.1 + GENERATE_SECONDS_PER_PERSON * people,
    )


def loaded_dataset_bytes(people: int) -> float:
    """Memory of a process that has read a dataset of `people` people (a training or scoring run)."""
    return LOAD_FIXED + LOAD_PER_PERSON * people


def scoring_cost(people: int, max_depth: int = 64, dataset_people: int | None = None) -> Cost:
    """Scoring one checkpoint on the evaluation set of `people` people to `max_depth`: the dataset
    (of `dataset_people`, default `people`) read whole, the evaluation set built and its exact flags
    kept (no disk: the cached tables are small)."""
    per_person = EVAL_SET_PER_PERSON + EXACT_PER_PERSON_AND_DEPTH * max_depth
    held = loaded_dataset_bytes(people if dataset_people is None else dataset_people)
    return Cost(held + per_person * people, 0.0, EVAL_SECONDS_PER_PERSON * people)


def export_cost(people: int, exposures: int, text_format: str) -> Cost:
    """`generate --export-text`: `people` x `exposures` biographies and 30 evaluation rows a person."""
    per_biography, per_person = EXPORT_DISK[text_format]
    return Cost(
        loaded_dataset_bytes(people) + EXPORT_FIXED + EXPORT_PER_PERSON * people,
        per_biography * people * exposures + per_person * people,
        EXPORT_SECONDS_PER_PERSON * people + EXPORT_SECONDS_PER_BIOGRAPHY * people * exposures,
    )


def shards_cost(input_bytes: int, itemsize: int) -> tuple[Cost, Cost]:
    """`lm prepare` of `input_bytes` bytes of text into tokens of `itemsize` bytes: (the typical
    cost, the most it can take). The pass streams, so memory does not grow with the corpus."""
    typical = Cost(0.0, input_bytes * itemsize / TYPICAL_BYTES_PER_TOKEN, 0.0)
    bound = Cost(0.0, input_bytes * itemsize * SHARD_BYTES_PER_INPUT_BYTE, 0.0)
    return typical, bound


# ---- what the machine has ------------------------------------------------------------------------


def _read_number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isascii() and text.isdigit() else None


def _proc_size(path: Path, key: str) -> int | None:
    """The `key: <n> kB` line of a /proc file, in bytes; None when absent or unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        parts = value.split()
        if name == key and parts and parts[0].isdigit():
            return int(parts[0]) * 1024
    return None


def _cgroup_left() -> list[tuple[int, str]]:
    """What each level of the process's memory cgroup leaves (its limit less its usage), and where."""
    try:
        entries = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    found = []
    for entry in entries:
        _, controllers, group = entry.split(":", 2) if entry.count(":") >= 2 else ("", "", "")
        if controllers == "":  # v2: every level from the process's group up to the root
            folder = Path("/sys/fs/cgroup") / group.lstrip("/")
            for level in (folder, *folder.parents):
                limit = _read_number(level / "memory.max")
                used = _read_number(level / "memory.current")
                if limit is not None and used is not None:
                    found.append((max(0, limit - used), f"cgroup {level / 'memory.max'}"))
                if level == Path("/sys/fs/cgroup"):
                    break
        elif "memory" in controllers.split(","):  # v1
            folder = Path("/sys/fs/cgroup/memory") / group.lstrip("/")
            limit = _read_number(folder / "memory.limit_in_bytes")
            used = _read_number(folder / "memory.usage_in_bytes")
            if limit is not None and used is not None and limit < 1 << 60:
                found.append((max(0, limit - used), f"cgroup {folder / 'memory.limit_in_bytes'}"))
    return found


def available_memory() -> tuple[int, str]:
    """(bytes this process may still allocate, where that limit comes from)."""
    found = _cgroup_left()
    available = _proc_size(Path("/proc/meminfo"), "MemAvailable")
    if available is not None:
        found.append((available, "MemAvailable in /proc/meminfo"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = _proc_size(Path("/proc/self/status"), "VmSize") or 0
        found.append((max(0, soft - used), f"ulimit -v, an address-space limit of {show_bytes(soft)}"))
    if not found:  # no /proc: nothing to check against
        return 1 << 62, "no known limit"
    return min(found)


def free_disk(path: str | Path) -> int:
    """Free bytes on the file system where `path` is (or would be created)."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return 1 << 62


def format_seconds(seconds: float) -> str:
    """A duration as progress lines write it: "40s", "3m20s", "2h05m" ("?" when unknown)."""
    if seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def show_bytes(count: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} bytes"


def check_fits(what: str, cost: Cost, out: str | Path | None, advice: str) -> None:
    """Refuse work whose memory or disk estimate exceeds what the machine has, in one line naming the
    estimate and the limit; `what` names the work ("--people 10,000,000"), `out` where it writes."""
    limit, source = available_memory()
    if cost.memory > limit:
        problem = (
            f"needs about {show_bytes(cost.memory)} of memory, more than the {show_bytes(limit)} "
            f"this machine has available ({source}); {advice}"
        )
    elif out is not None and cost.disk > 0 and cost.disk > (free := free_disk(out)):
        problem = (
            f"writes about {show_bytes(cost.disk)}, more than the {show_bytes(free)} free on "
            f"the disk of {out}; {advice}, or free some space"
        )
    else:
        return
    raise BiosrecallError(f"{what} {problem}")


def shows_progress(cost: Cost) -> bool:
    """Whether work of this cost is long enough to report what it is doing."""
    return cost.seconds > PROGRESS_AFTER


def describe(cost: Cost) -> str:
    """E.g. "about 40s, 3.5 GB of memory, 660.0 MB on disk", for a progress line (times written as
    every progress line writes them)."""
    parts = [f"about {format_seconds(cost.seconds)}", f"{show_bytes(cost.memory)} of memory"]
    if cost.disk:
        parts.append(f"{show_bytes(cost.disk)} on disk")
    return ", ".join(parts)
