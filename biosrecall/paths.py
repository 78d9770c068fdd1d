"""Where the package's frozen resources live: the attribute pools (`data/`) and templates (`templates/`).

Both folders sit at the repository root (the layout promised to users) and the package is installed
in editable mode, so they are found next to the `biosrecall/` folder.
"""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
POOLS_DIR = DATA_DIR / "pools"
TEMPLATES_DIR = REPO_ROOT / "templates"
