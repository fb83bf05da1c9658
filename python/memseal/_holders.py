"""What holds a leak: for leaked tensors that Python objects reach, the path of references up to a
named root (a module global, a local of a live frame, an object's attribute, a closure, the
traceback of a caught exception); for graphs that only autograd keeps (no Python object holds the
saved tensors), the Python tensor whose grad_fn chain keeps them alive.

Reads the garbage collector's view of the heap (gc.get_objects, gc.get_referrers), only when a
report with a leak is made, for a bounded sample of tensors per finding.
"""

import functools
import gc
import os
import re
import types
from dataclasses import dataclass

from ._holder_roots import _callable_name, _release_locals, _Roots
from ._live_sample import _graph_walk, _python_functions


@dataclass
class Holder:
    """What holds one finding's tensors: a named root and the path to it."""

    finding: int  # index into report.findings
    description: str  # "list `losses` (global of train.py)"
    kind: str  # global, local, traceback, attribute, module, hook, lru_cache, unnamed
    tensors: int  # how many of the finding's sampled storages it holds (views count once)
    via_graph: bool = False  # the tensor's autograd graph, not the tensor itself, holds them


# Marks a dict's key in a path's label ("[\x1f'name']"), so holders that differ only in such keys
# are merged and nothing else is (a module path's `model[2]` is not a key); removed from the text
# before it is shown.
_KEY = "\x1f"
_MAX_DEPTH = 6
_MAX_REFERRERS = 64



def _step_up(obj, referrer, owners, here, path):
    """How `referrer` holds `obj`: (label, object to continue from), or None to ignore it.
    Labels: ".name" (an attribute of owners[id(referrer)]), "[key]" (a dict entry), "[]", for
    closures "cell", "slot:N" (the cell's place in a function's closure) and
    "closure:variable:function", "partial:function" (an argument of a functools.partial),
    "method:function", and for what a caught exception keeps: "frame:local:function" (a local of a
    finished frame its traceback holds), "traceback" and "exception"."""
    if isinstance(referrer, types.CellType):
        return ("cell", referrer)
    if isinstance(referrer, tuple) and isinstance(obj, types.CellType):
        for index, cell in enumerate(referrer):
            if cell is obj:
                return (f"slot:{index}", referrer)
    if isinstance(referrer, types.FunctionType):
        if referrer.__closure__ is obj and path and path[-1][0].startswith("slot:"):
            index = int(path[-1][0][5:])
            names = referrer.__code__.co_freevars
            name = names[index] if index < len(names) else "?"
            return (f"closure:{name}:{_callable_name(referrer)}", referrer)
        if referrer.__defaults__ is obj or referrer.__kwdefaults__ is obj:
            return (f"default:{_callable_name(referrer)}", referrer)
        return None  # its globals, code or name: not what keeps the tensor
    if isinstance(referrer, functools.partial):
        return (f"partial:{_callable_name(referrer.func)}", referrer)
    if isinstance(referrer, types.MethodType):
        return (f"method:{_callable_name(referrer.__func__)}", referrer)
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
                return (f"[{_KEY}{shown[:40]}]", referrer)
        return None
    if isinstance(referrer, (list, tuple, set, frozenset)) or type(referrer).__name__ == "deque":
        return ("[]", referrer)
    # An object that holds its attributes itself (Python 3.11+ keeps an instance's attributes
    # inline until its __dict__ is asked for, and __slots__ never have one).
    try:
        attributes = vars(referrer)
    except Exception:  # noqa: BLE001 (no __dict__, or a __dict__ property that raises)
        attributes = {}
    if isinstance(attributes, dict):
        for key, value in list(dict.items(attributes)):
            if value is obj:
                return (f".{key}", referrer)
    for slot in _slots_of(type(referrer)):
        if getattr(referrer, slot, None) is obj:
            return (f".{slot}", referrer)
    return None


def _owns_dict(owner, attributes, obj):
    """Whether `attributes` is the __dict__ of `owner`, which holds `obj` there. A class shows its
    dict only through a read-only proxy, never the dict itself: it owns the dict it refers to that
    has `obj` under a key where its proxy has `obj` too (a class attribute, `Trainer.kept`)."""
    if getattr(owner, "__dict__", None) is attributes:
        return True
    if not isinstance(owner, type):
        return False
    proxy = owner.__dict__
    return any(value is obj and proxy.get(key) is obj for key, value in list(dict.items(attributes)))


