"""The memseal command for Python users: `memseal ...` (the console script) and `python -m memseal ...`.

check, explain and fit of a Python file (CASE.py) run here, in this interpreter, over the same C++
core, contract, report, JSON schema and exit codes as `memseal check CASE.so`: the file is loaded
as a module (not as __main__), setup() runs once if it is there, step(i) runs --steps times under
the leak detector. Exit 0: no leak; 1: leak; 2: usage or load error, an exception in setup() or
step() included (never reported as a leak). `report` reads a saved JSON report. With --baseline
FILE, check and explain are held to a baseline report as the C++ commands are: the first run writes
it; exit 0 held, 1 over it (the peak grew more than --tolerance, or a new leak cause), 2 error.

Everything else (`run`, `plan`, `merge`, `diff`, `whatif`, `--version`, and check/explain/fit of a shared library) is the C++
memseal command itself, which the package carries in memseal/bin with what `memseal run` injects
(memseal/lib/memseal): this process becomes it, so its output and exit code are the command's.
"""

import argparse
import importlib.util
import os
import re
import signal
import sys
import traceback

EXIT_OK, EXIT_LEAK, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        sys.stderr.write(f"memseal check: {message}\n")
        raise _UsageError()


def _count(text):
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"'{text}' is negative")
    return value


def _parser():
    parser = _Parser(prog="memseal", description="memseal: finds tensor memory leaks in PyTorch "
                     "and libtorch programs and says why")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    check = commands.add_parser(
        "check",
        help="run step(i) of a Python file (or of a shared library) under the leak detector "
        "(exit 0: no leak, 1: leak, 2: error)",
    )
    check.add_argument("case", metavar="CASE.py", help="file defining step(i) and optionally setup()")
    check.add_argument("--steps", type=_count, default=30, help="steps to run, warm-up included (30)")
    check.add_argument("--warmup", type=_count, default=5, help="warm-up steps never blamed (5)")
    check.add_argument("--json", metavar="FILE", help="write the report as JSON (memseal.check/1)")
    check.add_argument("--stacks", help="native stacks: on, off or sample:N (env MEMSEAL_STACKS)")
    check.add_argument("--watch-ops", "--observe-ops", dest="watch_ops",
                       help="all, off, every:N or auto (env MEMSEAL_WATCH_OPS; --observe-ops: its "
                       "former name)")
    check.add_argument("--tensor-metadata", help="on or off (env MEMSEAL_TENSOR_METADATA)")
    check.add_argument("--python-frames", choices=("on", "off"), default="on",
                       help="name the Python lines of allocations (on)")
    check.add_argument("--quiet", action="store_true", help="print the report only on a leak")
    check.add_argument("--html", metavar="FILE", help="write the report as one HTML page")
    check.add_argument("--memory-viz", metavar="FILE",
                       help="write the allocation trace as the pickle PyTorch's memory viewer reads")
    check.add_argument("--memory-viz-events", type=_count, default=40000,
                       help="newest allocations and frees the trace keeps (40000)")
    _add_baseline_arguments(check)
    report = commands.add_parser("report", help="print a saved JSON report as text again")
    report.add_argument("file", metavar="FILE.json")
    _add_explain_parser(commands)
    _add_fit_parser(commands)
    # Listed here for --help; the C++ command parses their options (see main).
    commands.add_parser(
        "run", add_help=False,
        help="run an unmodified program (python train.py, or a libtorch binary) under the leak "
        "detector and report when it ends (exit: the program's own; 2 when it cannot be started); "
        "memseal run --help for its options")
    commands.add_parser(
        "plan", add_help=False,
        help="size the planned arena for a TorchScript model: block bytes per input shape")
    commands.add_parser(
        "merge", add_help=False,
        help="put a distributed job's rank reports side by side (a folder of rank-N.json, or "
        "files): each cause across ranks, missing ranks (exit 0: no leak, 1: leak, 2: unreadable)")
    commands.add_parser(
        "diff", add_help=False,
        help="compare two reports of one program: what moved the peak, leak causes new or gone, "
        "capacity (exit 0: no change, 1: a change, 2: error)")
    commands.add_parser(
        "whatif", add_help=False,
        help="replay a CUDA memory snapshot's allocations under other caching-allocator settings: "
        "the reserved peak with each, and whether it runs out of memory (exit 0, 2: unreadable)")
    return parser


