"""Builds the C++ API reference (reference/cpp-api.md) from the public headers, include/memseal/*.h,
when the site is built, so the page cannot drift from the headers: each header's leading comment,
its types and functions with the comments above them, and the header itself."""

import pathlib
import re

MARKER = "<!-- cpp-api -->"
ROOT = pathlib.Path(__file__).resolve().parents[2]
# A declaration at namespace scope that the reference lists: a type, or a function or macro of the
# exported surface.
DECLARATION = re.compile(
    r"^(?:template <[^>]*>\s*)?(?:class|struct|enum class|enum|using)\s+(?:MEMSEAL_API\s+)?(\w+)"
    r"|^MEMSEAL_API\s+[^(]*?(\w+)\s*\("
    r"|^#define\s+(MEMSEAL_\w+|EXPECT_\w+|ASSERT_\w+)")


def leading_comment(lines):
    """The header's first comment block: prose as paragraphs, indented lines as a C++ example."""
    prose, example, out = [], [], []
    for line in lines:
        if not line.startswith("//"):
            break
        text = line[2:]
        if text.startswith("   "):
            example.append(text[3:])
            continue
        if example:
            out += ["", "```cpp", *example, "```", ""]
            example = []
        prose.append(text.strip())
        out.append(text.strip())
    if example:
        out += ["", "```cpp", *example, "```"]
    return "\n".join(out).strip()


def declarations(lines):
    """(name, comment) of each declaration at the depth of `namespace memseal` (or file scope for
    macros), with the comment lines right above it."""
    found, comment, depth = [], [], 0
    for line in lines:
        stripped = line.strip()
        match = DECLARATION.match(line) if depth <= 1 else None
        if match:
            name = next(group for group in match.groups() if group)
            found.append((name, " ".join(comment)))
        if stripped.startswith("//") and depth <= 1:
            comment.append(stripped[2:].strip())
        elif stripped:
            comment = []
        # Braces of the line (string and character literals in headers are rare; good enough here).
        code = line.split("//", 1)[0]
        depth += code.count("{") - code.count("}")
    return found


def reference():
    parts = []
    for header in sorted((ROOT / "include" / "memseal").glob("*.h")):
        lines = header.read_text().splitlines()
        parts.append(f"## `memseal/{header.name}`\n")
        parts.append(leading_comment(lines) + "\n")
        listed = [(name, text) for name, text in declarations(lines)]
        if listed:
            parts.append("| name | what it is |\n|---|---|")
            for name, text in listed:
                text = text.replace("|", "\\|") or "see the header"
                parts.append(f"| `{name}` | {text} |")
            parts.append("")
        parts.append(f'??? abstract "include/memseal/{header.name}"\n')
        parts.append("    ```cpp")
        parts.extend("    " + line if line else "" for line in lines)
        parts.append("    ```\n")
    return "\n".join(parts)


def on_page_markdown(markdown, page, **_):
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
