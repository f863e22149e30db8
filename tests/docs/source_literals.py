"""The string literals of C++ source files, as a program prints them.

Adjacent literals ("a" "b", split over lines or with comments between) are joined into one
run, as the compiler joins them; a run ends at anything else (`+ name +`, `<< x <<`, a call).
Escapes are decoded and raw strings taken as they are, so a run reads as the user sees it;
each stretch of white space is one space, as in a quote in Markdown.
"""
import os
import re

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "?": "?", "a": "\a",
           "b": "\b", "f": "\f", "v": "\v"}
PREFIXES = ("u8R", "uR", "UR", "LR", "R", "u8", "u", "U", "L")


def _decode(body):
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 == len(body):
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e == "x":
            j = i + 2
            while j < len(body) and body[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(body[i + 2:j] or "0", 16)))
            i = j
        elif e in "01234567":
            j = i + 1
            while j < len(body) and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(chr(int(body[i + 1:j], 8)))
            i = j
        else:
            out.append(ESCAPES.get(e, e))
            i += 2
    return "".join(out)


def _literal_at(text, i):
    """(decoded text, end index) of a string literal starting at i (after any prefix), or None."""
    for prefix in PREFIXES:
        if text.startswith(prefix + '"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            start = i + len(prefix)
            if prefix.endswith("R"):
                open_paren = text.index("(", start)
                delimiter = ")" + text[start + 1:open_paren] + '"'
                end = text.index(delimiter, open_paren)
                return text[open_paren + 1:end], end + len(delimiter)
            return _quoted(text, start)
    if text[i] == '"':
        return _quoted(text, i)
    return None


def _quoted(text, start):
    j = start + 1
    while text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return _decode(text[start + 1:j]), j + 1


def literal_runs(text):
    """Every run of adjacent string literals in C++ source TEXT, joined and decoded."""
    runs, current, i, n = [], None, 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
            continue
        if text.startswith("/*", i):
            i = text.index("*/", i + 2) + 2
            continue
        if c.isspace():
            i += 1
            continue
        if c == "'" and not (i > 0 and text[i - 1].isalnum()):  # a char literal (not a digit separator 1'000)
            j = i + 1
            while text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            if current is not None:
                runs.append(current)
                current = None
            continue
        literal = _literal_at(text, i) if c in 'uULR"' else None
        if literal:
            current = literal[0] if current is None else current + literal[0]
            i = literal[1]
            continue
        if current is not None:
            runs.append(current)
            current = None
        if c.isalnum() or c == "_":  # a whole identifier, so that its last letter is not read as a prefix
            while i < n and (text[i].isalnum() or text[i] == "_"):
                i += 1
        else:
            i += 1
    if current is not None:
        runs.append(current)
    return [re.sub(r"\s+", " ", run) for run in runs]


def source_literal_runs(root, folders=("src", "mpi")):
    """The literal runs of every .cpp and .h file under ROOT/FOLDERS."""
    runs = []
    for folder in folders:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".cpp", ".h")):
                    with open(os.path.join(dirpath, name), encoding="utf-8") as f:
                        runs += literal_runs(f.read())
    return runs
