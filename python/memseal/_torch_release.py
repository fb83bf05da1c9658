"""The torch release memseal's core was built against, and the refusal of another one.

The core (memseal._memseal, and the memseal command's runtime) is bound to the ABI of libtorch's
internals, which changes between releases: loaded beside another torch it fails to load with an
undefined symbol at best, and misreads libtorch's objects at worst. So the package checks the torch
this Python imports before it loads the core, and says how to build memseal for that torch.
"""

import os
import sys

try:
    from ._torch_build import TORCH_SUPPORTED, TORCH_VERSION  # written by the build
except ImportError:  # the package's Python files alone (a source checkout): nothing to compare
    TORCH_VERSION = None
    TORCH_SUPPORTED = ("2.9", "2.16")


def release(version):
    """"2.11.0+cu130" -> "2.11.0": the builds of one release share the ABI memseal relies on."""
    return version.split("+", 1)[0]


def requirement():
    """What to pip install where torch is missing."""
    if TORCH_VERSION is None:
        return f"torch>={TORCH_SUPPORTED[0]},<{TORCH_SUPPORTED[1]}"
    return f"torch=={release(TORCH_VERSION)}"


def mismatch(torch_version, torch_folder=None):
    """Why this memseal cannot run beside torch `torch_version` (installed in `torch_folder`), or
    None when it can (or when either version is unknown)."""
    if not torch_version or TORCH_VERSION is None:
        return None
    if release(torch_version) == release(TORCH_VERSION):
        return None
    where = f" ({torch_folder})" if torch_folder else ""
    oldest, end = TORCH_SUPPORTED
    return (
        f"this memseal was built against torch {TORCH_VERSION}, but this Python imports torch "
        f"{torch_version}{where}: memseal's core is bound to the libtorch it was built with. "
        f"Build memseal for this torch, in this environment (memseal builds against torch {oldest} "
        f"up to, not including, {end}): {sys.executable} -m pip install --force-reinstall "
        f"--no-deps --no-cache-dir PATH-TO-MEMSEAL (a checkout or its source archive; "
        f"--no-build-isolation too where scikit-build-core is installed), or use a Python whose "
        f"torch is {release(TORCH_VERSION)}")


def check_installed_torch():
    """Raises ImportError when this Python's torch is not the release memseal was built with."""
    import torch

    folder = os.path.dirname(torch.__file__) if getattr(torch, "__file__", None) else None
    why = mismatch(torch.__version__, folder)
    if why is not None:
        raise ImportError("memseal: " + why)