def _slots_of(cls):
    """The __slots__ names of `cls` and its bases."""
    names = []
    for klass in getattr(cls, "__mro__", ()):
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else list(slots))
    return names


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
                module = roots.module_root(obj) if path else None
                if module is not None:
                    return list(path), module
                referrers = gc.get_referrers(obj)
                referrers = [r for r in referrers if id(r) not in roots.ignored][:_MAX_REFERRERS]
                if direct_referrers is None:
                    direct_referrers = len(referrers)
                # A global (or a module's slot) that names the object is its holder before a local
                # does: a method's `self`, or a loop's alias of a global, is the same object seen
                # from where the search happened to run.
                for referrer in referrers:
                    named = roots.named(obj, referrer)
                    if named is not None:
                        return list(path), named
                if local is not None and path:
                    return list(path), ("local", local[0], f"local of {local[1]}")
                owners = {}
                for referrer in referrers:
                    if isinstance(referrer, dict):
                        for owner in gc.get_referrers(referrer):
                            try:
                                if _owns_dict(owner, referrer, obj):
                                    owners[id(referrer)] = owner
                            except Exception:  # noqa: BLE001 (a property that raises)
                                continue
                for referrer in referrers:
                    step = _step_up(obj, referrer, owners, roots.here, path)
                    if step is None or id(step[1]) in registry:
                        continue
                    label, holder = step
                    registry[id(holder)] = holder
                    container = type(referrer).__name__
                    holder_type = "class" if isinstance(holder, type) else type(holder).__name__
                    next_frontier.append((id(holder), path + ((label, container, holder_type),)))
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
    # Closures, partials and bound methods first: what the user wrote is the function, not its
    # cells and tuples.
    for index, (label, _, _) in enumerate(path):
        if label.startswith("method:"):
            # An attribute of the object a bound method (a hook, a callback) is bound to.
            inner = path[:index]
            attributes = "".join(step for step, _, _ in reversed(inner)
                                 if step.startswith(".") or (step.startswith("[") and step != "[]"))
            owner = inner[-1][2] if inner else "object"
            container = next((c for step, c, _ in inner if step.startswith("[")), None) or "tensor"
            holder = name if kind == "hook" else f"`{name}`"
            return (kind, f"{container} `{attributes or 'self'}` of the {owner} behind {holder} "
                          f"({where})")
        if not label.startswith(("closure:", "partial:", "default:")):
            continue
        what, _, function = label.partition(":")
        variable = None
        if what == "closure":
            variable, _, function = function.partition(":")
        if kind == "hook" and f"`{function}`" in name:
            # The hook is that function: "closure variable `scale` of forward pre-hook `f` of ..."
            prefix = {"closure": f"closure variable `{variable}` of", "partial":
                      "an argument of functools.partial, the", "default": "a default argument of"}
            return (kind, f"{prefix[what]} {name} ({where})")
        prefix = {"closure": f"closure variable `{variable}` of `{function}`", "partial":
                  f"an argument of functools.partial(`{function}`)", "default":
                  f"a default argument of `{function}`"}
        holder = name if kind == "hook" else f"`{name}`"
        return (kind, f"{prefix[what]}, held by {holder} ({where})")
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
    if owner == "class":
        text += ", a class attribute"
    elif owner is not None:
        text += f" of {owner}"
    return (kind, f"{text} ({where})")


def _lru_cache_holder(finding, lru_caches, roots):
    """The description of the functools.lru_cache whose function made the finding's tensors, or
    None. Its entries live inside the wrapper, where the heap search cannot see them."""
    functions = _python_functions(finding)
    for wrapper in lru_caches:
        code = getattr(getattr(wrapper, "__wrapped__", None), "__code__", None)
        if code is None or (os.path.basename(code.co_filename), code.co_name) not in functions:
            continue
        info = wrapper.cache_info()
        bound = "no maxsize" if info.maxsize is None else f"maxsize={info.maxsize}"
        path, root = _path_to_root(wrapper, roots)
        where = f"; `{root[1]}`, {root[2]}" if root is not None and not path else ""
        return ("lru_cache", f"functools.lru_cache of `{_callable_name(wrapper.__wrapped__)}` "
                             f"({info.currsize} entries, {bound}{where})")
    return None


