"""Explaining memory that does not leak but still runs out: what is live at the peak of a step and
why (by role, module and Python line), how far the batch can grow, the allocation trace for
PyTorch's memory viewer, and one HTML page. The numbers come from the same C++ core as
`memseal explain` and `memseal fit`."""

import json
import threading

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._options import configure_python_frames, tracker_options

ROLES = ("parameters", "gradients", "optimizer_state", "activations", "temporaries", "other")


class _NativeReport:
    """A report of the core, with its JSON document read once for the properties."""

    def __init__(self, native):
        self._native = native
        self._data = json.loads(native.to_json())

    def text(self):
        return self._native.text()

    def to_json(self):
        return self._native.to_json()

    def to_dict(self):
        return json.loads(self.to_json())

    def _repr_pretty_(self, printer, cycle):
        """The text report: how IPython's terminal shows the report."""
        printer.text(repr(self) if cycle else self.text().rstrip("\n"))


class PeakReport(_NativeReport):
    """What was live at the highest peak of the measured steps (memseal.explain/1).

    peak_bytes, baseline_bytes (live when the step began), end_bytes; roles (role -> bytes);
    modules, sites, tensors (lists of dicts, largest first); notes; remedies (what would lower
    this peak, in bytes, most first); devices (each CUDA device at its own peak: allocated beside
    reserved, by role and site). text() for people, to_json() for tools, bytes_of(role)."""

    peak_bytes = property(lambda self: self._data["peak_bytes"])
    baseline_bytes = property(lambda self: self._data["baseline_bytes"])
    end_bytes = property(lambda self: self._data["end_bytes"])
    peak_step = property(lambda self: self._data["peak_step"])
    roles = property(lambda self: {r["role"]: r["bytes"] for r in self._data["roles"]})
    modules = property(lambda self: self._data["modules"])
    sites = property(lambda self: self._data["sites"])
    tensors = property(lambda self: self._data["tensors"])
    notes = property(lambda self: self._data["notes"])
    # What would lower this peak: dicts of kind, target, bytes, upper_bound, change, cost.
    remedies = property(lambda self: self._data.get("remedies", []))
    # Each CUDA device at its own peak (empty on the CPU): dicts of device ("cuda:0"), step,
    # allocated_bytes, reserved_bytes, cached_free_bytes, pending_free_bytes, roles, sites, ...
    devices = property(lambda self: self._data.get("devices", []))

    def bytes_of(self, role):
        return self._native.bytes_of(role)

    def _repr_html_(self):
        """The HTML report's cards without a page around them: how Jupyter shows the report."""
        return _memseal.render_html_fragment("peak", "", self._native)

    def __repr__(self):
        return f"<memseal.PeakReport peak {self.peak_bytes} bytes, step {self.peak_step}>"


class FitReport(_NativeReport):
    """Peak against size, the model that describes it and the largest size that fits the budget
    (memseal.fit/2): model ('phases', 'linear', 'quadratic' or 'none'), is_linear,
    predicted_max_size, predicted_peak_bytes, extrapolation, refusal, points; phases (each phase's
    model), limiting_phase, phase_changes; verify (what verification measured, the search
    included); largest_size (the answer to trust: measured where the search ran) and
    largest_size_measured; predict_peak(size)."""

    model = property(lambda self: self._data["model"])
    # What the peaks count: "host", or "cuda:N" (the caching allocator's reserved bytes).
    memory = property(lambda self: self._data.get("memory", "host"))
    is_linear = property(lambda self: self._data["is_linear"])
    predicted_max_size = property(lambda self: self._data["predicted_max_size"])
    predicted_peak_bytes = property(lambda self: self._data["predicted_peak_bytes"])
    refusal = property(lambda self: self._data["refusal"])
    verify = property(lambda self: self._data["verify"])
    points = property(lambda self: [(p["size"], p["peak_bytes"]) for p in self._data["points"]])
    phase_peaks = property(lambda self: [(p["size"], dict(p["phases"]))
                                         for p in self._data["points"]])
    phases = property(lambda self: self._data["phases"])
    limiting_phase = property(lambda self: self._data["limiting_phase"])
    phase_changes = property(lambda self: [(c["size"], c["phase"])
                                           for c in self._data["phase_changes"]])
    extrapolation = property(lambda self: self._data["extrapolation"])
    largest_size = property(lambda self: self._data["largest_size"])
    largest_size_measured = property(lambda self: self._data["largest_size_measured"])

    def predict_peak(self, size):
        return self._native.predict_peak(size)

    def _repr_html_(self):
        """The HTML report's cards without a page around them: how Jupyter shows the report."""
        return _memseal.render_html_fragment("fit", "", None, self._native)

    def __repr__(self):
        return f"<memseal.FitReport {self.model}, largest size {self.predicted_max_size}>"


