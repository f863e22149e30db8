"""Keeps docs/troubleshooting.md's quoted messages true to the code.

The convention (stated at the top of troubleshooting.md): a quoted message is a code span in the
first column of a table whose first header cell is `message`, or a code span in a `###`
heading. In a quote, `<word>` (`<file>`, `<n>`, `<shape>`) stands for a part the program fills
in and covers the whole word it is glued into (`<dir>/config.json:`, `'<key>'`); `...` stands
for text left out. Each run of words between placeholders must be text the program can print:
inside one run of string literals of src/ or mpi/ (source_literals.py), or the end of one run,
whole runs and the start of another, as the program joins literals around values. So a message
whose wording changed in the code fails here until the doc follows.
"""
import re

PLACEHOLDER = re.compile(r"<[^<>\s]+>|\.\.\.")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)")
FENCE = re.compile(r"^\s*(```|~~~)")


def code_spans(markdown_text):
    """The contents of the code spans of one line of Markdown (CommonMark: `x`, `` a`b ``)."""
    spans = []
    for match in CODE_SPAN.finditer(markdown_text):
        body = match.group(2)
        if body.startswith(" ") and body.endswith(" ") and body.strip():
            body = body[1:-1]
        spans.append(body)
    return spans


def table_cells(row):
    """The cells of a GitHub table row; `\\|` is a | inside a cell."""
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    cells = re.split(r"(?<!\\)\|", row)
    return [c.replace("\\|", "|").strip() for c in cells]


def quoted_messages(path):
    """(line number, quote) of every quoted message of the Markdown file PATH."""
    quotes, in_fence, message_table = [], False, False
    lines = open(path, encoding="utf-8").read().split("\n")
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            in_fence = not in_fence
        if in_fence:
            continue
        if line.startswith("###"):
            quotes += [(number, q) for q in code_spans(line)]
        if not line.lstrip().startswith("|"):
            message_table = False
            continue
        cells = table_cells(line)
        if number < len(lines) and re.match(r"^\s*\|?\s*:?-{3,}", lines[number]):  # a header row
            message_table = cells[0].lower() == "message"
            continue
        if message_table and not re.match(r"^:?-{3,}:?$", cells[0]):
            quotes += [(number, q) for q in code_spans(cells[0])]
    return quotes


def literal_pieces(quote):
    """The runs of whole words of QUOTE between its placeholder words. A placeholder stands for
    the whole word it is glued into (`<dir>/config.json:`, `'<key>'`, `rank-<r>`, `(...)`): the
    program builds such a word from a value, so only the words around it are its literal text."""
    pieces, words = [], []
    for word in quote.split():
        if PLACEHOLDER.search(word):
            pieces.append(" ".join(words))
            words = []
        else:
            words.append(word)
    pieces.append(" ".join(words))
    return [p for p in pieces if p]


class SourceText:
    """The literal runs of the source, and what a message built from them can read."""

    def __init__(self, runs):
        self.runs = runs
        self.whole = set(runs)
        self.prefixes = {run[:i] for run in runs for i in range(1, len(run) + 1)}
        self.suffixes = {run[i:] for run in runs for i in range(len(run))}

    def holds(self, piece):
        """True when PIECE is inside one literal run, or is what a program prints by joining
        literals around values: the end of one run, any whole runs, then the start of another
        (`where + ", byte " + ...` prints "ZIP archive, byte" after `where = path + ": ZIP archive"`)."""
        if any(piece in run for run in self.runs):
            return True
        starts = [j for j in range(1, len(piece)) if piece[:j] in self.suffixes]
        seen = set(starts)
        while starts:
            j = starts.pop()
            if piece[j:] in self.prefixes:
                return True
            for k in range(j + 1, len(piece)):
                if k not in seen and piece[j:k] in self.whole:
                    seen.add(k)
                    starts.append(k)
        return False


def missing_pieces(quote, source):
    """The literal pieces of QUOTE that the source's literals cannot print (spaces compared as one)."""
    return [p for p in literal_pieces(quote) if not source.holds(p)]


def quote_problems(doc, source, shown_as):
    problems = []
    for number, quote in quoted_messages(doc):
        for piece in missing_pieces(quote, source):
            problems.append(f"{shown_as}:{number}: quoted message `{quote}`: '{piece}' is in no string of src/ or mpi/")
    return problems
