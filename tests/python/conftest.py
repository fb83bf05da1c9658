import gc
import os

import pytest

pytest_plugins = ["pytester"]

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases")


@pytest.fixture
def case_path():
    return lambda name: os.path.join(CASES, name)


@pytest.fixture(autouse=True)
def collected_garbage():
    """Every test starts without garbage of earlier tests waiting for the collector."""
    gc.collect()
    yield
    gc.collect()