_scopes = threading.local()


def _push_scope(name):
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    stack.append(_memseal.ModuleScope(name))


def _pop_scope():
    stack = getattr(_scopes, "stack", None)
    if stack:
        stack.pop()  # the scope closes as its object goes


def _attribute_to_modules(model):
    """Forward hooks that open a memseal scope per module forward, so what a module allocates (its
    activations above all) is attributed to its path ("Net/encoder/0"). Returns the handles."""
    handles = []
    for path, module in model.named_modules():
        name = path.rsplit(".", 1)[-1] if path else type(module).__name__
        handles.append(module.register_forward_pre_hook(lambda *_, name=name: _push_scope(name)))
        handles.append(module.register_forward_hook(lambda *_: _pop_scope(), always_call=True))
    return handles


def _owner_paths(model):
    """{id(tensor): module path} of the model's parameters and buffers, the paths written as the
    module split names modules (the root's class name, then attribute names: "Net/block/0")."""
    root = type(model).__name__
    owners = {}
    for named in (model.named_parameters(), model.named_buffers()):
        for name, tensor in named:
            parent = name.rsplit(".", 1)[0] if "." in name else ""
            owners.setdefault(id(tensor), root + ("/" + parent.replace(".", "/") if parent else ""))
    return owners


def _role_source(model, optimizer):
    if model is None and optimizer is None:
        return None

    def roles():
        parameters, gradients, state = [], [], []
        parameter_modules, gradient_modules, state_modules = [], [], []
        owners = _owner_paths(model) if model is not None else {}
        if model is not None:
            for parameter in model.parameters():
                parameters.append(parameter.detach())
                parameter_modules.append(owners.get(id(parameter), ""))
                if parameter.grad is not None:
                    gradients.append(parameter.grad)
                    gradient_modules.append(owners.get(id(parameter), ""))
            for buffer in model.buffers():
                parameters.append(buffer)
                parameter_modules.append(owners.get(id(buffer), ""))
        if optimizer is not None:
            for parameter, per_parameter in optimizer.state.items():
                values = per_parameter.values() if isinstance(per_parameter, dict) else ()
                for value in values:
                    if _is_tensor(value):
                        state.append(value)
                        state_modules.append(owners.get(id(parameter), ""))
        return parameters, gradients, state, parameter_modules, gradient_modules, state_modules

    return roles


def _is_tensor(value):
    import torch

    return isinstance(value, torch.Tensor)


def _positive_int(name, value, minimum=1):
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"memseal: {name} must be an integer >= {minimum}, not {value!r}")


