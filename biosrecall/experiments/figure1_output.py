"""Guarding a Figure-1 output folder, under its former module name: this name is `biosrecall.experiments.figure1`.

The record check, its refusal and `--overwrite` (`differences`, `refusal`, `made_names`, `RECORD`,
`RUNS`, ...) now live in `biosrecall.experiments.figure1`, beside the `prepare` that uses them.
Importing this module gives that very module object, so old imports keep working.
"""

import sys

from biosrecall.experiments import figure1

sys.modules[__name__] = figure1
