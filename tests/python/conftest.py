import gc
import importlib.util
import os
import sys

import pytest

pytest_plugins = ["pytester"]

# One intra-op thread in every program a test starts, and in this process (torch is not imported
# yet): pytest runs a worker per core, and a program beside the other worker's, each with an
# OpenMP team spinning at its barriers, ran up to 20 times slower than alone (the GAN case under
# memseal run: 14 s alone, 273 s in the suite; the same program without memseal beside two busy
# loops: 10 s with one thread, 87 s with two). A setting of the user's is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "cases")
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def case_file(name):
    """A case of tests/python/cases, or of examples/python (the demo's)."""
    for folder in (CASES, EXAMPLES):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.normpath(os.path.join(folder, name))
    return os.path.join(CASES, name)


def load_case(name):
    """A file of tests/python/cases as a module (as `python -m memseal check` loads it)."""
    spec = importlib.util.spec_from_file_location("case_" + name[:-3], case_file(name))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def case_path():
    return case_file


@pytest.fixture(autouse=True)
def collected_garbage():
    """Every test starts without garbage of earlier tests waiting for the collector, nor the cases
    they loaded (whose globals would hold models, hooks and graphs for the later tests' holder
    search to meet)."""
    gc.collect()
    yield
    for name in [name for name in sys.modules if name.startswith("case_")]:
        del sys.modules[name]
    gc.collect()
