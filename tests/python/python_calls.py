#!/usr/bin/env python3
"""The vmerge Python module (python/vmerge) against the vmerge-mpi command, on the same inputs:

- merge() writes the same bytes as `vmerge-mpi merge` (every file of the folder), for the
  example checkpoint and FSDP fixture cases; inspect() returns what `inspect --json` prints;
  test() and verify() report as the commands do;
- a failure raises MergeError whose message is exactly what the command prints on stderr, with
  its exit code (1 for an error, 2 for a usage error);
- a progress callable sees the bytes up to the total; returning False cancels: MergeError, no
  target, the staging folder kept, and merge(resume=True) completes it to the command's bytes;
- progress=True draws tqdm's bar (tqdm installed).

  python_calls.py --vmerge VMERGE_MPI --source SOURCE_DIR --work WORK [--fixtures FSDP_FIXTURES]
The module is imported as installed (pip install .) or from PYTHONPATH with VMERGE_LIBRARY.
"""
import argparse
import filecmp
import io
import json
import os
import shutil
import subprocess
import sys

import vmerge


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def command(vmerge_mpi, *args):
    """The command's exit code, stdout and stderr (as the user sees them), one process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI", "PMIX_", "SLURM_"))}
    done = subprocess.run([vmerge_mpi, *args], capture_output=True, text=True, env=env)
    return done.returncode, done.stdout, done.stderr.rstrip("\n")


def same_folder(a, b):
    """Every file of a and b, byte for byte (the names too)."""
    names_a = sorted(os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs)
    names_b = sorted(os.path.relpath(os.path.join(d, f), b) for d, _, fs in os.walk(b) for f in fs)
    if names_a != names_b:
        fail("%s and %s hold different files: %s / %s" % (a, b, names_a, names_b))
    for name in names_a:
        if not filecmp.cmp(os.path.join(a, name), os.path.join(b, name), shallow=False):
            fail("%s differs from the command's %s" % (os.path.join(a, name), os.path.join(b, name)))
    return len(names_a)


def merges_match_the_command(vmerge_mpi, checkpoint, work, name, extra):
    by_command = os.path.join(work, name + ".command")
    by_python = os.path.join(work, name + ".python")
    flags = [a for k, v in extra.items() for a in ("--" + k, str(v))]
    code, _, err = command(vmerge_mpi, "merge", "--local_dir", checkpoint, "--target_dir", by_command, *flags)
    if code != 0:
        fail("the command failed on %s: %s" % (checkpoint, err))
    log = vmerge.merge(checkpoint, by_python, progress=False, **extra)
    if log["command"] != "merge" or log["target_dir"] != by_python or log["ranks"] != 1:
        fail("merge() returned %s" % json.dumps(log)[:300])
    files = same_folder(by_python, by_command)
    print("ok   merge() of %s: %d files byte-identical to vmerge-mpi merge" % (name, files))
    return by_command


def errors_are_the_commands(vmerge_mpi, work):
    missing = os.path.join(work, "no-such-checkpoint")
    target = os.path.join(work, "never-written")
    code, _, err = command(vmerge_mpi, "merge", "--local_dir", missing, "--target_dir", target)
    try:
        vmerge.merge(missing, target, progress=False)
        fail("merge() of a missing checkpoint returned")
    except vmerge.MergeError as e:
        if (str(e), e.exit_code) != (err, code) or code != 1:
            fail("MergeError %r (exit %d), the command printed %r (exit %d)" % (str(e), e.exit_code, err, code))
    failure = err
    if os.path.exists(target):
        fail("a failed merge() left " + target)
    code, _, err = command(vmerge_mpi, "merge", "--local_dir", missing, "--target_dir", target, "--dtype", "fp12")
    try:
        vmerge.merge(missing, target, dtype="fp12")
        fail("merge(dtype='fp12') returned")
    except vmerge.MergeError as e:
        if (str(e), e.exit_code) != (err, code) or code != 2:
            fail("usage MergeError %r (exit %d), the command printed %r (exit %d)" % (str(e), e.exit_code, err, code))
    print("ok   MergeError carries the command's message and exit code: 1 (%s) and 2 (%s)" % (failure, err))


def cancel_then_resume(vmerge_mpi, checkpoint, work, by_command):
    target = os.path.join(work, "cancelled")
    staging = os.path.join(work, ".cancelled.vmerge-staging")
    calls = []

    def stop(done, total):
        calls.append((done, total))
        return False

    try:
        vmerge.merge(checkpoint, target, progress=stop)
        fail("a cancelled merge() returned")
    except vmerge.MergeError as e:
        if "cancelled by the progress callback" not in str(e) or e.exit_code != 1:
            fail("cancel raised %r" % str(e))
    if len(calls) != 1 or os.path.exists(target) or not os.path.isdir(staging):
        fail("after cancel: %d calls, target %s, staging %s" % (len(calls), os.path.exists(target), os.path.isdir(staging)))
    def interrupted(done, total):
        raise KeyboardInterrupt

    try:  # an exception in the callback cancels too, and is what the call raises
        vmerge.merge(checkpoint, target, resume=True, progress=interrupted)
        fail("a merge() whose callback raised returned")
    except KeyboardInterrupt:
        pass
    if os.path.exists(target) or not os.path.isdir(staging):
        fail("after an interrupted callback: target %s, staging %s" % (os.path.exists(target), os.path.isdir(staging)))
    seen = []
    vmerge.merge(checkpoint, target, resume=True, progress=lambda done, total: seen.append((done, total)))
    if os.path.exists(staging) or not seen or seen[-1][0] != seen[-1][1]:
        fail("resume: staging left %s, progress %s" % (os.path.exists(staging), seen[-3:]))
    same_folder(target, by_command)
    print("ok   cancel from the progress callback: no target, staging kept; resume=True completes it byte-identical")


def tqdm_bar(checkpoint, work):
    import contextlib
    captured = io.StringIO()
    with contextlib.redirect_stderr(captured):
        vmerge.merge(checkpoint, os.path.join(work, "with-bar"), progress=True)
    if "100%" not in captured.getvalue():
        fail("no tqdm bar reaching 100%%: %r" % captured.getvalue()[-200:])
    print("ok   progress=True draws tqdm's bar to 100%")


def ctrl_c_after_a_merge(checkpoint, work):
    """The merge's own signal handling ends with the call: Ctrl-C is Python's KeyboardInterrupt again."""
    import signal
    vmerge.merge(checkpoint, os.path.join(work, "before-ctrl-c"), progress=False)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        import time
        time.sleep(1)
        fail("SIGINT after a merge raised no KeyboardInterrupt")
    except KeyboardInterrupt:
        pass
    print("ok   Ctrl-C after a merge is Python's KeyboardInterrupt")


def reports(vmerge_mpi, checkpoint, source, merged):
    # Explicit budget and page cache: "auto" follows the memory free at the moment, which moves
    # between the two runs.
    code, out, _ = command(vmerge_mpi, "inspect", "--local_dir", checkpoint, "--json", "--max_memory", "1GiB",
                           "--page_cache", "keep")
    document = vmerge.inspect(checkpoint, max_memory="1GiB", page_cache="keep")
    expected = json.loads(out)
    for timed in (document, expected):  # timings differ run to run
        for key in ("total_seconds", "plan_seconds"):
            timed.get("plan", {}).pop(key, None)
    if code != 0 or document != expected:
        differing = sorted(k for k in set(document) | set(expected) if document.get(k) != expected.get(k))
        fail("inspect() differs from inspect --json in %s: %s / %s" % (
            differing, json.dumps({k: document.get(k) for k in differing})[:600],
            json.dumps({k: expected.get(k) for k in differing})[:600]))
    reference = os.path.join(source, "examples/tiny-qwen2-fsdp/global_step_1/reference")
    checked = vmerge.test(checkpoint, reference) if os.path.isdir(reference) else {"ok": True}
    verified = vmerge.verify(merged)
    if not checked["ok"] or not verified["ok"] or "vmerge verify: OK" not in verified["output"]:
        fail("test() %s, verify() %s" % (checked, verified))
    print("ok   inspect() is inspect --json; test() and verify() report OK")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vmerge", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--fixtures")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    example = os.path.join(args.source, "examples/tiny-qwen2-fsdp/global_step_1/actor")
    by_command = merges_match_the_command(args.vmerge, example, args.work, "example", {"max_shard_size": "1MB"})
    if args.fixtures:
        for case in ("w3_uneven", "fp32_to_bf16_w2", "hsdp_2x2"):
            merges_match_the_command(args.vmerge, os.path.join(args.fixtures, case), args.work, case,
                                     {"max_shard_size": "40KB"})
    errors_are_the_commands(args.vmerge, args.work)
    plain = merges_match_the_command(args.vmerge, example, args.work, "plain", {})
    cancel_then_resume(args.vmerge, example, args.work, plain)
    tqdm_bar(example, args.work)
    ctrl_c_after_a_merge(example, args.work)
    reports(args.vmerge, example, args.source, by_command)
    shutil.rmtree(args.work, ignore_errors=True)
    print("ok   vmerge %s module: every check passed" % vmerge.version())


if __name__ == "__main__":
    main()
