"""What holds a leak's tensors in a Python program traced by `memseal run`.

Run inside the traced program (embedded into libmemseal_run_python.so with the Python module's own
holder search, python/memseal/_live_sample.py, _holder_roots.py and _holders.py, whose texts the
plugin puts in this module's globals as LIVE_SAMPLE_SOURCE, HOLDER_ROOTS_SOURCE and HOLDERS_SOURCE
before running it): the program's environment needs no memseal package, and `memseal run` names
holders as `memseal check` does.

find(request) takes the report's findings as JSON (what the heap search reads of them: category,
graph root, whether what was freed is building up again, storage addresses and Python frames) and
returns the holders as JSON, in the report's "python.holders" form.
"""

import json
import sys
import types
from types import SimpleNamespace

# The files of the embedded code: an absolute path no file has, so that the heap search skips the
# frames of memseal's own code (its hooks and this search) as it skips the Python module's.
_FOLDER = "/<memseal run>/"
_PACKAGE = "_memseal_run_holders"


def _load_search():
    """(live_tensors, holders_of) from the embedded sources, loaded as the submodules of a package
    for their relative import, then taken out of sys.modules again."""
    loaded = {}
    package = types.ModuleType(_PACKAGE)
    package.__path__ = []
    sys.modules[_PACKAGE] = package
    try:
        for name, source in (("_live_sample", LIVE_SAMPLE_SOURCE),  # noqa: F821
                             ("_holder_roots", HOLDER_ROOTS_SOURCE),  # noqa: F821
                             ("_holders", HOLDERS_SOURCE)):  # noqa: F821
            module = types.ModuleType(f"{_PACKAGE}.{name}")
            module.__file__ = f"{_FOLDER}{name}.py"
            module.__package__ = _PACKAGE
            sys.modules[module.__name__] = module
            exec(compile(source, module.__file__, "exec"), vars(module))  # noqa: S102
            loaded[name] = module
    finally:
        for name in (_PACKAGE, f"{_PACKAGE}._live_sample", f"{_PACKAGE}._holder_roots",
                     f"{_PACKAGE}._holders"):
            sys.modules.pop(name, None)
    return loaded["_live_sample"].live_tensors, loaded["_holders"].holders_of


_live_tensors, _holders_of = _load_search()


def _site(frames):
    return SimpleNamespace(frames=[
        SimpleNamespace(file=frame["file"], function=frame["function"],
                        is_internal=frame["internal"])
        for frame in frames])


def _finding(item):
    """What the heap search reads of a finding, as the Python module's bindings show it."""
    freed = item.get("freed")
    return SimpleNamespace(
        category=item["category"],
        tensor=SimpleNamespace(grad_fn=item["grad_fn"]),
        freed=None if freed is None else SimpleNamespace(building_up=freed["building_up"]),
        site=_site(item["frames"]),
        parts=[SimpleNamespace(storage_addresses=part["storage_addresses"],
                               site=_site(part["frames"]))
               for part in item["parts"]])


def find(request):
    """The holders of the request's findings, as JSON. Never raises: a search that fails says so
    in a holder of finding -1, as the Python module's report does."""
    try:
        findings = [_finding(item) for item in json.loads(request)["findings"]]
        sample = _live_tensors(findings)
        try:
            holders = _holders_of(findings, sample)
        finally:
            sample.clear()
        found = [{"finding": holder.finding, "description": holder.description,
                  "kind": holder.kind, "tensors": holder.tensors, "via_graph": holder.via_graph}
                 for holder in holders]
    except Exception as error:  # noqa: BLE001 (the heap is the program's: never fail it)
        found = [{"finding": -1, "kind": "unnamed", "tensors": 0, "via_graph": False,
                  "description": f"the holder search failed: {type(error).__name__}: {error}"}]
    return json.dumps(found)
