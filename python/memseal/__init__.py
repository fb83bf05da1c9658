"""memseal for PyTorch: finds tensor memory that leaks from step to step and says why.

    import memseal
    report = memseal.check(train_step, steps=30, warmup=5)   # step(i) for i in range(steps)

    with memseal.watch() as w:              # your own loop
        for batch in loader:
            train_step(batch)
            w.step()
    print(w.report().text())

    with memseal.Scope("preprocess") as s:   # nothing made here outlives the block...
        features = s.keep(normalize(image))  # ...except what is kept

    peak = memseal.explain(train_step, model=model, optimizer=opt)  # what the peak holds
    cap = memseal.fit(lambda batch, i: train(batch), sizes=(8, 16, 32, 64), budget="16GiB")

The verdict, categories, numbers and hints come from the same C++ core as memseal's C++ API and
the `memseal check` command; `python -m memseal check CASE.py` is that command for Python files.
"""

import torch as _torch  # noqa: F401  (loads libtorch and its Python bindings before the core)

from . import _memseal
from ._api import CATEGORIES, LeakError, ScopeLeakError, Watch, check, watch
from ._explain import ROLES, FitReport, PeakReport, explain, fit, write_html
from ._report import CycleGarbage, Holder, LeakReport
from ._scope import Scope

__version__ = _memseal.__version__
CHECK_REPORT_SCHEMA = _memseal.CHECK_REPORT_SCHEMA
CHECK_REPORT_VERSION = _memseal.CHECK_REPORT_VERSION

__all__ = [
    "CATEGORIES",
    "CHECK_REPORT_SCHEMA",
    "CHECK_REPORT_VERSION",
    "CycleGarbage",
    "FitReport",
    "PeakReport",
    "ROLES",
    "Holder",
    "LeakError",
    "LeakReport",
    "Scope",
    "ScopeLeakError",
    "Watch",
    "check",
    "explain",
    "fit",
    "watch",
    "write_html",
]