def _add_explain_parser(commands):
    explain = commands.add_parser(
        "explain",
        help="say what is live at the peak of step(i): parameters, gradients, optimizer state, "
        "activations, temporaries; by module and line (exit 0, 2 on error)",
    )
    explain.add_argument("case", metavar="CASE.py",
                         help="file defining step(i), optionally setup() and the globals `model` "
                         "and `optimizer` (named by identity)")
    explain.add_argument("--steps", type=_count, default=4, help="steps to run, warm-up included (4)")
    explain.add_argument("--warmup", type=_count, default=2, help="steps not measured (2)")
    explain.add_argument("--json", metavar="FILE", help="write the breakdown as JSON (memseal.explain/1)")
    explain.add_argument("--html", metavar="FILE", help="write it as one HTML page")
    explain.add_argument("--stacks", help="native stacks: on, off or sample:N")
    _add_baseline_arguments(explain)


def _add_fit_parser(commands):
    fit = commands.add_parser(
        "fit",
        help="fit peak memory against batch size or sequence length and predict the largest size "
        "that fits a budget (exit 0: an answer, 1: none, 2: error)",
    )
    fit.add_argument("case", metavar="CASE.py",
                     help="file defining sized_step(size, i) and optionally setup()")
    fit.add_argument("--sizes", default="1,2,4,8", help="sizes to measure, at least three (1,2,4,8)")
    fit.add_argument("--budget", help="memory budget, e.g. 16GiB (default: available memory)")
    fit.add_argument("--margin", type=float, default=0.10, help="fraction of the budget kept free")
    fit.add_argument("--verify", action="store_true", help="measure the predicted size; when it "
                     "misses, search the largest size that fits by measuring")
    fit.add_argument("--memory", default="host", help="what must fit: host (tensor memory, phase "
                     "by phase; the default) or cuda:N (what the CUDA caching allocator reserves "
                     "there; default budget: the device memory this process could have)")
    fit.add_argument("--json", metavar="FILE", help="write the fit as JSON (memseal.fit/2)")
    fit.add_argument("--html", metavar="FILE", help="write it as one HTML page")


def _add_baseline_arguments(command):
    command.add_argument("--baseline", metavar="FILE",
                         help="hold this run to a baseline report (the first run writes FILE): "
                         "exit 1 when the peak grows more than --tolerance or a new leak cause "
                         "appears, 0 otherwise")
    command.add_argument("--tolerance", default="5%",
                         help="how much the peak may grow over the baseline (5%%, or 0.05)")
    command.add_argument("--update-baseline", action="store_true",
                         help="write this run's report as the baseline, replacing the one there")


def _check_baseline_arguments(args):
    """Before the case runs: the tolerance is understood and the baseline can be written."""
    from . import _diff

    if args.update_baseline and not args.baseline:
        raise _UsageError("--update-baseline needs --baseline FILE")
    try:
        args.tolerance = _diff.parse_tolerance(args.tolerance)
    except ValueError:
        raise _UsageError(f"--tolerance {args.tolerance} is not a fraction such as 5% or 0.05 "
                          "(0 to 1000%)") from None
    _check_outputs(args, "baseline")


