#!/usr/bin/python3
"""Build the corpus of bad inputs: each case is a good generated checkpoint damaged in one
precise way, with the exact text vmerge's error message must contain.

    /usr/bin/python3 tests/corpus/make_bad_inputs.py OUT_DIR [--fsdp DIR] [--megatron DIR]

--fsdp / --megatron: folders already written by tests/fixtures/make_fsdp_fixtures.py and
make_megatron_fixtures.py (ctest's build/fixtures/{fsdp,megatron}); when left out, the
generators are run into OUT_DIR/.good/ first (needs Debian's torch, hence /usr/bin/python3).

OUT_DIR/corpus.json: {name: {"module", "local_dir", "args", "command", "exit", "error",
"output", "target", "np", "timeout", "notes"}} (see corpus_lib.case). Each tests/corpus/cases_*.py
module adds one class of cases; run_corpus.py runs a module's cases (one ctest each).
Every expected text names the damaged file plus the offset, key or expectation that is wrong;
the offsets are computed here from the damaged bytes, not copied from vmerge's output.
Only the standard library is used for the damage (zip and pickle bytes are patched by hand);
the DCP cases re-chunk the good folder with tests/fixtures/dcp_writer.py (torch).
"""
import argparse
import json
import importlib
import os
import shutil
import subprocess
import sys

import corpus_lib


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--fsdp", help="folder of make_fsdp_fixtures.py output")
    ap.add_argument("--megatron", help="folder of make_megatron_fixtures.py output")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    fsdp, megatron = a.fsdp, a.megatron
    if not fsdp:
        fsdp = os.path.join(out, ".good", "fsdp")
        subprocess.run([sys.executable, os.path.join(corpus_lib.FIXTURES_SRC, "make_fsdp_fixtures.py"), fsdp],
                       check=True, stdout=subprocess.DEVNULL)
    if not megatron:
        megatron = os.path.join(out, ".good", "megatron")
        subprocess.run([sys.executable, os.path.join(corpus_lib.FIXTURES_SRC, "make_megatron_fixtures.py"),
                        megatron, "--cases", "verl_llama_tp2_pp1,dcp_qwen2_uneven"],
                       check=True, stdout=subprocess.DEVNULL)
    # Every tests/corpus/cases_*.py adds its cases; each module is one ctest.
    for name in sorted(n[:-3] for n in os.listdir(corpus_lib.HERE) if n.startswith("cases_") and n.endswith(".py")):
        corpus_lib.MODULE[0] = name[len("cases_"):]
        importlib.import_module(name).add_cases(fsdp, megatron, out)
    with open(os.path.join(out, "corpus.json"), "w") as f:
        json.dump(corpus_lib.CASES, f, indent=2)
    print(f"{len(corpus_lib.CASES)} bad inputs in {out}")


if __name__ == "__main__":
    main()
