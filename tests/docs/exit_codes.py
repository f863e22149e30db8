"""Keeps docs/usage.md's exit code table equal to the codes the program defines.

mpi/exit_code.h holds every exit code of vmerge-mpi, one `kExitName = N,  // when` line each;
the table under `## Exit codes` in docs/usage.md must list exactly those numbers, and every code
must be used by the program (so the header is the real source, not a copy).
"""
import os
import re

HEADER = os.path.join("mpi", "exit_code.h")
CODE = re.compile(r"^\s*(kExit\w+)\s*=\s*(\d+)\s*,")


def defined_codes(root):
    """{number: name} of mpi/exit_code.h."""
    codes = {}
    for line in open(os.path.join(root, HEADER), encoding="utf-8"):
        m = CODE.match(line)
        if m:
            codes[int(m.group(2))] = m.group(1)
    return codes


def documented_codes(root):
    """The numbers in the first column of the table under `## Exit codes` in docs/usage.md."""
    codes, in_section = [], False
    for line in open(os.path.join(root, "docs", "usage.md"), encoding="utf-8"):
        if line.startswith("## "):
            in_section = line.strip() == "## Exit codes"
            continue
        m = re.match(r"^\|\s*(\d+)\s*\|", line)
        if in_section and m:
            codes.append(int(m.group(1)))
    return codes


def used_names(root):
    """The text of the program's sources but the header itself."""
    text = ""
    for folder in ("mpi", "src"):
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in names:
                path = os.path.join(dirpath, name)
                if name.endswith((".cpp", ".h")) and os.path.relpath(path, root) != HEADER:
                    text += open(path, encoding="utf-8").read()
    return text


def exit_code_problems(root):
    problems = []
    defined, documented = defined_codes(root), documented_codes(root)
    if not defined:
        return [f"{HEADER}: no `kExitName = N,` lines"]
    if len(documented) != len(set(documented)):
        problems.append("docs/usage.md: the exit code table lists a code twice")
    for code in sorted(set(defined) - set(documented)):
        problems.append(f"docs/usage.md: the exit code table lacks {code} ({defined[code]} in {HEADER})")
    for code in sorted(set(documented) - set(defined)):
        problems.append(f"docs/usage.md: the exit code table lists {code}, which {HEADER} does not define")
    sources = used_names(root)
    for code, name in sorted(defined.items()):
        if not re.search(r"\b" + name + r"\b", sources):
            problems.append(f"{HEADER}: {name} is used nowhere in mpi/ or src/")
    return problems
