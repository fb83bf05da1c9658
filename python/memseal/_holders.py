"""What holds a leak: for leaked tensors that Python objects reach, the path of references up to a
named root (a module global, a local of a live frame, an object's attribute, a closure, the
traceback of a caught exception); for graphs that only autograd keeps (no Python object holds the
saved tensors), the Python tensor whose grad_fn chain keeps them alive.

Reads the garbage collector's view of the heap (gc.get_objects, gc.get_referrers), only when a
report with a leak is made, for a bounded sample of tensors per finding.
"""

import gc
import os
import sys
import types

_TENSORS_PER_FINDING = 8
_MAX_DEPTH = 6
_MAX_REFERRERS = 64


def _module_dicts():
    return {
        id(vars(module)): module
        for module in list(sys.modules.values())
        if module is not None and hasattr(module, "__dict__")
    }


def _where(module):
    path = getattr(module, "__file__", None)
    return os.path.basename(path) if path else module.__name__


def _live_locals(skip_files):
    """id(object) -> (name, where) for locals of the frames running now, outside memseal."""
    found = {}
    for frame in sys._current_frames().values():
        while frame is not None:
            code = frame.f_code
            # A module's frame has its globals as locals: those are named as globals instead.
            if frame.f_locals is not frame.f_globals and not any(
                code.co_filename.startswith(p) for p in skip_files
            ):
                for name, value in frame.f_locals.items():
                    found.setdefault(
                        id(value),
                        (name, f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})"),
                    )
            frame = frame.f_back
    return found


class _Roots:
    def __init__(self, ignored):
        self.modules = _module_dicts()
        self.here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        self.locals = _live_locals([self.here])
        self.ignored = ignored  # ids of the analysis' own containers

    def named(self, obj, referrer):
        """(kind, name, where) when `referrer` names `obj` as a root, else None."""
        module = self.modules.get(id(referrer))
        if module is not None:
            for name, value in dict.items(referrer):
                if value is obj:
                    return ("global", name, f"global of {_where(module)}")
        if isinstance(referrer, types.CellType):
            return ("closure", "<closure variable>", "closure of a function")
        return None


def _step_up(obj, referrer, owners, here):
    """How `referrer` holds `obj`: (label, object to continue from), or None to ignore it.
    Labels: ".name" (an attribute of owners[id(referrer)]), "[key]" (a dict entry), "[]", and for
    what a caught exception keeps: "frame:local:function" (a local of a finished frame its
    traceback holds), "traceback" and "exception"."""
    if isinstance(referrer, types.FrameType):
        if referrer.f_code.co_filename.startswith(here):
            return None  # memseal's own frames
        for name, value in referrer.f_locals.items():
            if value is obj:
                return (f"frame:{name}:{referrer.f_code.co_name}", referrer)
        return ("frame::" + referrer.f_code.co_name, referrer)
    if isinstance(referrer, types.TracebackType):
        return ("traceback", referrer)
    if isinstance(referrer, BaseException):
        return ("exception", referrer)
    if isinstance(referrer, dict):
        owner = owners.get(id(referrer))
        for key, value in list(dict.items(referrer)):
            if value is obj:
                if owner is not None:
                    return (f".{key}", owner)
                # Only keys that print cheaply are shown: a tensor key would allocate to print.
                shown = repr(key) if isinstance(key, (str, int, float, bool, type(None))) else "..."
                return (f"[{shown[:40]}]", referrer)
        return None
    if isinstance(referrer, (list, tuple, set, frozenset)) or type(referrer).__name__ == "deque":
        return ("[]", referrer)
    return None


def _path_to_root(tensor, roots):
    """([(label, container type, owner type)] from the tensor up, root) with root (kind, name,
    where) or None. Paths hold ids and names, never the objects: anything holding an object would
    show up as one more referrer of it."""
    registry = {id(tensor): tensor}  # the objects met, keyed by id; ignored as a referrer
    roots.ignored.add(id(registry))
    try:
        frontier = [(id(tensor), ())]
        roots.ignored.add(id(frontier))
        direct_referrers = None
        for _ in range(_MAX_DEPTH):
            next_frontier = []
            roots.ignored.add(id(next_frontier))
            for object_id, path in frontier:
                obj = registry[object_id]
                local = roots.locals.get(object_id)
                if local is not None and path:
                    return list(path), ("local", local[0], f"local of {local[1]}")
                referrers = gc.get_referrers(obj)
                referrers = [r for r in referrers if id(r) not in roots.ignored][:_MAX_REFERRERS]
                if direct_referrers is None:
                    direct_referrers = len(referrers)
                for referrer in referrers:
                    named = roots.named(obj, referrer)
                    if named is not None:
                        return list(path), named
                owners = {}
                for referrer in referrers:
                    if isinstance(referrer, dict):
                        for owner in gc.get_referrers(referrer):
                            try:
                                if getattr(owner, "__dict__", None) is referrer:
                                    owners[id(referrer)] = owner
                            except Exception:  # noqa: BLE001 (a property that raises)
                                continue
                for referrer in referrers:
                    step = _step_up(obj, referrer, owners, roots.here)
                    if step is None or id(step[1]) in registry:
                        continue
                    label, holder = step
                    registry[id(holder)] = holder
                    container = type(referrer).__name__
                    next_frontier.append((id(holder), path + ((label, container, type(holder).__name__),)))
                del referrers, owners, obj
                step = None
                if local is not None:
                    return list(path), ("local", local[0], f"local of {local[1]}")
            frontier = next_frontier
            if not frontier:
                break
        # No Python object refers to the tensor at all: only C++ holds it.
        return ([("cpp", "", "")] if direct_referrers == 0 else []), None
    finally:
        roots.ignored.discard(id(registry))
        registry.clear()


