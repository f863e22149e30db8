#!/usr/bin/env bash
# Prints every function in src/ and mpi/ longer than LIMIT lines (default 100) as
# "file:line: name (N lines)". A rough brace-depth scan, not a parser: strings, character
# literals and comments are blanked first; a `{` at namespace or class scope whose statement
# holds a `(` opens a function, and its matching `}` ends it.
# Usage: scripts/long_functions.sh [LIMIT] [FOLDER...]   (run from the repository root)
set -euo pipefail
limit=${1:-100}
shift || true
folders=("$@")
[ ${#folders[@]} -eq 0 ] && folders=(src mpi)
find "${folders[@]}" -type f \( -name '*.cpp' -o -name '*.h' \) | sort | python3 -c '
import re, sys
limit = int(sys.argv[1])
def blank(text):
    # Raw strings, strings, chars and comments become spaces (newlines kept).
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("R\"", i):
            m = re.match(r"R\"([^(\s]*)\(", text[i:])
            if m:
                end = text.find(")" + m.group(1) + "\"", i + m.end())
                end = n if end < 0 else end + len(m.group(1)) + 2
                out.append(re.sub(r"[^\n]", " ", text[i:end])); i = end; continue
        if c == "\"" or c == "\x27":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1; continue
        if text.startswith("//", i):
            j = text.find("\n", i); j = n if j < 0 else j
            out.append(" " * (j - i)); i = j; continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j; continue
        out.append(c); i += 1
    return "".join(out)
for path in sys.stdin.read().split():
    text = blank(open(path, encoding="utf-8", errors="replace").read())
    stack, statement, line, start_line = [], "", 1, None
    for c in text:
        if c == "\n":
            line += 1
        if c == "{":
            s = " ".join(statement.split())
            outer = all(kind in ("namespace", "type") for kind, _, _ in stack)
            if re.search(r"\bnamespace\b", s) or s.startswith("extern"):
                stack.append(("namespace", 0, ""))
            elif outer and re.search(r"\b(struct|class|union|enum)\b", s) and "(" not in s:
                stack.append(("type", 0, ""))
            elif outer and "(" in s and not re.match(r"^[^(]*=", s):
                name = re.findall(r"([~\w:]+(?:operator\W+)?)\s*\(", s)
                stack.append(("function", start_line or line, name[0] if name else s[:40]))
            else:
                stack.append(("block", 0, ""))
            statement, start_line = "", None
        elif c == "}":
            if stack:
                kind, first, name = stack.pop()
                if kind == "function" and line - first + 1 > limit:
                    print(f"{path}:{first}: {name} ({line - first + 1} lines)")
            statement, start_line = "", None
        elif c == ";":
            statement, start_line = "", None
        else:
            if not c.isspace() and start_line is None:
                start_line = line
            statement += c
' "$limit"
