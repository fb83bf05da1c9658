"""python -m memseal check CASE.py: memseal check for Python files.

The same contract, report, JSON schema and exit codes as `memseal check CASE.so`: the file is
loaded as a module (not as __main__), setup() runs once if it is there, step(i) runs --steps times
under the leak detector. Exit 0: no leak; 1: leak; 2: usage or load error, an exception in
setup() or step() included (never reported as a leak).
"""

import argparse
import importlib.util
import os
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
    parser = _Parser(prog="python -m memseal", description="memseal for PyTorch")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    check = commands.add_parser(
        "check",
        help="run step(i) of a Python file under the leak detector (exit 0: no leak, 1: leak, 2: error)",
    )
    check.add_argument("case", metavar="CASE.py", help="file defining step(i) and optionally setup()")
    check.add_argument("--steps", type=_count, default=30, help="steps to run, warm-up included (30)")
    check.add_argument("--warmup", type=_count, default=5, help="warm-up steps never blamed (5)")
    check.add_argument("--json", metavar="FILE", help="write the report as JSON (memseal.check/1)")
    check.add_argument("--stacks", help="native stacks: on, off or sample:N (env MEMSEAL_STACKS)")
    check.add_argument("--observe-ops", help="all, off, every:N or auto (env MEMSEAL_OBSERVE_OPS)")
    check.add_argument("--tensor-metadata", help="on or off (env MEMSEAL_TENSOR_METADATA)")
    check.add_argument("--python-frames", choices=("on", "off"), default="on",
                       help="name the Python lines of allocations (on)")
    check.add_argument("--quiet", action="store_true", help="print the report only on a leak")
    report = commands.add_parser("report", help="print a saved JSON report as text again")
    report.add_argument("file", metavar="FILE.json")
    return parser


def _load_case(path):
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
    step = getattr(module, "step", None)
    if not callable(step):
        raise _UsageError(f"{path} defines no function step(i)")
    setup = getattr(module, "setup", None)
    if setup is not None and not callable(setup):
        raise _UsageError(f"{path}: setup is not a function")
    return step, setup


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


def _check(args):
    import memseal

    if args.steps <= args.warmup + 3:
        raise _UsageError(f"--steps ({args.steps}) must exceed --warmup ({args.warmup}) + 3, "
                          "to tell growth from noise")
    if args.json and os.path.isdir(args.json):
        raise _UsageError(f"--json {args.json} is a directory")
    try:
        # Checks the options (and the environment's MEMSEAL_*) now; tracking starts with `with`.
        watch = memseal.Watch(args.warmup, on_leak="none", python_frames=args.python_frames == "on",
                              stacks=args.stacks, observe_ops=args.observe_ops,
                              tensor_metadata=args.tensor_metadata)
    except (TypeError, ValueError) as error:
        raise _UsageError(str(error).removeprefix("memseal: ")) from None
    step, setup = _load_case(args.case)
    if setup is not None:
        try:
            setup()
        except BaseException:  # noqa: BLE001
            raise _UsageError(f"{args.case}: setup() raised:\n{traceback.format_exc()}") from None
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
    if args.json:
        _write_atomically(args.json, report.to_json())
    return EXIT_LEAK if report.leak else EXIT_OK


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


def main(argv=None):
    args = None
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            _parser().print_help(sys.stderr)
            return EXIT_USAGE
        return _check(args) if args.command == "check" else _report(args)
    except _UsageError as error:
        if error.args:
            sys.stderr.write(f"memseal {getattr(args, 'command', None) or 'check'}: {error.args[0]}\n")
        return EXIT_USAGE
    except Exception:  # noqa: BLE001 (memseal's own failure: an error, never a verdict)
        sys.stderr.write(f"memseal: internal error:\n{traceback.format_exc()}")
        return EXIT_USAGE
