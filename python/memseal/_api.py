"""check() and watch(): the leak detector of the C++ core, driven from Python."""

import os
import sys

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._distributed import gather_to_rank_0, name_the_rank
from ._options import apply_policy as _apply_policy
from ._options import check_policy, configure_python_frames, tracker_options
from ._report import LeakReport, complete_report

# The categories' identifiers, as in JSON and the C++ API (categoryId).
CATEGORIES = (
    "autograd-graph-retained",
    "grad-enabled-inference",
    "parameters-created-per-step",
    "tensors-retained",
    "create-graph-cycle",
    "untracked-growth",
)


class LeakError(RuntimeError):
    """Raised by on_leak='raise'; .report is the LeakReport."""

    def __init__(self, report):
        super().__init__(report.text())
        self.report = report


class ScopeLeakError(RuntimeError):
    """Raised when a memseal.Scope closes with tensors made inside it still alive; .report is the
    scope's report (name, stats, survivors with their Python lines)."""

    def __init__(self, report):
        super().__init__(report.text())
        self.report = report


class Watch:
    """Watches a loop the caller runs: call step() at the end of every iteration.

        with memseal.watch(warmup=5) as w:
            for i in range(100):
                train_step(i)
                w.step()
        report = w.report()       # the final report once the block has ended

    A whole program (epochs of training, then validation) names its phases with phase("train"),
    phase("validate"): what a phase keeps is judged against its own steps, and what it held and
    freed when it ended is still reported (finding.freed).

    Options (None: the environment's MEMSEAL_<NAME>, else the detector's default):
      warmup          steps whose allocations are never blamed (lazy state, workspaces)
      on_leak         'warn' (print the report to stderr), 'raise' (LeakError), 'callback'
                      (callback(report)) or 'none'; applied when the watch ends
      stacks          'on', 'off', 'python' or 'sample:N' (True / False); unset, 'python' with
                      python_frames (each allocation's Python line, no native frames)
      watch_ops       'all', 'off', 'every:N' or 'auto' (observe_ops: its former name)
      tensor_metadata 'on' or 'off' (True / False)
      python_frames   name the Python lines of allocations (True)
      find_holders    name the variable or container that holds leaked tensors (True)
      html            write the report as one self-contained HTML page to this path at the end
      memory_viz      write the allocation trace as the pickle PyTorch's memory viewer reads
                      (torch.cuda._memory_viz, pytorch.org/memory_viz) to this path at the end
      memory_viz_events  newest allocations and frees the trace keeps (40000)
      gather          in a distributed job: when the watch ends, every rank's report goes to rank
                      0 through the store of the job's process group, and rank 0 gets the merged
                      view of the ranks (w.merged; printed when a rank leaks and on_leak is
                      'warn'). Every rank should end its watch so; a report that has not arrived
                      within the store's timeout is a missing rank. The report names its rank
                      either way.
    """

    def __init__(
        self,
        warmup=5,
        *,
        on_leak="warn",
        callback=None,
        stacks=None,
        watch_ops=None,
        observe_ops=None,
        tensor_metadata=None,
        python_frames=True,
        find_holders=True,
        watch_graph_nodes=True,
        watch_resident_memory=True,
        html=None,
        memory_viz=None,
        memory_viz_events=40000,
        gather=False,
    ):
        if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
            raise ValueError(f"memseal: warmup must be a non-negative integer, not {warmup!r}")
        check_policy(on_leak, callback)
        self._warmup = warmup
        self._on_leak = on_leak
        self._callback = callback
        self._options = tracker_options(
            python_frames=python_frames,
            stacks=stacks, watch_ops=watch_ops, observe_ops=observe_ops,
            tensor_metadata=tensor_metadata,
        )
        self._python_frames = python_frames
        self._find_holders = find_holders
        self._watch_graph_nodes = watch_graph_nodes
        self._watch_resident_memory = watch_resident_memory
        self._html = _output_path("html", html)
        self._memory_viz = _output_path("memory_viz", memory_viz)
        if not isinstance(memory_viz_events, int) or memory_viz_events <= 0:
            raise ValueError(f"memseal: memory_viz_events must be a positive integer, "
                             f"not {memory_viz_events!r}")
        self._memory_viz_events = memory_viz_events
        self._gather = bool(gather)
        self.merged = None  # with gather=True, on rank 0: the job's MergedReport
        self._trace = None
        self._detector = None
        self._final = None

    def start(self):
        if self._detector is not None or self._final is not None:
            raise RuntimeError("memseal: a watch starts once")
        configure_python_frames(self._python_frames)
        if self._memory_viz:
            # First: its ring is resident before the detector's resident-memory baseline, and a
            # trace that cannot start leaves no detector running.
            self._trace = _memseal.MemoryTrace(self._memory_viz_events)
            self._trace.start()
        try:
            self._detector = _memseal.Detector(
                self._warmup, self._options, self._watch_graph_nodes, self._watch_resident_memory
            )
        except BaseException:
            if self._trace is not None:
                self._trace.stop()
                self._trace = None
            raise
        # While the watch runs, step() is the core's boundary itself, called without a Python frame
        # or pybind11's dispatcher in between (see Detector.step_boundary); the method below
        # serves before start and after the end, to say why it cannot, and in a subclass that
        # overrides it.
        if type(self).step is Watch.step:
            self.step = self._detector.step_boundary
        return self

    def __enter__(self):
        return self.start()

    def step(self):
        """Marks the end of one iteration."""
        self._running().step()

    def phase(self, name):
        """The steps from now on belong to the phase `name` ("train", "validate"; a name used
        before continues that phase). What a phase keeps across its steps is judged against that
        phase's steps, so a leak in a validation pass a tenth as long as training is still found."""
        if not isinstance(name, str):
            raise TypeError(f"memseal: a phase is named by a string, not {type(name).__name__}")
        self._running().phase(name)

    def report(self):
        """The final report once the watch has ended; while it runs, the analysis as of the last
        step (without the Python-side analyses, which need the loop to stand still)."""
        if self._final is not None:
            return self._final
        return LeakReport(self._running().report())

    def finish(self, apply_policy=True):
        """Stops watching, completes the report (holders, garbage in reference cycles), applies
        on_leak and returns the report."""
        detector = self._take_detector()
        if self._trace is not None:
            self._trace.stop()
        report = complete_report(detector, find_holders=self._find_holders)
        name_the_rank(report)
        self._final = report
        if self._gather:
            # Before the policy: a rank that raises must still send its report to rank 0.
            self.merged = gather_to_rank_0(report)
            if self.merged is not None and self.merged.leak and self._on_leak == "warn":
                print(self.merged.text(), file=sys.stderr, end="")
        trace, self._trace = self._trace, None
        try:
            # The files first (a LeakError from the policy would skip them), the verdict always.
            if trace is not None:
                trace.write_memory_viz(self._memory_viz)
            if self._html:
                from ._explain import write_html

                write_html(self._html, check=report, title="memseal watch")
        finally:
            if apply_policy and report.leak:
                _apply_policy(self._on_leak, report, self._callback, LeakError)
        return report

    def __exit__(self, exc_type, exc, traceback):
        if self._detector is None:
            return False
        if exc_type is not None:
            # The loop failed: stop tracking, judge nothing, let the exception through.
            detector = self._take_detector()
            if self._trace is not None:
                self._trace.stop()
                self._trace = None
            self._final = LeakReport(detector.finish())
            return False
        self.finish()
        return False

    def _take_detector(self):
        """The running detector, no longer the watch's: step() is the method again."""
        detector, self._detector = self._running(), None
        self.__dict__.pop("step", None)
        return detector

    def _running(self):
        if self._detector is None:
            state = "has ended" if self._final is not None else "has not started (use `with`)"
            raise RuntimeError(f"memseal: this watch {state}")
        return self._detector


def _output_path(option, path):
    """The path as a string, refused now (before any step runs) when it cannot be written."""
    if path is None:
        return None
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"memseal: {option}={path!r} is a directory")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"memseal: {option}={path!r}: no folder {folder}")
    return path


def watch(warmup=5, **options):
    """A Watch for the caller's own loop; see Watch for the options."""
    return Watch(warmup, **options)


def check(step, steps=30, warmup=5, **options):
    """Runs step(i) for i in range(steps) under the leak detector and returns its LeakReport.

    The report says whether tensor memory leaks from step to step (report.leak), and for each
    finding the category, where it is made (Python line, ATen op), what it holds and the fix.
    Options as for watch(); on_leak defaults to 'warn'.
    """
    if not callable(step):
        raise TypeError(f"memseal: check() needs a function step(i), not {type(step).__name__}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
        raise ValueError(f"memseal: steps must be a positive integer, not {steps!r}")
    with Watch(warmup, **options) as w:
        for i in range(steps):
            step(i)
            w.step()
    return w.report()
