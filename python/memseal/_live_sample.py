"""The sample of live Python tensors that the holder search starts from: for each finding, a bounded
number of tensors on its retained storages and of tensors whose autograd graph has the type of the
finding's root, found on the garbage collector's heap (gc.get_objects) only when a report with a
leak is made.
"""

import functools
import gc
import os

_TENSORS_PER_FINDING = 8

def _graph_walk(grad_fn, limit=5000):
    """(autograd nodes reachable from grad_fn, up to `limit`; their type names). Python makes a
    new wrapper for a node on every access: the wrappers met are kept, so ids stay unique."""
    kept = []
    seen = set()
    names = set()
    stack = [grad_fn]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        kept.append(node)
        seen.add(id(node))
        names.add(type(node).__name__)
        stack.extend(next_fn for next_fn, _ in getattr(node, "next_functions", ()))
    return len(seen), names


# Tensors with autograd history of another type than a graph finding's root, kept for the findings
# whose graph no tensor of the root's type names (a buffer written in place every step, whose
# CopySlices chains each step's graph to the last). A few of each type: tensors the graphs saved
# are on the heap too (Python keeps a tensor's object while C++ holds the tensor), hundreds of one
# type in a long run, and they must not crowd out the one buffer that holds the chain.
_OTHER_GRAPH_TENSORS = 64
_OTHER_GRAPH_TENSORS_PER_TYPE = 8
_STORAGES_PER_FINDING = 8
_TENSORS_PER_STORAGE = 3


class LiveSample:
    """What live_tensors() found on the heap for the findings (a bounded sample): `tensors`
    {finding: [Python tensors on its retained storage]}, `graphs` {finding: [tensors whose grad_fn
    has the type of the finding's graph root]}, `other_graphs` [tensors with history of other
    types], `lru_caches` [functools.lru_cache wrappers holding entries]."""

    def __init__(self):
        self.tensors = {}
        self.graphs = {}
        self.other_graphs = []
        self.lru_caches = []

    def clear(self):
        self.tensors.clear()
        self.graphs.clear()
        self.other_graphs.clear()
        self.lru_caches.clear()


def live_tensors(findings):
    """The LiveSample of the findings."""
    import torch

    wanted = {}  # storage address -> (finding, part)
    for index, finding in enumerate(findings):
        for part_number, part in enumerate(finding.parts):
            for address in part.storage_addresses:
                wanted.setdefault(address, (index, part_number))
    graph_findings = {
        index: finding.tensor.grad_fn
        for index, finding in enumerate(findings)
        if finding.category in ("autograd-graph-retained", "grad-enabled-inference", "create-graph-cycle")
        and finding.tensor.grad_fn
        # What was freed before the report has no holder left (unless it is building up again).
        and (finding.freed is None or finding.freed.building_up)
    }
    graph_names = set(graph_findings.values())
    functions = set()
    for finding in findings:
        functions |= _python_functions(finding)
    sample = LiveSample()
    per_part = {}  # (finding, part) -> {storage address: [tensors on it]}
    other_types = {}  # grad_fn type name -> tensors of it in sample.other_graphs
    lru_type = type(functools.lru_cache(maxsize=1)(len))
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads __class__, which lazy module proxies answer
        # with deprecation warnings.
        if type(obj) is lru_type:
            # Only the caches of functions that made the findings' tensors (libraries have many).
            code = getattr(getattr(obj, "__wrapped__", None), "__code__", None)
            if code is not None and \
                    (os.path.basename(code.co_filename), code.co_name) in functions and \
                    obj.cache_info().currsize > 0:
                sample.lru_caches.append(obj)
            continue
        if not issubclass(type(obj), torch.Tensor):
            continue
        try:
            address = obj.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 (sparse, meta, subclasses without storage)
            continue
        owner = wanted.get(address)
        if owner is not None:
            # Every Python tensor on a storage (a view kept in a cache, the base it was made from)
            # up to a few: the one a root names may be any of them.
            storages = per_part.setdefault(owner, {})
            if address in storages or len(storages) < _STORAGES_PER_FINDING:
                tensors = storages.setdefault(address, [])
                if len(tensors) < _TENSORS_PER_STORAGE:
                    tensors.append(obj)
        grad_fn = obj.grad_fn
        if grad_fn is not None and graph_findings:
            name = type(grad_fn).__name__
            for index, wanted_name in graph_findings.items():
                candidates = sample.graphs.setdefault(index, [])
                if name == wanted_name and len(candidates) < _TENSORS_PER_FINDING:
                    candidates.append(obj)
            if name not in graph_names and len(sample.other_graphs) < _OTHER_GRAPH_TENSORS and \
                    other_types.get(name, 0) < _OTHER_GRAPH_TENSORS_PER_TYPE:
                other_types[name] = other_types.get(name, 0) + 1
                sample.other_graphs.append(obj)
    _take_storages_of_every_part(per_part, sample)
    return sample


def _take_storages_of_every_part(per_part, sample):
    """Up to _STORAGES_PER_FINDING storages of each finding, taken from its parts in turn: the
    parts' storages come from different ops and steps (a layer's kept input, the next layer's), and
    where they sit on the heap (the first ones met) says nothing of which part they are."""
    by_finding = {}
    for (index, _), storages in sorted(per_part.items(), key=lambda item: item[0]):
        by_finding.setdefault(index, []).append(list(storages.values()))
    for index, parts in by_finding.items():
        taken = []
        for depth in range(_STORAGES_PER_FINDING):
            for storages in parts:
                if depth < len(storages) and len(taken) < _STORAGES_PER_FINDING:
                    taken.append(storages[depth])
        sample.tensors[index] = [tensor for tensors in taken for tensor in tensors]
    per_part.clear()


def _python_functions(finding):
    """{(file name, function name)} of the Python frames where the finding's tensors were made."""
    functions = set()
    sites = [finding.site] + [part.site for part in finding.parts]
    for site in sites:
        for frame in site.frames:
            if frame.file.endswith(".py") and not frame.is_internal:
                functions.add((os.path.basename(frame.file), frame.function.rsplit(".", 1)[-1]))
    return functions