def _held_to_baseline(args, report_json, exit_code):
    """The exit code: the report's own without --baseline; else the baseline's (see the top)."""
    from . import _diff

    if not args.baseline:
        return exit_code
    if args.update_baseline or not os.path.exists(args.baseline):
        _write_atomically(args.baseline, report_json)
        replaced = " (replacing the one there)" if args.update_baseline else " (none was there)"
        sys.stdout.write(f"memseal baseline: written to {args.baseline}{replaced}\n")
        return EXIT_OK
    try:
        with open(args.baseline, encoding="utf-8") as file:
            baseline = file.read()
        passed, failures, summary, diff = _diff.check_against_baseline(
            baseline, report_json, args.tolerance, args.baseline)
    except (OSError, UnicodeDecodeError) as error:
        raise _UsageError(f"--baseline {args.baseline} cannot be read ({error})") from None
    except ValueError as error:
        raise _UsageError(f"--baseline: {error} (--update-baseline replaces it)") from None
    if not passed:
        sys.stdout.write("\n" + diff.text() + "\n")
        sys.stdout.write("".join(f"over the baseline: {failure}\n" for failure in failures))
    sys.stdout.write(summary + "\n")
    return EXIT_OK if passed else EXIT_LEAK


def _load_case(path, entry="step"):
    """The case file as a module; raises _UsageError with what is wrong."""
    if not os.path.exists(path):
        raise _UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise _UsageError(f"{path} is a directory, not a Python file")
    name = "memseal_case_" + "".join(c if c.isalnum() else "_" for c in os.path.basename(path))
    spec = importlib.util.spec_from_file_location(name, os.path.abspath(path))
    if spec is None or spec.loader is None:
        raise _UsageError(f"{path}: not a Python file (its name should end in .py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # The case's own folder first on the path, as `python CASE.py` would have it.
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        spec.loader.exec_module(module)
    except SyntaxError:
        raise _UsageError(f"{path} has a syntax error:\n{traceback.format_exc(limit=0)}") from None
    except BaseException as error:  # noqa: BLE001 (SystemExit in a case is an error too)
        raise _UsageError(f"{path} raised {type(error).__name__} while loading:\n"
                          f"{traceback.format_exc()}") from None
    step = getattr(module, entry, None)
    if not callable(step):
        raise _UsageError(f"{path} defines no function {entry}({'size, i' if entry == 'sized_step' else 'i'})")
    setup = getattr(module, "setup", None)
    if setup is not None and not callable(setup):
        raise _UsageError(f"{path}: setup is not a function")
    return step, setup, module


def _run_setup(path, setup):
    if setup is None:
        return
    try:
        setup()
    except BaseException:  # noqa: BLE001
        raise _UsageError(f"{path}: setup() raised:\n{traceback.format_exc()}") from None


def _check_outputs(args, *flags):
    for flag in flags:
        path = getattr(args, flag.replace("-", "_"), None)
        if not path:
            continue
        if os.path.isdir(path):
            raise _UsageError(f"--{flag} {path} is a directory")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise _UsageError(f"--{flag} {path}: no folder {folder}")


def _write_atomically(path, content):
    temporary = path + ".tmp"
    try:
        with open(temporary, "w") as out:
            out.write(content)
        os.replace(temporary, path)
    except OSError as error:
        try:
            os.remove(temporary)
        except OSError:
            pass
        raise _UsageError(f"cannot write {path}: {error.strerror}") from None


def _write_outputs(args, report, kind):
    """--json and --html of a report; kind names it for write_html (check, explain or fit)."""
    import memseal

    if args.json:
        _write_atomically(args.json, report.to_json())
    if args.html:
        memseal.write_html(args.html, title=os.path.basename(args.case), **{kind: report})


def _without_own_name(error):
    """The core's message without the name it starts with ("memseal: ", "memseal fit: "): the
    usage error names the command once."""
    return re.sub(r"^memseal(?: [a-z]+)?: ", "", str(error))


def _measure(case, entry, run):
    """Runs an explain or fit over the case: bad options are usage errors, and so is the case's
    own exception, shown with its traceback."""
    try:
        return run()
    except (TypeError, ValueError) as error:
        raise _UsageError(_without_own_name(error)) from None
    except BaseException:  # noqa: BLE001
        raise _UsageError(f"{case}: {entry} raised:\n{traceback.format_exc()}") from None


def _check(args):
    import memseal

    if args.steps <= args.warmup + 3:
        raise _UsageError(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}) + 3, "
                          "to tell growth from noise")
    _check_outputs(args, "json", "html", "memory-viz")
    _check_baseline_arguments(args)
    try:
        # Checks the options (and the environment's MEMSEAL_*) now; tracking starts with `with`.
        watch = memseal.Watch(args.warmup, on_leak="none", python_frames=args.python_frames == "on",
                              stacks=args.stacks, watch_ops=args.watch_ops,
                              tensor_metadata=args.tensor_metadata, memory_viz=args.memory_viz,
                              memory_viz_events=args.memory_viz_events)
    except (TypeError, ValueError) as error:
        raise _UsageError(_without_own_name(error)) from None
    step, setup, _ = _load_case(args.case)
    _run_setup(args.case, setup)
    current = 0
    try:
        with watch:
            for current in range(args.steps):
                step(current)
                watch.step()
    except BaseException:  # noqa: BLE001
        raise _UsageError(f"{args.case}: step({current}) raised:\n{traceback.format_exc()}") from None
    report = watch.report()
    if not args.quiet or report.leak:
        sys.stdout.write(report.text())
    _write_outputs(args, report, "check")
    return _held_to_baseline(args, report.to_json(), EXIT_LEAK if report.leak else EXIT_OK)


