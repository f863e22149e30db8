#!/usr/bin/python3
"""Keeps the docs' links true: every relative link in README.md, docs/, slurm/ and
tests/*/README.md names a file of the repository (not one outside it), and its #anchor a
heading of that file (GitHub's anchor rule).

    check_docs.py SOURCE_DIR
"""
import os
import re
import sys

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "slurm", "README.md")]
    for folder in ("docs", "tests"):
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            files += [os.path.join(dirpath, n) for n in names if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def anchors_of(path):
    """GitHub's heading anchors: lower case, punctuation but '-' and '_' removed, spaces -> '-'."""
    anchors = set()
    in_code = False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        text = re.sub(r"[^\w\- ]", "", text)
        anchors.add(text.replace(" ", "-"))
    return anchors


def link_problems(root):
    problems = []
    for md in markdown_files(root):
        text = open(md, encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            rel = os.path.relpath(md, root)
            if not os.path.realpath(dest).startswith(os.path.realpath(root) + os.sep):
                problems.append(f"{rel}: link {target} leaves the repository")
            elif not os.path.exists(dest):
                problems.append(f"{rel}: link {target}: no file {os.path.relpath(dest, root)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                problems.append(f"{rel}: link {target}: no heading #{anchor} in {os.path.relpath(dest, root)}")
    return problems


def main():
    root = sys.argv[1]
    problems = link_problems(root)
    for p in problems:
        print(p)
    print(f"check_docs: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
