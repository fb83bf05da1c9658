"""Options in the one grammar every memseal entry point shares (docs/reference/options.md)."""

import os
import sys
import sysconfig
import warnings

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal

# What True and False mean for each option; any other value is passed as text and checked by the
# core, which names the option and what it accepts.
_SWITCHES = {
    "stacks": ("on", "off"),
    "watch_ops": ("all", "off"),
    "tensor_metadata": ("on", "off"),
}

POLICIES = ("warn", "raise", "callback", "none")


def tracker_options(python_frames=False, **options):
    """[(name, value), ...] for the core from keyword options; None leaves an option unset (the
    environment's MEMSEAL_<NAME>, else the entry point's default). With `python_frames`, stacks left
    unset everywhere are "python": each allocation's Python line without unwinding native frames,
    which Python reports fold anyway (an unwind per tensor would double a GPU loop's step)."""
    former = options.pop("observe_ops", None)  # watch_ops' former name (deprecated)
    if former is not None:
        warnings.warn("memseal: observe_ops is now called watch_ops", DeprecationWarning,
                      stacklevel=3)
        if options.get("watch_ops") is None:
            options["watch_ops"] = former
    if python_frames and options.get("stacks") is None and not os.environ.get("MEMSEAL_STACKS"):
        options["stacks"] = "python"
    pairs = []
    for name, value in options.items():
        if value is None:
            continue
        if name not in _SWITCHES:
            raise TypeError(f"memseal: unknown option {name!r}")
        if isinstance(value, bool):
            value = _SWITCHES[name][0 if value else 1]
        elif not isinstance(value, str):
            raise TypeError(
                f"memseal: option {name} takes {_memseal.option_values(name)}, "
                f"not {type(value).__name__} {value!r}"
            )
        pairs.append((name, value))
    _memseal.check_options(pairs)  # the values, and the environment's MEMSEAL_* for unset ones
    return pairs


def check_policy(policy, callback, argument="on_leak"):
    if policy not in POLICIES:
        raise ValueError(f"memseal: {argument} must be one of {', '.join(POLICIES)}, not {policy!r}")
    if policy == "callback" and not callable(callback):
        raise ValueError(f"memseal: {argument}='callback' needs callback=<a function of the report>")


def apply_policy(policy, report, callback, error_type):
    """What a leak report (of a watch) or a scope report with survivors leads to: 'warn' prints it
    to stderr, 'raise' raises error_type(report), 'callback' calls callback(report), 'none' does
    nothing (the C++ side's ReportPolicy, memseal/policy.h, with Python's stderr and exceptions)."""
    if policy == "warn":
        sys.stderr.write(report.text())
        sys.stderr.flush()
    elif policy == "raise":
        raise error_type(report)
    elif policy == "callback":
        callback(report)


def _internal_python_paths():
    """Where Python frames are not the user's: (path prefix, the name a report folds them under),
    longest prefix first (the core takes the first that matches)."""
    import torch

    def folder(module_file):
        return os.path.dirname(os.path.abspath(module_file)) + os.sep

    prefixes = [(folder(__file__), "memseal"), (folder(torch.__file__), "torch")]
    for module_name in ("_pytest", "pluggy", "pytest"):
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, "__file__", None):
            prefixes.append((folder(module.__file__), "pytest"))
    paths = sysconfig.get_paths()
    for key in ("purelib", "platlib"):
        if paths.get(key):
            prefixes.append((os.path.abspath(paths[key]) + os.sep, "site-packages"))
    for key in ("stdlib", "platstdlib"):
        if paths.get(key):
            prefixes.append((os.path.abspath(paths[key]) + os.sep, "python stdlib"))
    prefixes.sort(key=lambda item: len(item[0]), reverse=True)
    return prefixes


def configure_python_frames(enabled):
    """Turns the Python frames of allocations on or off for what starts tracking next."""
    if enabled:
        _memseal.set_internal_paths(_internal_python_paths())
    _memseal.enable_python_frames(bool(enabled))
