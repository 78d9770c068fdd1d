"""Where the package's frozen resources live: the attribute pools and the bioS templates.

Both ship inside the package (`biosrecall/resources/pools/`, `biosrecall/resources/templates/`) and
are found through `importlib.resources`, so a wheel, a regular install and an editable checkout read
the same files. The repository root keeps the layout promised to users: `data/pools` and
`templates/` there are links to these folders, not copies, so there is one source of each file.

An installed package never writes into its own install folder: `writable_pools_dir` hands out the
package's pool folder only when the package runs from a checkout.
"""

from importlib.resources import files
from pathlib import Path

from biosrecall.errors import BiosrecallError


def _package_dir() -> Path:
    root = files("biosrecall")
    # pip and uv unpack wheels, so the package is a folder; the readers below need real paths
    # (globbing, hashing, copying a template into an exported model), which a zip import lacks.
    if not isinstance(root, Path):
        raise BiosrecallError("biosrecall must be installed as a folder, not imported from a zip archive")
    return root.resolve()


PACKAGE_DIR = _package_dir()
RESOURCES_DIR = PACKAGE_DIR / "resources"
POOLS_DIR = RESOURCES_DIR / "pools"
TEMPLATES_DIR = RESOURCES_DIR / "templates"


def running_from_checkout() -> bool:
    """True when the package is the `biosrecall/` folder of a source checkout (an editable install)."""
    checkout = PACKAGE_DIR.parent
    return (checkout / "pyproject.toml").is_file() and (checkout / "data" / "pools").resolve() == POOLS_DIR


def writable_pools_dir(out: str | Path | None) -> Path:
    """Where `biosrecall pools` writes: `out`, or the checkout's pool folder when none is given.

    From an installed package the default would be site-packages, which belongs to the installer.
    """
    if out is not None:
        return Path(out)
    if running_from_checkout():
        return POOLS_DIR
    raise BiosrecallError(
        "biosrecall runs from an installed package, whose pool folder is not to be written: "
        "give --out FOLDER for the rebuilt pools"
    )
