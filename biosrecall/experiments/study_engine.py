"""The engine's run training under its former module name: this name is `biosrecall.experiments.engine`.

Training a study's runs through the sweep engine (`train_study_runs`, `study_executor`,
`write_study_record`, `StudyRunFailed`, ...) now lives in `biosrecall.experiments.engine`. Importing
this module gives that very module object, so old imports, and patches of `study_engine.run_sweep`,
reach the engine's names.
"""

import sys

from biosrecall.experiments import engine

sys.modules[__name__] = engine
