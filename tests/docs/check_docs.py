#!/usr/bin/python3
"""Keeps the docs consistent with the repository and the program (ctest docs_consistency):

1. links: every relative link and #anchor in README.md, docs/, slurm/ and tests/*/README.md
   resolves inside the repository (doc_links.py);
2. messages: every message docs/troubleshooting.md quotes is text of the source (src/, mpi/), by
   the convention stated at the top of that page (message_quotes.py);
3. exit codes: the table in docs/usage.md lists exactly the codes of mpi/exit_code.h
   (exit_codes.py).

    check_docs.py SOURCE_DIR
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doc_links import link_problems  # noqa: E402
from exit_codes import exit_code_problems  # noqa: E402
from message_quotes import SourceText, quote_problems  # noqa: E402
from source_literals import source_literal_runs  # noqa: E402

TROUBLESHOOTING = os.path.join("docs", "troubleshooting.md")


def main():
    root = sys.argv[1]
    source = SourceText(source_literal_runs(root))
    problems = link_problems(root)
    problems += quote_problems(os.path.join(root, TROUBLESHOOTING), source, TROUBLESHOOTING)
    problems += exit_code_problems(root)
    for p in problems:
        print(p)
    print(f"check_docs: {len(problems)} problem(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
