"""Benchmark: greedy generation at K = 16 with the KV-cached decoder vs a full forward per new token.

The uncached reference reruns prelude + 16 iterations + coda over the whole sequence for every new
token; the decoder runs them for the new token only, attending to cached keys and values. Both run
side by side on the same random-weight `bios-cpu` model and prompt, and must produce the same tokens
(the decoder with a fixed depth reproduces `forward(tokens, 16)` greedy decoding). Times are
best-of-N.

    python benchmarks/bench_decode.py            # 64-token prompt, 64 new tokens, best of 3
    python benchmarks/bench_decode.py --quick    # 16-token prompt, 16 new tokens, best of 2

`run(quick=False) -> dict` is what `benchmarks/run_all.py` imports; its "ratios" are its table lines.
"""

from __future__ import annotations

import argparse
import time

import torch

from biosrecall.model import LoopedTransformer, get_preset
from biosrecall.model.decode import greedy_decode, uncached_greedy

DEPTH = 16
PRESET = "bios-cpu"


def _best(function, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return result, best


def run(quick: bool = False) -> dict:
    prompt_len, new_tokens, repeats = (16, 16, 2) if quick else (64, 64, 3)
    torch.manual_seed(0)
    model = LoopedTransformer(get_preset(PRESET)).eval()
    prompt = torch.randint(3, model.config.vocab_size, (prompt_len,)).tolist()
    cached, cached_s = _best(lambda: greedy_decode(model, prompt, new_tokens, DEPTH).tokens, repeats)
    uncached, uncached_s = _best(lambda: uncached_greedy(model, prompt, new_tokens, DEPTH), repeats)
    report = {
        "name": "decode",
        "preset": PRESET,
        "depth": DEPTH,
        "prompt_tokens": prompt_len,
        "new_tokens": new_tokens,
        "threads": torch.get_num_threads(),
        "cached_tokens_per_s": new_tokens / cached_s,
        "uncached_tokens_per_s": new_tokens / uncached_s,
        "speedup": uncached_s / cached_s,
        "identical": cached == uncached,
    }
    context = (
        f"{report['cached_tokens_per_s']:.1f} vs {report['uncached_tokens_per_s']:.1f} tokens/s, "
        f"{PRESET}, prompt {prompt_len} + {new_tokens} new tokens"
    )
    report["ratios"] = [
        _row(f"decode KV-cached / uncached greedy tokens/s, K={DEPTH}", report["speedup"], None, context),
        _row("decode cached tokens == uncached tokens", report["identical"], True, f"{new_tokens} tokens"),
    ]
    return report


def _row(name: str, measured, target, context: str) -> dict:
    ok = None if target is None else measured == target
    return {"name": name, "measured": measured, "target": target, "op": ">=", "ok": ok, "context": context}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short prompt and answer (seconds)")
    report = run(quick=parser.parse_args().quick)
    for row in report["ratios"]:
        print(f"{row['name']:<52}{row['measured']!s:>8.8}  {row['context']}")


if __name__ == "__main__":
    main()
