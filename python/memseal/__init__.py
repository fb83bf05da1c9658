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
    print(memseal.diff("before.json", peak))  # what moved the peak, which leak causes are new
    print(memseal.whatif(torch.cuda.memory._snapshot()).text())  # another allocator setting?

The verdict, categories, numbers and hints come from the same C++ core as memseal's C++ API and
the `memseal check` command; `python -m memseal check CASE.py` is that command for Python files.
"""

# Nothing is loaded until it is used: `memseal run`, `memseal --version` and the pytest plugin's
# registration start without importing torch; the first use of the API below loads torch (libtorch
# and its Python bindings, which the core needs first) and the core.
import importlib as _importlib

_EXPORTS = {
    "CATEGORIES": "_api", "LeakError": "_api", "ScopeLeakError": "_api", "Watch": "_api",
    "check": "_api", "watch": "_api",
    "ROLES": "_explain", "FitReport": "_explain", "PeakReport": "_explain", "explain": "_explain",
    "fit": "_explain", "write_html": "_explain",
    "CycleGarbage": "_report", "Holder": "_holders", "LeakReport": "_report",
    "Scope": "_scope", "merge": "_distributed", "ReportDiff": "_diff", "diff": "_diff",
    "WhatIfReport": "_whatif", "whatif": "_whatif",
    "__version__": "_memseal", "CHECK_REPORT_SCHEMA": "_memseal", "CHECK_REPORT_VERSION": "_memseal",
    "load_ipython_extension": "_ipython", "unload_ipython_extension": "_ipython",
}

__all__ = sorted(name for name in _EXPORTS if not name.startswith("_") and "ipython" not in name)


def __getattr__(name):
    if name == "_memseal":
        _check_torch()  # imports torch (see above)
        return _importlib.import_module("._memseal", __name__)
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'memseal' has no attribute '{name}'")
    if where == "_memseal":
        # The other modules load the core through `from . import _memseal`: this function too.
        _check_torch()
    value = getattr(_importlib.import_module("." + where, __name__), name)
    globals()[name] = value
    return value


def _check_torch():
    # The core is tied to the torch release it was built against: another one is refused before
    # the core is loaded (_torch_release.py; a function of another name than that module, which
    # becomes this package's attribute once imported).
    _importlib.import_module("._torch_release", __name__).check_installed_torch()


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