def _merged_entries(counts):
    """Holders that differ only in a container's key (lists under a dict's keys, one per module)
    are one holder: `captured[…]` with the number of keys."""
    groups = {}
    for (kind, text), count in counts.items():
        general = re.sub(r"\[" + _KEY + r"[^\]]*\]", "[…]", text)
        groups.setdefault((kind, general), []).append(((kind, text), count))
    merged = {}
    for (kind, general), members in groups.items():
        if len(members) == 1:
            merged[members[0][0]] = members[0][1]
        else:
            total = sum(count for _, count in members)
            keys = f"under at least {len(members)} keys"
            general = general[:-1] + f"; {keys})" if general.endswith(")") else f"{general}, {keys}"
            merged[(kind, general)] = total
    return merged


def holders_of(findings, sample):
    """A list of memseal.Holder, at most a few per finding, from live_tensors()."""
    roots = None
    try:
        roots = _roots_of(sample)
        return _holders_from(findings, sample, roots)
    finally:
        if roots is not None:
            _release_locals(roots.read_frames)


def _roots_of(sample):
    return _Roots(ignored={id(sample.tensors), id(sample.graphs), id(sample.other_graphs),
                            id(sample.lru_caches)}
                   | {id(v) for v in sample.tensors.values()}
                   | {id(v) for v in sample.graphs.values()})


def _holders_from(findings, sample, roots):
    holders = []
    for index in range(len(findings)):
        by_storage = {}
        for tensor in sample.tensors.get(index, []):
            by_storage.setdefault(tensor.untyped_storage().data_ptr(), []).append(tensor)
        # The analysis' own lists are no referrers of the tensors.
        ignored_lists = {id(tensors) for tensors in by_storage.values()}
        roots.ignored |= ignored_lists
        counts = {}
        for tensors in by_storage.values():
            # The first tensor of the storage that a root names speaks for it.
            described = None
            for tensor in tensors:
                path, root = _path_to_root(tensor, roots)
                key = _describe(path, root)
                if described is None or (described[0] == "unnamed" and key[0] != "unnamed"):
                    described = key
                if key[0] != "unnamed":
                    break
            counts[described] = counts.get(described, 0) + 1
        tensor = tensors = None
        by_storage.clear()
        roots.ignored -= ignored_lists
        # Tensors that autograd saved (activations behind a kept output) have no Python holder of
        # their own: the named holder of the output speaks for the whole finding.
        named = {key: count for key, count in counts.items() if key[0] != "unnamed"}
        if named:
            counts = _merged_entries(named)
        via_graph = False
        if not named and index in sample.graphs:
            # No Python object holds what is retained: name the tensor whose graph keeps it, the
            # one with the longest history among those a root names: of the root's type, else of
            # another type whose graph reaches a node of the root's type.
            wanted = findings[index].tensor.grad_fn
            best = None
            for candidates, must_reach in ((sample.graphs[index], False),
                                           (sample.other_graphs, True)):
                for tensor in candidates:
                    length, names = _graph_walk(tensor.grad_fn)
                    if must_reach and wanted not in names:
                        continue
                    path, root = _path_to_root(tensor, roots)
                    if root is None:
                        continue
                    # What outlives the step first: a local of a running frame may be the step's
                    # own output, whose graph reaches the chain that a buffer or a global keeps
                    # (a search while the loop runs meets it; one after the loop does not).
                    rank = (root[0] != "local", length)
                    if best is None or rank > best[0]:
                        best = (rank, _describe(path, root), type(tensor.grad_fn).__name__)
                tensor = None
                if best is not None and best[0][0]:
                    break
            if best is not None:
                (_, length), (kind, text), grad_fn = best
                text += f", whose grad_fn {grad_fn} keeps {length} autograd nodes alive"
                counts = {(kind, text): 1}
                via_graph = True
        if not named and not via_graph:
            cache = _lru_cache_holder(findings[index], sample.lru_caches, roots)
            if cache is not None:
                counts = {cache: sum(counts.values()) or 1}
        # The most tensors first; between holders of as many, a local of a running frame last: a
        # search while the loop runs (memseal run) meets the step's own tensors in its locals.
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0][0] == "local"))
        for (kind, text), count in ranked[:3]:
            holders.append(Holder(index, text.replace(_KEY, ""), kind, count, via_graph))
    return holders