def explain(step, *, steps=4, warmup=2, model=None, optimizer=None, stacks=None,
            tensor_metadata=None, python_frames=True, html=None, json_path=None, title=None):
    """Runs step(i) for i in range(steps) and returns a PeakReport: what was live at the highest
    peak of the steps after `warmup`, by role (parameters, gradients, optimizer_state,
    activations, temporaries, other), module and site.

    model / optimizer name the parameters, their .grad and the optimizer's state by identity (and
    give module paths); without them, parameters and gradients are those backward reaches.
    html / json_path: also write the page / the JSON (memseal.explain/1)."""
    if not callable(step):
        raise TypeError(f"memseal: explain() needs a function step(i), not {type(step).__name__}")
    _positive_int("steps", steps)
    _positive_int("warmup", warmup, minimum=0)
    if steps <= warmup:
        raise ValueError(f"memseal: steps ({steps}) must exceed warmup ({warmup})")
    options = tracker_options(python_frames=python_frames, stacks=stacks,
                              tensor_metadata=tensor_metadata)
    configure_python_frames(python_frames)
    handles = _attribute_to_modules(model) if model is not None else []
    try:
        native = _memseal.explain_peak(step, steps, warmup, options, _role_source(model, optimizer))
    finally:
        for handle in handles:
            handle.remove()
    report = PeakReport(native)
    if json_path:
        _memseal.write_report_file(json_path, report.to_json())
    if html:
        write_html(html, explain=report, title=title or getattr(step, "__name__", "step"))
    return report


def _device_index(memory):
    """"host" -> -1, "cuda" -> 0, "cuda:N" -> N, as the core reads `fit --memory`."""
    device = _memseal.parse_fit_memory(memory) if isinstance(memory, str) else None
    if device is None:
        raise ValueError(f"memseal: fit() memory must be 'host', 'cuda' or 'cuda:N', not {memory!r}")
    return device


def fit(step, *, sizes=(1, 2, 4, 8), budget=None, margin=0.10, tolerance=0.03, verify=False,
        warmup=1, memory="host", html=None, json_path=None, title=None):
    """Runs step(size, i) at each size (a batch size, a sequence length: whatever the step takes),
    fits peak tensor memory against size, phase by phase (forward, backward, the optimizer's
    update), and predicts the largest size that fits `budget` (bytes, or text such as "16GiB";
    None: available memory) with `margin` of it kept free. Refuses to extrapolate from fewer than
    three sizes, or when neither a line nor a parabola describes the peaks. verify=True measures
    the predicted size and, when the prediction misses (by more than `tolerance`, over the budget,
    or the step fails), searches the largest size that fits by measuring: report.largest_size.
    memory="cuda:N" fits what the CUDA caching allocator reserves on that device instead (each size
    from an empty cache; budget None: the device memory this process could have)."""
    if not callable(step):
        raise TypeError(f"memseal: fit() needs a function step(size, i), not {type(step).__name__}")
    sizes = list(sizes)
    if len(sizes) < 3:
        raise ValueError(f"memseal: fit() needs at least three sizes to extrapolate, got {sizes}")
    for size in sizes:
        _positive_int("every size", size)
    if isinstance(budget, str):
        parsed = _memseal.parse_byte_size(budget)
        if parsed is None:
            raise ValueError(f"memseal: budget {budget!r} is not a size such as 16GiB or 512MiB")
        budget = parsed
    elif budget is not None:
        _positive_int("budget", budget)
    _positive_int("warmup", warmup, minimum=0)
    device = _device_index(memory)
    native = _memseal.fit_capacity(step, sizes, budget, float(margin), float(tolerance),
                                   bool(verify), warmup, device)
    report = FitReport(native)
    if json_path:
        _memseal.write_report_file(json_path, report.to_json())
    if html:
        write_html(html, fit=report, title=title or getattr(step, "__name__", "step"))
    return report


def write_html(path, *, check=None, explain=None, fit=None, title="memseal"):
    """One self-contained HTML page (no network) with whichever reports are given: a LeakReport
    (check / watch), a PeakReport (explain), a FitReport (fit)."""
    if check is None and explain is None and fit is None:
        raise ValueError("memseal: write_html() needs a report (check=, explain= or fit=)")
    page = _memseal.render_html(
        str(title),
        check.to_json() if check is not None else "",
        explain._native if explain is not None else None,
        fit._native if fit is not None else None,
    )
    _memseal.write_report_file(str(path), page)
