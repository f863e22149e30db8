#!/usr/bin/python3
"""Shows that check_docs.py fails where it must: a small repository with a stale quote, a quote
that joins literals the way the program does, an exit code table that differs from the header,
and a broken anchor; each problem must be reported, and the good quotes must not be.

    check_docs_selftest.py
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

SOURCE = r'''
void fail(const std::string& path, uint64_t n) {
    const std::string where = path + ": ZIP archive";
    throw Error(where + ", byte " + std::to_string(n) + ": no end-of-central-directory record in the last "
                "65557 bytes (a truncated file, or not a ZIP file)");
    throw Error(path + ": holds '" + text + "', expected 'release'");  // a 'quoted' "word" in a comment
}
'''
HEADER = """enum ExitCode : int {
    kExitSuccess = 0,  // done
    kExitFailure = 1,  // an error
};
"""
TROUBLESHOOTING = """# Troubleshooting

## Good quotes

| message | cause | fix |
|---|---|---|
| `<file>: ZIP archive, byte <b> of <n>: no end-of-central-directory record in the last 65557 bytes (...)` | joined as the program joins it | - |
| `<dir>/latest: holds '<x>', expected 'release'` | a placeholder word | - |

### `<file>: ZIP archive, byte <b> of <n>: ...`

## Stale quotes

| message | cause | fix |
|---|---|---|
| `<file>: no end-of-central-directory record in the final <n> bytes` | reworded | - |

### `<path>: holds '<x>', expected 'release' or an iteration number`

Link to [a heading](#good-quotes) and to [a missing one](#stale-quote).
"""
USAGE = """# Usage

## Exit codes

| code | when | message |
|---|---|---|
| 0 | done | - |
| 2 | usage | - |
"""
EXPECTED = [
    "link #stale-quote: no heading #stale-quote",
    "'no end-of-central-directory record in the final' is in no string",
    "'expected 'release' or an iteration number' is in no string",
    "the exit code table lacks 1 (kExitFailure",
    "the exit code table lists 2, which mpi/exit_code.h does not define",
    "kExitFailure is used nowhere",
]


def write(root, path, text):
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "w", encoding="utf-8") as f:
        f.write(text)


def main():
    with tempfile.TemporaryDirectory() as root:
        write(root, "README.md", "# Project\n")
        write(root, "src/zip.cpp", SOURCE + "int main() { return kExitSuccess; }\n")
        write(root, "mpi/exit_code.h", HEADER)
        write(root, "docs/troubleshooting.md", TROUBLESHOOTING)
        write(root, "docs/usage.md", USAGE)
        run = subprocess.run([sys.executable, os.path.join(HERE, "check_docs.py"), root], capture_output=True, text=True)
    lines = run.stdout.splitlines()
    failures = [f"not reported: {e}" for e in EXPECTED if not any(e in line for line in lines)]
    failures += [f"reported more than expected: {line}" for line in lines[:-1] if not any(e in line for e in EXPECTED)]
    if run.returncode != 1:
        failures.append(f"exit {run.returncode}, expected 1")
    for f in failures:
        print(f)
    print(run.stdout, end="")
    print("check_docs_selftest: " + ("FAILED" if failures else "OK"))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
