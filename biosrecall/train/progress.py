"""Progress reporting for training: a tqdm bar on a terminal, dense log lines otherwise, or nothing.

The trainer calls `reporter.start(total, done)`, `reporter.update(record)` after every update and
`reporter.close()`; the CLI picks which reporter to pass (`--quiet` picks `SilentReporter`). With
`TrainConfig.log`, the trainer wraps it in `biosrecall.train.tracking.TrackingReporter`, which also
sends every record to TensorBoard, W&B or Trackio.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from biosrecall.sizing import format_seconds


class SilentReporter:
    def start(self, total: int, done: int) -> None:
        pass

    def update(self, record: dict[str, Any]) -> None:
        pass

    def message(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class LineReporter(SilentReporter):
    """One dense line every `every` updates on stderr (for logs and non-interactive shells)."""

    def __init__(self, every: int = 50, stream=None):
        self.every = every  # a TrainConfig's log_every: at least 1
        self.stream = stream or sys.stderr

    def start(self, total: int, done: int) -> None:
        self.total, self.first_update, self.started = total, done, time.perf_counter()

    def update(self, record: dict[str, Any]) -> None:
        done = record["update"] + 1
        if done % self.every and done != self.total:
            return
        elapsed = time.perf_counter() - self.started
        rate = (done - self.first_update) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("nan")
        self.message(
            f"update {done}/{self.total}  depth {record['depth']:>2}  loss {record['loss']:.4f}  "
            f"lr {record['lr']:.2e}  flops {record['flops']:.3e}  tok/s {record['tokens_per_s']:.0f}  "
            f"eta {format_seconds(eta)}"
        )

    def message(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class BarReporter(SilentReporter):
    """A tqdm progress bar with ETA and the latest loss and depth."""

    def __init__(self):
        self.bar = None

    def start(self, total: int, done: int) -> None:
        from tqdm.std import tqdm

        self.bar = tqdm(total=total, initial=done, unit="upd", dynamic_ncols=True, file=sys.stderr)

    def update(self, record: dict[str, Any]) -> None:
        self.bar.set_postfix(loss=f"{record['loss']:.3f}", K=record["depth"], refresh=False)
        self.bar.update(1)

    def message(self, text: str) -> None:
        from tqdm.std import tqdm

        tqdm.write(text, file=sys.stderr)  # above the bar, once there is one

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def make_reporter(quiet: bool, log_every: int):
    if quiet:
        return SilentReporter()
    return BarReporter() if sys.stderr.isatty() else LineReporter(log_every)