def _explain(args):
    import memseal

    if args.steps <= args.warmup:
        raise _UsageError(f"--steps ({args.steps}) must exceed --warmup ({args.warmup})")
    _check_outputs(args, "json", "html")
    _check_baseline_arguments(args)
    step, setup, module = _load_case(args.case)
    _run_setup(args.case, setup)
    report = _measure(args.case, "step", lambda: memseal.explain(
        step, steps=args.steps, warmup=args.warmup, model=getattr(module, "model", None),
        optimizer=getattr(module, "optimizer", None), stacks=args.stacks))
    sys.stdout.write(report.text())
    _write_outputs(args, report, "explain")
    return _held_to_baseline(args, report.to_json(), EXIT_OK)


def _fit(args):
    import memseal

    try:
        sizes = [int(size, 10) for size in args.sizes.split(",")]
        if any(size <= 0 for size in sizes):
            raise ValueError
    except ValueError:
        raise _UsageError(f"--sizes '{args.sizes}': expected positive integers separated by "
                          "commas, e.g. 1,2,4,8") from None
    if len(sizes) < 3:
        raise _UsageError(f"--sizes needs at least three sizes to extrapolate (got {len(sizes)})")
    if not 0 <= args.margin < 1:
        raise _UsageError(f"--margin {args.margin}: expected a fraction in [0, 1)")
    budget = None
    if args.budget is not None:
        budget = memseal._memseal.parse_byte_size(args.budget)
        if budget is None:
            raise _UsageError(f"--budget '{args.budget}': expected a positive size such as 16GiB")
    from memseal._explain import _device_index

    try:
        _device_index(args.memory)
    except ValueError:
        raise _UsageError(f"--memory '{args.memory}': expected host, cuda or cuda:N") from None
    _check_outputs(args, "json", "html")
    step, setup, _ = _load_case(args.case, entry="sized_step")
    _run_setup(args.case, setup)
    report = _measure(args.case, "sized_step", lambda: memseal.fit(
        step, sizes=sizes, budget=budget, margin=args.margin, verify=args.verify,
        memory=args.memory))
    sys.stdout.write(report.text())
    _write_outputs(args, report, "fit")
    # The answer: the prediction, or the size verification's search measured to fit.
    return EXIT_OK if report.largest_size is not None else EXIT_LEAK


