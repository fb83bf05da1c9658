"""The Python LeakReport: the core's report, plus what only Python can see (which variable or
container holds the leaked tensors, and tensors that only reference cycles keep alive)."""

import gc
import json
from dataclasses import asdict, dataclass, field

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._holders import Holder, holders_of
from ._live_sample import live_tensors


@dataclass
class CycleGarbage:
    """Tensors that only reference cycles keep alive: gc.collect() frees them, reference counting
    never does, so they stay until the collector runs (and can run a process out of memory first)."""

    tensors: int = 0
    bytes: int = 0
    types: list = field(default_factory=list)  # [(type name, objects)] on the cycles, most first
    findings: list = field(default_factory=list)  # categories of findings they explained

    def text(self):
        types = ", ".join(f"{name} ({count})" for name, count in self.types[:6])
        lines = [
            f"garbage in reference cycles: {self.tensors} tensor{'s' if self.tensors != 1 else ''}"
            f" ({_bytes_text(self.bytes)}) kept alive only by reference cycles, freed by "
            "gc.collect() but never by reference counting",
            f"    on the cycles  {types}" if types else None,
            "    fix            break the cycle (a weakref.ref for the back reference, or clear "
            "the attribute after use), or call gc.collect() where memory must come back",
        ]
        if self.findings:
            lines.insert(
                1,
                "    not a leak     what looked like "
                + ", ".join(sorted(set(self.findings)))
                + " is this garbage, waiting for the collector",
            )
        return "\n".join(line for line in lines if line) + "\n"


def _bytes_text(count):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


class LeakReport:
    """The leak detector's report. Everything the C++ LeakReport has (leak, steps, warmup,
    detected_at_step, findings, per_step, backward_ran, notes, phases), plus holders and
    cycle_garbage. A finding whose memory was freed before the report (a phase's end, a reset)
    has `freed` (first_step, last_step, freed_at_step, times, steps_per_time, peak_bytes, phase,
    building_up, found_after_steps, iterations_per_time). `notes` are every note in words;
    `freed_build_ups` the build-ups judged no leak, as findings with `freed` (by_collector: freed
    by Python's garbage collector, else a phase gathered and freed them together).
    text() and to_json() (schema memseal.check/1; Python's additions under "python")."""

    def __init__(self, native, holders=None, cycle_garbage=None):
        # The holders live in the core's report, so its text and JSON are every front end's.
        if holders is not None:
            native = _memseal.with_holders(native, [
                _memseal.LeakHolder(h.finding, h.description, h.kind, h.tensors, h.via_graph)
                for h in holders])
        self._native = native
        self.holders = [Holder(h.finding, h.description, h.kind, h.tensors, h.via_graph)
                        for h in native.holders]
        self.cycle_garbage = cycle_garbage

    leak = property(lambda self: self._native.leak)
    steps = property(lambda self: self._native.steps)
    warmup = property(lambda self: self._native.warmup)
    detected_at_step = property(lambda self: self._native.detected_at_step)
    findings = property(lambda self: self._native.findings)
    per_step = property(lambda self: self._native.per_step)
    backward_ran = property(lambda self: self._native.backward_ran)
    notes = property(lambda self: self._native.notes)
    freed_build_ups = property(lambda self: self._native.freed_build_ups)
    # Where the steps came from, when `memseal run` took them (one line per source); empty where
    # the program called step() itself.
    steps_from = property(lambda self: self._native.steps_from)
    phases = property(lambda self: self._native.phases)
    # A distributed job's rank (rank, local_rank, world_size, run_id, and node and nodes for a job
    # across machines); None outside one.
    rank = property(lambda self: self._native.rank)

    @property
    def categories(self):
        return [finding.category for finding in self.findings]

    def text(self):
        text = self._native.text()
        if self.cycle_garbage is not None and self.cycle_garbage.tensors > 0:
            text += "\n" + self.cycle_garbage.text()
        return text

    __str__ = text

    def to_json(self):
        data = json.loads(self._native.to_json())
        python = data.pop("python", {})  # the core's (holders)
        if self.cycle_garbage is not None:
            garbage = asdict(self.cycle_garbage)
            garbage["types"] = [{"type": name, "objects": n} for name, n in garbage["types"]]
            python["cycle_garbage"] = garbage
        if python:
            data["python"] = python
        return json.dumps(data, indent=2) + "\n"

    @staticmethod
    def from_json(text):
        """Reads what to_json (or `memseal check --json`) wrote; ValueError says what is wrong."""
        native = _memseal.LeakReport.from_json(text)  # with its holders
        python = json.loads(text).get("python") or {}
        try:
            garbage = python.get("cycle_garbage")
            cycle_garbage = None
            if garbage is not None:
                garbage = dict(garbage)
                garbage["types"] = [(item["type"], item["objects"]) for item in garbage["types"]]
                cycle_garbage = CycleGarbage(**garbage)
        except (TypeError, KeyError, AttributeError) as error:
            raise ValueError(f"memseal: the report's \"python\" section is malformed ({error})") from None
        return LeakReport(native, cycle_garbage=cycle_garbage)

    def _repr_html_(self):
        """The HTML report's cards without a page around them: how Jupyter shows the report."""
        return _memseal.render_html_fragment("leak check", self.to_json())

    def _repr_pretty_(self, printer, cycle):
        """The text report: how IPython's terminal shows the report."""
        printer.text(repr(self) if cycle else self.text().rstrip("\n"))

    def __repr__(self):
        verdict = f"leak: {', '.join(self.categories)}" if self.leak else "no leak"
        return f"<memseal.LeakReport {verdict}, {self.steps} steps>"


