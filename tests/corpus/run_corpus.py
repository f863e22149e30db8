#!/usr/bin/python3
"""Runs corpus cases (tests/corpus/make_bad_inputs.py) under mpiexec and requires of each:
its exit code (a signal or a timeout is a hang or a crash), on failure exactly one "error:"
line holding every expected text, on success every expected output text, and, for a failed
run, the case folder and the target's parent byte-identical before and after (no target, no
staging folder, no lock, nothing outside the target touched or deleted).

    run_corpus.py VMERGE MPIEXEC CORPUS_DIR (--module M | CASE...)
"""
import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_odls_base_sigkill_timeout="0")  # no 2 s teardown after a failing run


def snapshot(root):
    """Every entry under `root` (links not followed): type, mode, size, link target, content hash."""
    entries = {}
    if not os.path.lexists(root):
        return entries
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            info = os.lstat(path)
            rel = os.path.relpath(path, root)
            item = [stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode)]
            if stat.S_ISLNK(info.st_mode):
                item.append(os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                with open(path, "rb") as f:
                    item += [info.st_size, hashlib.sha256(f.read()).hexdigest()]
            entries[rel] = item
    return entries


def changes(before, after):
    out = [f"created {k}" for k in sorted(after.keys() - before.keys())]
    out += [f"removed {k}" for k in sorted(before.keys() - after.keys())]
    out += [f"changed {k}" for k in sorted(before.keys() & after.keys()) if before[k] != after[k]]
    return out


def case_root(corpus, local_dir):
    """The case's own folder: the first component of local_dir below the corpus folder."""
    rel = os.path.relpath(local_dir, corpus)
    return os.path.join(corpus, rel.split(os.sep)[0]) if not rel.startswith("..") else local_dir


def check_after(c, target, before):
    """The checks that hold whatever the exit: folders left alone, what the target holds."""
    for u in c["unchanged"]:
        diff = changes(before[u], snapshot(u))
        if diff:
            return f"{u} changed: " + "; ".join(diff[:5])
    norm = os.path.normpath(target)
    lock = os.path.join(os.path.dirname(norm), "." + os.path.basename(norm) + ".vmerge-lock")
    if c["exit"] == 0 and os.path.lexists(lock):  # a failed run is held to its snapshot instead
        return f"the run left the lock {lock} behind"
    for name in c["target_has"]:
        if not os.path.isfile(os.path.join(target, name)) or os.path.islink(os.path.join(target, name)):
            return f"the target lacks the regular file {name}"
    for name in c["target_lacks"]:
        if os.path.lexists(os.path.join(target, name)):
            return f"the target holds {name}"
    return None


def run_case(vmerge, mpiexec, corpus, name, c):
    runs = os.path.join(corpus, ".runs", name)
    shutil.rmtree(runs, ignore_errors=True)
    os.makedirs(runs)
    target = c["target"] or os.path.join(runs, "out")
    watched = {os.path.dirname(os.path.normpath(target))}
    if c["local_dir"]:
        watched.add(case_root(corpus, c["local_dir"]))
    before = {w: snapshot(w) for w in watched | set(c["unchanged"])}
    cmd = [mpiexec, "--oversubscribe", "-np", str(c["np"]), vmerge, c["command"]]
    if c["local_dir"]:
        cmd += ["--local_dir", c["local_dir"]]
    if c["command"] in ("merge", "verify") and "--target_dir" not in c["args"]:
        cmd += ["--target_dir", target]
    cmd += c["args"]
    try:
        done = subprocess.run(cmd, env=dict(ENV, **c.get("env", {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=c["timeout"])
        log, rc = done.stdout.decode(errors="replace"), done.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = (e.stdout or b"").decode(errors="replace"), None
    problem = None
    errors = [line for line in log.splitlines() if "error:" in line]
    if rc is None:
        problem = f"still running after {c['timeout']} s (a hang)"
    elif rc != c["exit"]:
        problem = f"exit code {rc}, expected {c['exit']}"
    elif c["exit"] != 0 and len(errors) != 1:
        problem = f"{len(errors)} 'error:' lines, expected exactly one"
    else:
        missing = [t for t in (c["error"] if c["exit"] else c["output"]) if t not in log]
        if missing:
            problem = f"the output lacks '{missing[0]}'"
    if problem is None and c["exit"] != 0:
        for w in sorted(watched):
            diff = changes(before[w], snapshot(w))
            if diff:
                problem = f"{w} changed by a failed run: " + "; ".join(diff[:5])
                break
    if problem is None:
        problem = check_after(c, target, before)
    if problem:
        print(f"FAIL {name}: {problem}\n    " + " ".join(cmd) + "\n    " + log.replace("\n", "\n    "))
        return False
    print(f"ok   {name}: " + (errors[0] if errors else f"exit {rc}"))
    shutil.rmtree(runs, ignore_errors=True)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("vmerge")
    ap.add_argument("mpiexec")
    ap.add_argument("corpus")
    ap.add_argument("--module")
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    corpus = os.path.abspath(a.corpus)
    with open(os.path.join(corpus, "corpus.json")) as f:
        cases = json.load(f)
    names = a.cases or [n for n, c in cases.items() if c["module"] == a.module]
    if not names:
        sys.exit(f"no cases for {a.module or a.cases} in {corpus}/corpus.json")
    failed = [n for n in names if not run_case(a.vmerge, a.mpiexec, corpus, n, cases[n])]
    if failed:
        sys.exit(f"{len(failed)} of {len(names)} case(s) misbehaved: {' '.join(failed)}")
    print(f"all {len(names)} case(s) behaved")


if __name__ == "__main__":
    main()
