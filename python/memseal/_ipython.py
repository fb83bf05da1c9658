"""memseal in IPython and Jupyter: `%load_ext memseal`.

    %%memseal_check [--steps N] [--warmup N]
    <the body of your loop>              # run N times as the step; the cell's value is the report

    %memseal_watch on [--warmup N]       # from now on, every cell you run is one step
    %memseal_watch off                   # stop; the cell's value is the report

The reports render as the HTML report's cards in a notebook (their _repr_html_) and as text in a
terminal. A cell body that raises shows its traceback, as any cell does, and no report.
"""

import argparse
import linecache
import shlex

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ._cli import _count  # the same whole-number options as the command


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")


def _check_parser():
    parser = _Parser(prog="%%memseal_check", add_help=False,
                     description="runs the cell's body as the step of a loop under the leak detector")
    parser.add_argument("--steps", type=_count, default=30, help="steps, warm-up included (30)")
    parser.add_argument("--warmup", type=_count, default=5, help="warm-up steps never blamed (5)")
    return parser


def _watch_parser():
    parser = _Parser(prog="%memseal_watch", add_help=False,
                     description="every cell run between on and off is one step")
    parser.add_argument("state", choices=("on", "off"))
    parser.add_argument("--warmup", type=_count, default=5, help="warm-up cells never blamed (5)")
    return parser


@magics_class
class MemsealMagics(Magics):
    def __init__(self, shell):
        super().__init__(shell)
        self._watch = None
        self._skip_next_cell = False

    @cell_magic
    def memseal_check(self, line, cell):
        """%%memseal_check [--steps N] [--warmup N]: the cell's body, run --steps times as the
        step of a loop under memseal's leak detector, in the notebook's namespace; its value is
        the LeakReport."""
        import memseal

        args = _check_parser().parse_args(shlex.split(line))
        if args.steps <= args.warmup + 3:
            raise UsageError(f"%%memseal_check: --steps ({args.steps}) must exceed --warmup "
                             f"({args.warmup}) + 3, to tell growth from noise")
        source = self.shell.transform_cell(cell)
        code = compile(source, self._cell_name(source), "exec")
        namespace = self.shell.user_ns

        def step(_):
            exec(code, namespace)  # noqa: S102 (the user's own cell)

        return memseal.check(step, steps=args.steps, warmup=args.warmup, on_leak="none")

    def _cell_name(self, source):
        """The file name the cell's code is compiled under: `Cell In[N]`, as IPython's own
        tracebacks call a cell, put in the line cache (so tracebacks and memseal's Python lines show
        the cell's own lines) and in IPython's map of cell names to execution counts."""
        number = self.shell.execution_count
        name = f"Cell In[{number}]"
        linecache.cache[name] = (len(source), None, source.splitlines(keepends=True), name)
        filename_map = getattr(self.shell.compile, "_filename_map", None)
        if isinstance(filename_map, dict):
            filename_map[name] = number
        return name

    @line_magic
    def memseal_watch(self, line):
        """%memseal_watch on [--warmup N] | off: every cell run in between is one step; off ends
        the watch and its value is the LeakReport."""
        import memseal

        args = _watch_parser().parse_args(shlex.split(line))
        events = self.shell.events
        if args.state == "on":
            if self._watch is not None:
                raise UsageError("%memseal_watch: already on (%memseal_watch off ends it)")
            # IPython compiles a cell anew each time it runs, so its Python lines would be new code
            # to memseal on every run: the watch groups allocations by op and native stack only.
            watch = memseal.Watch(args.warmup, on_leak="none", python_frames=False)
            watch.__enter__()
            self._watch = watch
            self._skip_next_cell = True  # the cell that turned it on is no step
            events.register("post_run_cell", self._cell_ran)
            return None
        if self._watch is None:
            raise UsageError("%memseal_watch: not on (%memseal_watch on starts it)")
        events.unregister("post_run_cell", self._cell_ran)
        watch, self._watch = self._watch, None
        watch.__exit__(None, None, None)
        return watch.report()

    def _cell_ran(self, result):
        if self._skip_next_cell:
            self._skip_next_cell = False
            return
        if self._watch is not None:
            self._watch.step()

    def close(self):
        """Ends a watch still running (the extension unloaded)."""
        if self._watch is not None:
            self.shell.events.unregister("post_run_cell", self._cell_ran)
            self._watch.__exit__(None, None, None)
            self._watch = None


_loaded = {}


def load_ipython_extension(ipython):
    magics = MemsealMagics(ipython)
    ipython.register_magics(magics)
    _loaded[id(ipython)] = magics


def unload_ipython_extension(ipython):
    magics = _loaded.pop(id(ipython), None)
    if magics is not None:
        magics.close()