def _describe(path, root):
    """(kind, 'list `losses` (global of train.py)') from the path up to the root."""
    if root is None:
        if path and path[0][0] == "cpp":
            return ("unnamed", "no Python object: held from C++ (saved by an autograd graph, or in a "
                               "C++ container)")
        return ("unnamed", "no global, local or attribute names what holds them (reached only "
                           "through objects memseal does not follow)")
    kind, name, where = root
    expression = name
    # The container the tensors sit in is named, not the entry (a cache's keys differ per tensor).
    for position, (label, _, _) in reversed(list(enumerate(path))):
        if label.startswith(".") or (label.startswith("[") and label != "[]" and position > 0):
            expression += label
    frame = next((label for label, _, _ in path if label.startswith("frame:")), None)
    if frame is not None:
        _, local, function = frame.split(":", 2)
        exception = next((c for label, c, _ in path if label == "exception"), "exception")
        local_text = f"local `{local}` of {function}" if local else f"a frame of {function}"
        return ("traceback", f"the traceback of a caught {exception} ({local_text}), kept in "
                             f"`{expression}` ({where})")
    # The container the tensors sit in (the first element step from the tensor up), and the type of
    # what the expression names (walking down from the root while labels are part of it).
    container = next((c for label, c, _ in path if label.startswith("[")), None) or "tensor"
    named = path[-1][2] if path else "tensor"
    for position in range(len(path) - 1, -1, -1):
        label = path[position][0]
        if position > 0 and (label.startswith(".") or (label.startswith("[") and label != "[]")):
            named = path[position - 1][2]
        elif label.startswith("."):
            named = "tensor"
        else:
            break
    owner = next((o for label, _, o in path if label.startswith(".")), None)
    text = f"{container} `{expression}`" if named == container else \
        f"{container} in {named} `{expression}`"
    if owner is not None:
        text += f" of {owner}"
    return (kind, f"{text} ({where})")


def _graph_length(grad_fn, limit=5000):
    """Autograd nodes reachable from grad_fn (up to `limit`). Python makes a new wrapper for a node
    on every access: the wrappers met are kept, so ids stay unique while counting."""
    kept = []
    seen = set()
    stack = [grad_fn]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        kept.append(node)
        seen.add(id(node))
        stack.extend(next_fn for next_fn, _ in getattr(node, "next_functions", ()))
    return len(seen)


def live_tensors(findings):
    """Python tensors of the findings: ({finding: [tensors on its retained storage]}, {finding:
    [tensors whose grad_fn has the type of the finding's graph]}), a bounded sample of each."""
    import torch

    wanted = {}
    for index, finding in enumerate(findings):
        for part in finding.parts:
            for address in part.storage_addresses:
                wanted.setdefault(address, index)
    graph_findings = {
        index: finding.tensor.grad_fn
        for index, finding in enumerate(findings)
        if finding.category in ("autograd-graph-retained", "grad-enabled-inference", "create-graph-cycle")
        and finding.tensor.grad_fn
        # What was freed before the report has no holder left (unless it is building up again).
        and (finding.freed is None or finding.freed.building_up)
    }
    sampled = {}
    graph_candidates = {}
    objects = gc.get_objects()
    for obj in objects:
        # type(), not isinstance(): isinstance reads __class__, which lazy module proxies answer
        # with deprecation warnings.
        if not issubclass(type(obj), torch.Tensor):
            continue
        try:
            address = obj.untyped_storage().data_ptr()
        except Exception:  # noqa: BLE001 (sparse, meta, subclasses without storage)
            continue
        index = wanted.get(address)
        if index is not None and len(sampled.setdefault(index, [])) < _TENSORS_PER_FINDING:
            sampled[index].append(obj)
        grad_fn = obj.grad_fn
        if grad_fn is not None:
            for index, name in graph_findings.items():
                candidates = graph_candidates.setdefault(index, [])
                if type(grad_fn).__name__ == name and len(candidates) < _TENSORS_PER_FINDING:
                    candidates.append(obj)
    return sampled, graph_candidates


def holders_of(findings, sampled, graph_candidates):
    """A list of memseal.Holder, at most a few per finding, from live_tensors()."""
    from ._report import Holder

    roots = _Roots(ignored={id(sampled), id(graph_candidates)} | {id(v) for v in sampled.values()}
                   | {id(v) for v in graph_candidates.values()})
    holders = []
    for index in range(len(findings)):
        counts = {}
        for tensor in sampled.get(index, []):
            path, root = _path_to_root(tensor, roots)
            key = _describe(path, root)
            counts[key] = counts.get(key, 0) + 1
        tensor = None
        # Tensors that autograd saved (activations behind a kept output) have no Python holder of
        # their own: the named holder of the output speaks for the whole finding.
        named = {key: count for key, count in counts.items() if key[0] != "unnamed"}
        if named:
            counts = named
        via_graph = False
        if not named and index in graph_candidates:
            # No Python object holds what is retained: name the tensor whose graph keeps it, the
            # one with the longest history among those a root names.
            best = None
            for tensor in graph_candidates[index]:
                path, root = _path_to_root(tensor, roots)
                if root is None:
                    continue
                length = _graph_length(tensor.grad_fn)
                if best is None or length > best[0]:
                    best = (length, _describe(path, root), type(tensor.grad_fn).__name__)
            tensor = None
            if best is not None:
                counts = {}
                length, (kind, text), grad_fn = best
                text += f", whose grad_fn {grad_fn} keeps {length} autograd nodes alive"
                counts[(kind, text)] = 1
                via_graph = True
        for (kind, text), count in sorted(counts.items(), key=lambda item: -item[1])[:3]:
            holders.append(Holder(index, text, kind, count, via_graph))
    return holders
