"""Two reports of one program compared, and a report held to a baseline: the same C++ core as
`memseal diff` and `memseal check|explain --baseline`.

    d = memseal.diff("before.json", after_report)   # paths, reports, dicts or JSON text
    print(d.text())          # what moved the peak, by role, module, line and op; leak causes
    d                        # in a notebook: the HTML cards, both timelines on one axis
"""

import json
import os

import torch as _torch  # noqa: F401  (libtorch and its Python bindings before the core)

from . import _memseal
from ._explain import _NativeReport


def _document(report, default_label):
    """(JSON text, label) of a report given as a memseal report object, a dict, a path or text."""
    if hasattr(report, "to_json") and callable(report.to_json):
        return report.to_json(), default_label
    if isinstance(report, dict):
        return json.dumps(report), default_label
    if isinstance(report, (str, os.PathLike)):
        text = os.fspath(report)
        if text.lstrip().startswith("{"):
            return text, default_label
        try:
            with open(text, encoding="utf-8") as file:
                return file.read(), text
        except OSError as error:
            raise ValueError(f"memseal: cannot read the report {text!r}: {error.strerror}") from None
    raise TypeError("memseal: diff() compares reports (memseal reports, dicts, paths or JSON "
                    f"text), not {type(report).__name__}")


class ReportDiff(_NativeReport):
    """Two reports side by side (memseal.diff/1): peak_before, peak_after, peak_change,
    noise_bytes; breakdowns (dimension -> list of dicts: key, before, after, change, largest
    change first; the additive ones add up to peak_change); causes (dicts: change 'new', 'gone',
    'grown', 'shrunk' or 'same', category, op, site, holder, rates); capacity; warnings; empty
    (nothing changed beyond the noise). text(), to_json(), to_dict(), write_html(path)."""

    kind = property(lambda self: self._data["kind"])
    empty = property(lambda self: self._data["empty"])
    peak_before = property(lambda self: self._data["before"]["peak_bytes"])
    peak_after = property(lambda self: self._data["after"]["peak_bytes"])
    peak_change = property(lambda self: self._data["peak_change"])
    noise_bytes = property(lambda self: self._data["noise_bytes"])
    causes = property(lambda self: self._data["causes"])
    capacity = property(lambda self: self._data["capacity"])
    warnings = property(lambda self: self._data["warnings"])

    @property
    def breakdowns(self):
        return {b["dimension"]: b["entries"] for b in self._data["breakdowns"]}

    def new_causes(self):
        return [cause for cause in self.causes if cause["change"] == "new"]

    def write_html(self, path, title="two runs compared"):
        _memseal.write_report_file(str(path), self._native.html(str(title)))

    def _repr_html_(self):
        """The HTML cards without a page around them: how Jupyter shows the comparison."""
        return self._native.html_fragment("two runs compared")

    def __str__(self):
        return self.text()

    def __repr__(self):
        return (f"<memseal.ReportDiff {self.kind}: peak {self.peak_before} -> {self.peak_after} "
                f"bytes, {len(self.new_causes())} new leak causes>")


def diff(before, after, *, force=False):
    """Compares two reports of one program (check, watch, explain, fit, run or merged; each a
    report object, a dict, a path or JSON text): what moved the peak by role, module, line and
    op, the leak causes that are new, gone or changed, the largest size before and after.
    Raises ValueError for reports of two kinds, or of two programs (no source file in common)
    unless force=True."""
    before_json, before_label = _document(before, "before")
    after_json, after_label = _document(after, "after")
    return ReportDiff(_memseal.diff_reports(before_json, after_json, before_label, after_label,
                                            bool(force)))


def check_against_baseline(baseline_json, report_json, tolerance, label="baseline"):
    """(passed, failures, summary line, ReportDiff): `report_json` held to `baseline_json`."""
    passed, failures, summary, native = _memseal.check_against_baseline(
        baseline_json, report_json, float(tolerance), label, "this run")
    return passed, list(failures), summary, ReportDiff(native)


def parse_tolerance(text):
    """'5%' or '0.05' (or a number) as a fraction; ValueError when not understood."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
        if 0 <= value < 10:
            return value
    else:
        value = _memseal.parse_tolerance(str(text))
        if value is not None:
            return value
    raise ValueError(f"memseal: tolerance {text!r} is not a fraction such as '5%' or 0.05")