def _cycle_garbage_now():
    """The objects only reference cycles keep alive, found by a collection that saves them
    (gc.DEBUG_SAVEALL) instead of freeing them. The caller frees them with release()."""
    flags = gc.get_debug()
    already = len(gc.garbage)  # the program's own (uncollectable, or saved by its own debugging)
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        garbage = gc.garbage[already:]
        del gc.garbage[already:]
    finally:
        gc.set_debug(flags)
    return garbage


def _storage_of(obj):
    import torch

    if not issubclass(type(obj), torch.Tensor):  # type(): see _holders.holders_of
        return None
    try:
        storage = obj.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except Exception:  # noqa: BLE001 (sparse, nested, meta, subclasses without storage)
        return None  # sparse, nested, meta or tensor subclasses without storage


def _described_by_live_tensors(native, index, tensors):
    leaves = [t for t in tensors if t.requires_grad and t.is_leaf]
    if native.findings[index].category == "tensors-retained" and len(leaves) * 2 > len(tensors):
        return _memseal.with_live_tensor(native, index, leaves[0])
    return native


def complete_report(detector, find_holders=True):
    """Finishes `detector` and returns the LeakReport with the Python-side analyses."""
    garbage = _cycle_garbage_now()
    garbage_storages = {}
    type_counts = {}
    for obj in garbage:
        storage = _storage_of(obj)
        if storage is not None:
            garbage_storages[storage[0]] = storage[1]
        name = type(obj).__qualname__
        type_counts[name] = type_counts.get(name, 0) + 1
    native = detector.finish()
    # Findings whose sampled tensors are mostly cycle garbage are that, not leaks.
    explained = []
    for index, finding in enumerate(native.findings):
        addresses = [a for part in finding.parts for a in part.storage_addresses]
        in_garbage = sum(1 for a in addresses if a in garbage_storages)
        if addresses and in_garbage * 2 >= len(addresses):
            explained.append(index)
    cycle_garbage = None
    if garbage_storages:
        cycle_garbage = CycleGarbage(
            tensors=len(garbage_storages),
            bytes=sum(garbage_storages.values()),
            types=sorted(type_counts.items(), key=lambda item: (-item[1], item[0])),
            findings=[native.findings[i].category for i in explained],
        )
    if explained:
        native = _memseal.without_findings(native, explained)
    # The garbage goes now, as the collector would have freed it.
    obj = None
    garbage.clear()
    gc.collect()
    holders = []
    if native.leak:
        sample = live_tensors(native.findings)
        # What the live tensors say that the op's own output could not (nn.Parameter re-wraps it).
        for index, tensors in sample.tensors.items():
            native = _described_by_live_tensors(native, index, tensors)
        tensors = None
        if find_holders:
            try:
                holders = holders_of(native.findings, sample)
            except Exception as error:  # noqa: BLE001 (the heap is the user's: never lose the report)
                holders = [Holder(-1, f"the holder search failed: {type(error).__name__}: {error}",
                                  "unnamed", 0)]
        sample.clear()
    return LeakReport(native, holders, cycle_garbage)
