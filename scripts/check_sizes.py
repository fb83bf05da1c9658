#!/usr/bin/env python3
"""The house's size rules, checked before the tests (scripts/test.sh): no source file of src/,
include/ or python/ over 600 lines, and no function over 80 lines, outside the binding lists that
only name what the Python module exposes (src/python/*_bindings.cpp, the PYBIND11_MODULE block of
src/python/module.cpp). Prints each file or function that breaks a rule; exit 1 when one does.

C++ functions are found as definitions starting in column 0 (the project's clang-format style),
their body running to the next line that starts with `}`; Python functions and methods by `def`
and indentation.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("src", "include", "python")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80
BINDING_LISTS = {"src/python/explain_bindings.cpp": None, "src/python/module.cpp": "PYBIND11_MODULE"}
NOT_A_FUNCTION = re.compile(r"(namespace|struct|class|enum|union|extern|using|typedef|template)\b")


def cpp_functions(lines):
    """(first line, number of lines, text of the first line) of each top-level definition."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if (line and not line[0].isspace() and not line.startswith(("//", "#", "}"))
                and not NOT_A_FUNCTION.match(line)):
            opened = None
            for j in range(i, min(i + 6, len(lines))):
                text = lines[j].rstrip()
                if (text.endswith(";") and "{" not in text) or text.endswith("{}"):
                    break  # a declaration, or a body of one line
                if text.endswith("{"):
                    opened = j
                    break
            if opened is not None and "(" in " ".join(lines[i:opened + 1]):
                end = opened + 1
                while end < len(lines) and not lines[end].startswith("}"):
                    end += 1
                yield i + 1, end - i + 1, line
                i = end + 1
                continue
        i += 1


def python_functions(lines):
    for i, line in enumerate(lines):
        match = re.match(r"(\s*)(async\s+)?def\s", line)
        if not match:
            continue
        indent = len(match.group(1))
        end = i + 1
        last = i
        while end < len(lines):
            text = lines[end]
            if text.strip() and len(text) - len(text.lstrip()) <= indent and \
                    not text.lstrip().startswith((")", "]", "}")):
                break
            if text.strip():
                last = end
            end += 1
        yield i + 1, last - i + 1, line.strip()


def main():
    problems = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".cpp", ".h", ".py") or "__pycache__" in path.parts:
                continue
            relative = path.relative_to(ROOT).as_posix()
            lines = path.read_text(encoding="utf-8").split("\n")
            if len(lines) - 1 > MAX_FILE_LINES:
                problems.append(f"{relative}: {len(lines) - 1} lines (at most {MAX_FILE_LINES})")
            functions = python_functions(lines) if path.suffix == ".py" else cpp_functions(lines)
            for first, length, text in functions:
                exempt = relative in BINDING_LISTS and (
                    BINDING_LISTS[relative] is None or BINDING_LISTS[relative] in text)
                if length > MAX_FUNCTION_LINES and not exempt:
                    problems.append(f"{relative}:{first}: a function of {length} lines (at most "
                                    f"{MAX_FUNCTION_LINES}): {text[:70]}")
    for problem in problems:
        print(f"check_sizes: {problem}")
    if problems:
        print(f"check_sizes: {len(problems)} problem(s); cut the file or the function into named "
              "steps")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
