"""Meeting the Hugging Face ecosystem: export a run as a `transformers` model folder, and score any
causal LM on bioS with the same exact-match scorer as `recall-curve`.

    export.py                 run checkpoint -> folder that AutoModelForCausalLM / AutoTokenizer load
    template/modeling_biosrecall.py   the modeling code copied into every export (torch + transformers),
                              beside a copy of `biosrecall/model/layers.py` whose layers it runs
    card.py                   the export's README.md: schedule, budget, data, recall
    loading.py                a model folder -> (model, tokenizer), with one-line errors
    prompts.py                bioS evaluation rows as text, encoded with the model's own tokenizer
    scoring.py                greedy exact-match flags at each depth -> the recall-curve long table

    from biosrecall.hf.export import export_run
    from biosrecall.hf.scoring import score_hf_model
    export_run("runs/ff", "exported", checkpoint="final")
    table = score_hf_model("exported", "data/bios-1k", depths=[1, 4, 16], depth_arg="num_steps")

Everything here needs the optional extra `hf` (transformers), imported only when called, so the
default install still imports every biosrecall module.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from biosrecall.errors import BiosrecallError

EXTRA_HINT = "pip install 'biosrecall[hf]'"

__all__ = ["EXTRA_HINT", "quiet_transformers", "require_transformers"]


def require_transformers():
    """The `transformers` module, or a `BiosrecallError` naming the extra that installs it."""
    try:
        import transformers
    except ImportError:
        raise BiosrecallError(f"this needs the transformers library: {EXTRA_HINT}") from None
    return transformers


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars and only errors from transformers inside the block (a command prints its own
    one-line results); the caller's settings are restored after."""
    from transformers.utils import logging

    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()
