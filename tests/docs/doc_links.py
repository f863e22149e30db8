"""Keeps the docs' links true: every relative link in README.md, docs/, slurm/ and
tests/*/README.md names a file of the repository (not one outside it, such as the project's
reference notes, which are not in it), and its #anchor a heading of that file by GitHub's rules.
"""
import os
import re

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Paths that lead out of the repository into notes it does not ship (written as a link or not).
OUTSIDE_NOTES = re.compile(r"(?:\.\./)+shared/|/work/shared/")


def markdown_files(root):
    files = [os.path.join(root, "README.md"), os.path.join(root, "slurm", "README.md")]
    for folder in ("docs", "tests"):
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in files if os.path.exists(f)]


def heading_slug(text):
    """GitHub's anchor for a heading's text: links reduced to their text, lower case, every
    character but letters, digits, '-', '_' and spaces removed, spaces turned into '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors_of(path):
    """The anchors of a Markdown file: its ATX headings (a repeated one gets -1, -2, ... as
    GitHub numbers them) and explicit <a name=...>/<a id=...> targets."""
    anchors, seen, in_code = set(), {}, False
    for line in open(path, encoding="utf-8"):
        if re.match(r"^\s*(```|~~~)", line):
            in_code = not in_code
        if in_code:
            continue
        anchors.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = heading_slug(heading.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def without_code(text):
    """TEXT without fenced code blocks and code spans, where a [x](y) is not a link."""
    text = re.sub(r"(?ms)^\s*(```|~~~).*?^\s*\1", "", text)
    return re.sub(r"(`+).+?\1", "", text)


def link_problems(root):
    problems = []
    real_root = os.path.realpath(root) + os.sep
    for md in markdown_files(root):
        text = open(md, encoding="utf-8").read()
        rel = os.path.relpath(md, root)
        for number, line in enumerate(text.split("\n"), 1):
            if OUTSIDE_NOTES.search(line):
                problems.append(f"{rel}:{number}: points at notes outside the repository: {line.strip()[:100]}")
        for target in LINK.findall(without_code(text)):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.realpath(dest).startswith(real_root):
                problems.append(f"{rel}: link {target} leaves the repository")
            elif not os.path.exists(dest):
                problems.append(f"{rel}: link {target}: no file {os.path.relpath(dest, root)}")
            elif anchor and dest.endswith(".md") and anchor not in anchors_of(dest):
                problems.append(f"{rel}: link {target}: no heading #{anchor} in {os.path.relpath(dest, root)}")
    return problems
