#!/usr/bin/env python3
"""The include arrows between the stage folders of src/ (docs/design.md, "The tree"), and MPI.

Each folder of src/ may include the folders listed for it in ALLOWED and nothing else; mpi/
(the front door) may include any of them, and no file of src/ includes mpi/. Every #include
"folder/..." of a .h or .cpp is checked, so an arrow that runs back up fails the build (CMakeLists.txt
runs this before compiling) and ctest.

MPI belongs to mpi/: in src/ only the HDF5 archive's writer (MPI_FOLDERS) includes <mpi.h> or names an
MPI symbol, and it works on the communicator it is given (OutputOptions::parallel): no file of src/
names MPI_COMM_WORLD or starts, asks about or ends MPI (MPI_Init, MPI_Initialized, MPI_Finalize, ...).

  check_layering.py REPO        check REPO's src/ and mpi/ (exit 1 with each problem)
  check_layering.py --selftest  show that an up-arrow, an unknown folder and stray MPI are caught
"""
import os
import re
import sys
import tempfile

# folder -> the folders its files may include (besides its own). Order of the pipeline:
# data model and files first, then the parsers, the HF model's shape, the backends, the
# mapping recipe, the pure planner, the executor, the outputs and the reports.
ALLOWED = {
    "core": set(),
    "io": {"core"},
    "zip": {"core", "io"},
    "pickle": {"core"},
    "safetensors": {"core", "io"},
    "torch": {"core", "io", "zip", "pickle"},
    "watch": {"core", "io"},
    "architecture": {"core", "io"},
    "hdf5": {"core", "io"},  # what the archive's reader and writer share (the HDF5 target)
    "formats": {"core", "io", "zip", "pickle", "safetensors", "torch", "architecture", "hdf5"},
    "mapping": {"core", "io", "safetensors", "architecture", "formats"},
    "plan": {"core"},
    "learned_map": {"core"},  # map's planning: pure, the reads are the mpi/ command's
    "exec": {"core", "io", "architecture", "mapping", "plan"},
    "output": {"core", "io", "safetensors", "architecture", "mapping", "plan", "exec", "hdf5"},
    "report": {"core", "io", "architecture", "formats", "mapping", "plan", "exec", "output"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# The folders of src/ that may call MPI (on the communicator they receive), and what no file may name.
MPI_FOLDERS = ("src/output/hdf5/",)
MPI_HEADER = re.compile(r'^\s*#\s*include\s*<mpi\.h>', re.M)
MPI_SYMBOL = re.compile(r'\bMPI_[A-Za-z_]+')
MPI_FORBIDDEN = re.compile(r'\b(MPI_COMM_WORLD|MPI_COMM_SELF|MPI_Init\w*|MPI_Finalize\w*|MPI_Abort)\b')
COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/', re.S)


def arrows(root):
    """(file, line, from_folder, to_folder, included) for every quoted include of src/ and mpi/."""
    for top in ("src", "mpi"):
        base = os.path.join(root, top)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith((".h", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                folder = "mpi" if top == "mpi" else rel.split(os.sep)[1]
                text = open(path, encoding="utf-8").read()
                for m in INCLUDE.finditer(text):
                    included = m.group(1)
                    line = text.count("\n", 0, m.start()) + 1
                    target = included.split("/")[0] if "/" in included else None
                    yield rel, line, folder, target, included


def problems(root):
    found = []
    known = set(ALLOWED) | {"mpi"}
    for rel, line, folder, target, included in arrows(root):
        where = f"{rel}:{line}: #include \"{included}\""
        if folder not in known:
            found.append(f"{where}: src/{folder}/ is not in check_layering.py's ALLOWED table")
        elif folder == "mpi":
            continue
        elif target is None:
            # A bare name is a file beside it in src/ only if it exists there; mpi/ headers are bare.
            if not os.path.exists(os.path.join(root, os.path.dirname(rel), included)):
                found.append(f"{where}: src/ includes a file outside src/ (mpi/?)")
        elif target == "mpi":
            found.append(f"{where}: src/ never includes mpi/")
        elif target != folder and target in known and target not in ALLOWED[folder]:
            found.append(f"{where}: {folder}/ may include only {sorted(ALLOWED[folder]) or 'nothing else'}")
    return found


def mpi_problems(root):
    """Each place src/ reaches MPI where it may not (see the module's text)."""
    found = []
    base = os.path.join(root, "src")
    for dirpath, _, names in os.walk(base):
        for name in sorted(names):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            text = open(path, encoding="utf-8").read()
            code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
            allowed = rel.startswith(MPI_FOLDERS)
            for m in MPI_HEADER.finditer(code):
                if not allowed:
                    line = code.count("\n", 0, m.start()) + 1
                    found.append(f"{rel}:{line}: #include <mpi.h>: only {', '.join(MPI_FOLDERS)} may use MPI")
            for m in MPI_SYMBOL.finditer(code):
                line = code.count("\n", 0, m.start()) + 1
                if MPI_FORBIDDEN.fullmatch(m.group(0)):
                    found.append(f"{rel}:{line}: {m.group(0)}: src/ starts no MPI and knows no world communicator; "
                                 "it works on the one mpi/ hands over (OutputOptions::parallel)")
                elif not allowed:
                    found.append(f"{rel}:{line}: {m.group(0)}: only {', '.join(MPI_FOLDERS)} may use MPI")
    return found


def selftest():
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            path = os.path.join(root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").write(text)
        write("src/core/a.h", '#pragma once\n')
        write("src/plan/b.h", '#include "core/a.h"\n')
        write("mpi/main.cpp", '#include "plan/b.h"\n#include "comm.h"\n')
        assert problems(root) == [], problems(root)
        write("src/core/a.h", '#pragma once\n#include "plan/b.h"\n')  # an up-arrow
        write("src/plan/b.h", '#include "core/a.h"\n#include "comm.h"\n')  # a reach into mpi/
        write("src/newstage/c.cpp", '#include "core/a.h"\n')  # a folder nobody placed
        found = problems(root)
        assert len(found) == 3, found
        assert "src/core/a.h:2" in found[0] or any("src/core/a.h:2" in f for f in found), found
        # MPI: the HDF5 writer on the communicator it is given is fine; MPI elsewhere, or a world of its own, is not.
        write("src/output/hdf5/w.cpp", '#include <mpi.h>\n// not MPI_COMM_WORLD\nvoid f(MPI_Comm c) { MPI_Barrier(c); }\n')
        assert mpi_problems(root) == [], mpi_problems(root)
        write("src/output/hdf5/v.cpp", '#include <mpi.h>\nint r() { int i; MPI_Initialized(&i); return i; }\n'
                                       'MPI_Comm c() { return MPI_COMM_WORLD; }\n')
        write("src/exec/x.cpp", '#include <mpi.h>\nvoid g(MPI_Comm c);\n')
        found = sorted(mpi_problems(root))
        assert [f.split(":")[0] + ":" + f.split(":")[1] for f in found] == [
            "src/exec/x.cpp:1", "src/exec/x.cpp:2", "src/output/hdf5/v.cpp:2", "src/output/hdf5/v.cpp:3"], found
    print("check_layering selftest: an up-arrow, a reach into mpi/, an unplaced folder, <mpi.h> outside the "
          "HDF5 writer and a world communicator in src/ are caught")


def main():
    if sys.argv[1:] == ["--selftest"]:
        selftest()
        return 0
    root = sys.argv[1]
    found = problems(root)
    for p in found:
        print(p)
    if found:
        print(f"{len(found)} include arrow(s) break the layering (docs/design.md, The tree)")
    stray = mpi_problems(root)
    for p in stray:
        print(p)
    if stray:
        print(f"{len(stray)} use(s) of MPI outside what the HDF5 writer receives")
    if found or stray:
        return 1
    print(f"layering: {sum(1 for _ in arrows(root))} includes, every arrow points down; MPI only in "
          f"{', '.join(MPI_FOLDERS)}, on the communicator it is given")
    return 0


if __name__ == "__main__":
    sys.exit(main())
