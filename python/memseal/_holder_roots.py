"""The roots the holder search names what it finds by: the program's module globals, the locals of
its live frames (with the line that updates one, `+=` or `.append`), a notebook's variables, and
the slots of its nn.Modules (buffers, parameters, hooks). Part of _holders.py's search, embedded
with it into `memseal run`'s Python plugin.
"""

import functools
import os
import re
import sys
import sysconfig
import types


def _module_dicts():
    return {
        id(vars(module)): module
        for module in list(sys.modules.values())
        if module is not None and hasattr(module, "__dict__")
    }


def _notebook_namespace():
    """The variables of the IPython shell or notebook kernel this runs in, or None outside one."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    try:
        shell = get_ipython() if get_ipython is not None else None
    except Exception:  # noqa: BLE001 (an IPython half torn down)
        return None
    namespace = getattr(shell, "user_ns", None)
    return namespace if isinstance(namespace, dict) else None


_NOTEBOOK = "a variable of the notebook"


def _key_of(namespace, obj):
    """The first name under which `namespace` (a dict) holds `obj` itself, or None."""
    return next((name for name, value in list(dict.items(namespace)) if value is obj), None)


def _where(module):
    path = getattr(module, "__file__", None)
    return os.path.basename(path) if path else module.__name__


def _live_named_locals(skip_files, read_frames):
    """[(name, value, where)] for the locals of the frames running now, outside memseal; the
    function frames whose locals were read are added to `read_frames` (_release_locals). The
    caller drops the list before walking the heap: its tuples refer to the values."""
    found = []
    for frame in sys._current_frames().values():
        while frame is not None:
            code = frame.f_code
            # A module's frame has its globals as locals: those are named as globals instead. The
            # skipped frames' f_locals are never read: reading this function's own would leave on
            # its frame a copy of its locals, `found` among them, in a cycle through `frame` that
            # kept every value found (a list of outputs a returned function had built up) alive
            # until the garbage collector's next full pass.
            if not any(code.co_filename.startswith(p) for p in skip_files) and \
                    frame.f_locals is not frame.f_globals:
                file = os.path.basename(code.co_filename)
                found.extend(
                    (name, value,
                     f"{code.co_name} ({file}:{_update_line(code, name) or frame.f_lineno})")
                    for name, value in frame.f_locals.items())
                if code.co_flags & _CO_OPTIMIZED:
                    read_frames.append(frame)
            frame = frame.f_back
    return found


# A function's frame (its locals live in the frame, and f_locals is a copy of them).
_CO_OPTIMIZED = 0x1

# How a loop keeps what each iteration made in a local: `total += loss`, `losses.append(loss)`,
# `cache[key] = output`, `total = total + loss` (in that order of preference).
_UPDATES = (
    r"\b{name}\s*(?:\+|-|\*|/|//|@|\||&)=",
    r"\b{name}\s*\.\s*(?:append|extend|insert|add|update|setdefault|appendleft|extendleft)\s*\(",
    r"\b{name}\s*\[[^\]]*\]\s*=(?!=)",
    r"\b{name}\s*=(?!=).*\b{name}\b",
)


@functools.lru_cache(maxsize=4096)
def _update_line(code, name):
    """The line of `code`'s own source (not its nested functions') where the local `name` is kept
    updated, as a person would point at it; None when no line does it (a local only assigned)."""
    try:
        numbers = sorted({line for _, _, line in code.co_lines() if line is not None})
    except (AttributeError, TypeError):
        return None
    if not numbers:
        return None
    import linecache

    lines = [(number, linecache.getline(code.co_filename, number)) for number in numbers]
    for pattern in _UPDATES:
        compiled = re.compile(pattern.format(name=re.escape(name)))
        for number, text in lines:
            if compiled.search(text.split("#", 1)[0]):
                return number
    return None


def _release_locals(frames):
    """Before Python 3.13, reading a function frame's f_locals leaves a copy of its locals on the
    frame until the function reads them again or returns: what they held then stays alive (a
    running total the program has since reset, and the graph behind it, which `memseal run`,
    searching while the loop runs, would then see held one period longer). The copies are
    emptied; Python fills them again from the frame whenever they are read (a debugger's trace
    function reads them before it writes them back). Class bodies and exec() namespaces, whose
    f_locals are the namespace itself, are no function frames and are left alone."""
    if sys.version_info < (3, 13):
        for frame in frames:
            frame.f_locals.clear()
    frames.clear()


def _live_locals(named_locals):
    """id(object) -> (name, where) for _live_named_locals()."""
    found = {}
    for name, value, where in named_locals:
        found.setdefault(id(value), (name, where))
    return found


# Where a torch.nn.Module keeps what it holds: the dicts named here are roots that say which module
# path and which slot (`model.layers[3]` forward pre-hook, `decoder.k_cache` buffer).
_MODULE_SLOTS = (
    ("_forward_pre_hooks", "forward pre-hook"),
    ("_forward_hooks", "forward hook"),
    ("_backward_pre_hooks", "backward pre-hook"),
    ("_backward_hooks", "backward hook"),
    ("_state_dict_hooks", "state_dict hook"),
    ("_load_state_dict_pre_hooks", "load_state_dict pre-hook"),
    ("_buffers", "buffer"),
    ("_parameters", "parameter"),
)


def _library_paths():
    paths = {sysconfig.get_paths().get(key) for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    return tuple(os.path.abspath(p) + os.sep for p in paths if p)


def _module_path(root, name):
    """'model' + 'layers.3.attn' -> 'model.layers[3].attn'."""
    path = root
    for part in name.split(".") if name else ():
        path += f"[{part}]" if part.isdigit() else f".{part}"
    return path


def _module_slots(named_roots):
    """({id(module): (path, where, module)}, {id(slot dict): (path, slot, module type, where, module,
    attribute)}) for the torch.nn.Modules that globals of the program's own files and locals of
    running frames name."""
    torch_nn = sys.modules.get("torch.nn")
    if torch_nn is None:
        return {}, {}
    module_type = torch_nn.Module
    paths, slots = {}, {}
    for name, value, where in named_roots:
        if not issubclass(type(value), module_type) or id(value) in paths:
            continue
        try:
            submodules = list(value.named_modules())
        except Exception:  # noqa: BLE001 (a user module whose traversal raises)
            continue
        for sub_name, module in submodules[:10000]:
            path = _module_path(name, sub_name)
            paths.setdefault(id(module), (path, where, module))
            for attribute, slot in _MODULE_SLOTS:
                held = vars(module).get(attribute)
                if isinstance(held, dict):
                    # The module and attribute, to check the dict is still the one met here.
                    slots.setdefault(id(held), (path, slot, type(module).__name__, where, module,
                                                attribute))
    return paths, slots


def _callable_name(function):
    """`scale_inputs` for step.<locals>.scale_inputs, `Decoder.forward` for a method."""
    if isinstance(function, functools.partial):
        return _callable_name(function.func)
    if isinstance(function, types.MethodType):
        function = function.__func__
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None) or \
        type(function).__name__
    return name.rsplit("<locals>.", 1)[-1]


class _Roots:
    def __init__(self, ignored):
        self.modules = _module_dicts()
        self.here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        self.read_frames = []  # whose locals were read: release_locals() empties their copies
        libraries = _library_paths()
        # The locals of the program's own frames only: a library's (torch's backward() with the
        # loss as `self`, where `memseal run` may search from) are its own.
        named_locals = _live_named_locals([self.here, *libraries], self.read_frames)
        self.locals = _live_locals(named_locals)
        self.ignored = ignored  # ids of the analysis' own containers
        # A notebook's variables are named as the notebook's, not as globals of the module IPython
        # keeps them in (__main__, or a stand-in module of a test shell).
        self.notebook = _notebook_namespace()
        named = []
        if self.notebook is not None:
            named.extend((name, value, _NOTEBOOK) for name, value in list(self.notebook.items()))
        for module in self.modules.values():
            if self.notebook is not None and vars(module) is self.notebook:
                continue
            path = getattr(module, "__file__", None)
            if module.__name__ != "__main__" and (
                    not path or os.path.abspath(path).startswith(libraries)):
                continue  # the program's own files only: libraries' module-level objects are theirs
            named.extend((name, value, f"global of {_where(module)}")
                         for name, value in list(vars(module).items()))
        named.extend((name, value, f"local of {where}") for name, value, where in named_locals)
        self.module_paths, self.module_slots = _module_slots(named)
        named.clear()
        named_locals.clear()

    def named(self, obj, referrer):
        """(kind, name, where) when `referrer` names `obj` as a root, else None."""
        if self.notebook is not None and referrer is self.notebook:
            name = _key_of(referrer, obj)
            if name is not None:
                return ("global", name, _NOTEBOOK)
        module = self.modules.get(id(referrer))
        # Identity, not the id alone: an object in sys.modules whose __dict__ is made anew on each
        # access leaves an id that a later object may reuse.
        if module is not None and isinstance(referrer, dict) and \
                getattr(module, "__dict__", None) is referrer:
            name = _key_of(referrer, obj)
            if name is not None:
                return ("global", name, f"global of {_where(module)}")
        slot = self.module_slots.get(id(referrer))
        if slot is not None and isinstance(referrer, dict) and \
                vars(slot[4]).get(slot[5]) is referrer:
            path, kind, module_type, where = slot[:4]
            for key, value in list(dict.items(referrer)):
                if value is not obj:
                    continue
                if kind in ("buffer", "parameter"):
                    return ("attribute", f"{path}.{key}", f"{kind} of {module_type}, {where}")
                count = len(referrer)
                registered = f"{count} {kind}s registered" if count != 1 else f"1 {kind} registered"
                return ("hook", f"{kind} `{_callable_name(obj)}` of `{path}`",
                        f"{registered}; {where}")
        return None

    def module_root(self, obj):
        """(kind, name, where) when `obj` is a module a root names, else None."""
        found = self.module_paths.get(id(obj))
        if found is None or found[2] is not obj:
            return None
        return ("module", found[0], found[1])