def _report(args):
    import memseal

    try:
        with open(args.file, encoding="utf-8") as source:
            text = source.read()
    except OSError as error:
        raise _UsageError(f"cannot read {args.file}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise _UsageError(f"{args.file} is not a JSON report (not UTF-8 text)") from None
    try:
        report = memseal.LeakReport.from_json(text)
    except ValueError as error:
        raise _UsageError(f"{args.file}: {str(error).removeprefix('memseal: ')}") from None
    sys.stdout.write(report.text())
    return EXIT_LEAK if report.leak else EXIT_OK


def _native_command():
    """The C++ memseal command the package carries, or None (a build without it)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "memseal")
    return path if os.access(path, os.X_OK) else None


def _is_shared_library(path):
    try:
        with open(path, "rb") as file:
            return file.read(4) == b"\x7fELF"
    except OSError:
        return path.endswith(".so")


def _for_native_command(argv):
    """True when the C++ command does what argv asks: everything but Python files and --help."""
    if not argv:
        return False
    first = argv[0]
    if first in ("run", "plan", "merge", "diff", "whatif", "--version"):
        return True
    if first in ("check", "explain", "fit"):
        return any(not arg.startswith("-") and _is_shared_library(arg) for arg in argv[1:])
    return False


def _exec_native_command(argv):
    """Becomes the C++ command (never returns), or returns exit 2 saying why it cannot."""
    command = _native_command()
    if command is None:
        sys.stderr.write(
            f"memseal {argv[0].lstrip('-')}: this installation of the memseal package has no "
            "memseal command (memseal/bin/memseal); install the package with pip, or use the "
            "memseal command of a C++ build\n")
        return EXIT_USAGE
    from ._torch_release import mismatch, requirement

    environment = dict(os.environ)
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    beside = os.path.join(package_parent, "torch", "lib")
    # The command finds libtorch in the torch package beside memseal's (its RUNPATH); where torch
    # is installed elsewhere (another site-packages), the loader is told where.
    torch_lib = beside if os.path.isdir(beside) else _torch_library_folder()
    if torch_lib is None:
        sys.stderr.write(f"memseal {argv[0].lstrip('-')}: this Python has no torch (memseal "
                         f"needs it: pip install '{requirement()}')\n")
        return EXIT_USAGE
    # The command itself links libtorch: beside another release it would not even load.
    why = mismatch(*_torch_package_version(os.path.dirname(torch_lib)))
    if why is not None:
        sys.stderr.write(f"memseal {argv[0].lstrip('-')}: {why}\n")
        return EXIT_USAGE
    if torch_lib != beside:
        before = environment.get("LD_LIBRARY_PATH")
        environment["LD_LIBRARY_PATH"] = torch_lib + (":" + before if before else "")
    sys.stdout.flush()
    sys.stderr.flush()
    # Python ignores SIGPIPE and SIGXFSZ for itself; the command and the program it runs get them
    # back as a shell would give them (what subprocess's restore_signals does for a child).
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    os.execve(command, ["memseal", *argv], environment)
    return EXIT_USAGE  # not reached


def _torch_package_version(package):
    """(version, folder) of the torch package in `package`, read from its version.py (importing
    torch would load a libtorch); the version is empty where it cannot be read."""
    try:
        with open(os.path.join(package, "version.py")) as version_file:
            for line in version_file:
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("'\""), package
    except OSError:
        pass
    return "", package


def _torch_library_folder():
    """torch/lib of the torch this interpreter would import, found without importing it."""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(os.path.join(folder, "lib")):
            return os.path.join(folder, "lib")
    return None


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if _for_native_command(argv):
        return _exec_native_command(argv)
    args = None
    try:
        args = _parser().parse_args(argv)
        if args.version:
            return _exec_native_command(["--version"])
        if args.command is None:
            _parser().print_help(sys.stderr)
            return EXIT_USAGE
        commands = {"check": _check, "report": _report, "explain": _explain, "fit": _fit}
        return commands[args.command](args)
    except _UsageError as error:
        if error.args:
            sys.stderr.write(f"memseal {getattr(args, 'command', None) or 'check'}: {error.args[0]}\n")
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 (memseal's own failure: an error, never a verdict)
        sys.stderr.write(f"memseal: internal error:\n{traceback.format_exc()}")
        return EXIT_USAGE


def console_main():
    """The `memseal` console script."""
    sys.exit(main())
