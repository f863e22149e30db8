#!/usr/bin/env python3
"""`vmerge-mpi watch` with the training run and/or the merged steps in an S3-compatible bucket
(s3_server.py on loopback, every SigV4 signature checked). A verl FSDP run is uploaded with
boto3 step by step, as a trainer saving to a bucket would: a complete step 1 (the tracker says
1) and a half-written step 2 (one of its two rank files). Checked:

- --root in the bucket, --target_root on disk: step 1 merged, step 2 left waiting; a watcher that
  keeps running merges step 2 once its last rank file appears; each step the same bytes as the
  merge of the same files from disk (itself checked against the generator's reference);
- the settle rule reads each object's LastModified: a step with every rank file but no marker
  waits out --settle;
- --target_root in the bucket too (2 ranks): every step downloaded and compared bit for bit,
  a second pass skips them, an interrupted merge (an open multipart upload under the step) is
  resumed, --keep_last removes only older outputs' objects, an object a user added to a merged
  step is named and left;
- the lock object: a live holder refuses a second watcher naming it, a dead holder's lock on
  this host is taken over, and the lock is gone after the watcher ends, also when SIGTERM ends it;
- a missing bucket (root or target), a missing prefix, a wrong secret, overlapping prefixes:
  one message naming the s3:// URL and the HTTP status, never the secret.

    s3_watch_cases.py --vmerge BIN --mpiexec MPIEXEC --source SRC --work DIR
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_merge_cases import case_args, BUCKET, Runner, Server, bucket_client, same_folders, server_env, upload  # noqa: E402
from s3_output_cases import download, objects_under, open_uploads  # noqa: E402

RUN = "run7"          # the training run's prefix in the bucket
MERGED = "run7-hf"    # the merged steps' prefix (bucket target root)
LOCK = ".watch.vmerge-lock"


def put_file(client, path, key):
    client.upload_file(path, BUCKET, key)


def disk_merges(run, example, work):
    """The oracle: the example step merged from disk with 1 and 2 ranks, checked against the
    generator's reference."""
    merged = {}
    for np in (1, 2):
        out = os.path.join(work, f"disk.np{np}")
        r = run.vmerge(np, "merge", "--local_dir", os.path.join(example, "actor"), "--target_dir", out, "--quiet")
        run.check(r.returncode == 0, f"the example merged from disk, {np} ranks" + ("" if r.returncode == 0 else ": " + r.stderr[-600:]))
        checker = subprocess.run([run.args.checker_python, os.path.join(run.args.source, "tests/tools/check_hf_output.py"),
                                  "--out", out, "--ref", os.path.join(example, "reference")], capture_output=True, text=True)
        run.check(checker.returncode == 0, f"the disk merge, {np} ranks, against the generator's reference: "
                  f"{checker.stdout.strip()[-300:]}")
        merged[np] = out
    return merged


def bucket_root_disk_target(run, client, example, work, disk):
    """Steps saved to the bucket, merged to disk: one pass, then a watcher running while step 2
    is finished."""
    actor = os.path.join(example, "actor")
    upload(client, actor, f"{RUN}/global_step_1/actor")
    client.put_object(Bucket=BUCKET, Key=f"{RUN}/latest_checkpointed_iteration.txt", Body=b"1")
    for name in ("fsdp_config.json", "model_world_size_2_rank_0.pt"):
        put_file(client, os.path.join(actor, name), f"{RUN}/global_step_2/actor/{name}")
    target = os.path.join(work, "watched")
    r = run.vmerge(1, "watch", "--root", f"s3://{BUCKET}/{RUN}", "--target_root", target, "--once", "--settle", "0")
    out = r.stdout + r.stderr
    run.check(r.returncode == 0 and "global_step_2: waiting (1 of 2 rank files present)" in out
              and not os.path.exists(os.path.join(target, "global_step_2")),
              "bucket root, first pass: step 2 (one rank file) left waiting" + ("" if r.returncode == 0 else ": " + out[-800:]))
    difference = same_folders(disk[1], os.path.join(target, "global_step_1"))
    run.check(not difference, "bucket root -> disk: step 1 the same bytes as the merge from disk" + (f" ({difference})" if difference else ""))

    log_path = os.path.join(work, "watcher.log")
    with open(log_path, "w") as log:
        watcher = subprocess.Popen([run.args.mpiexec, "-np", "1", run.args.vmerge, "watch", "--root", f"s3://{BUCKET}/{RUN}",
                                    "--target_root", target, "--every", "1", "--settle", "0"],
                                   env=run.env, stdout=log, stderr=subprocess.STDOUT, text=True)
        time.sleep(2)  # the watcher has looked at least once and found step 2 waiting
        upload(client, os.path.join(actor, "huggingface"), f"{RUN}/global_step_2/actor/huggingface")
        put_file(client, os.path.join(actor, "model_world_size_2_rank_1.pt"),
                 f"{RUN}/global_step_2/actor/model_world_size_2_rank_1.pt")  # the last rank file: complete
        manifest = os.path.join(target, "global_step_2", "vmerge.manifest.json")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not os.path.exists(manifest) and watcher.poll() is None:
            time.sleep(0.2)
        time.sleep(0.5)
        watcher.terminate()
        watcher.wait(timeout=60)
    text = open(log_path).read()
    difference = same_folders(disk[1], os.path.join(target, "global_step_2")) if os.path.exists(manifest) else "not merged"
    run.check(not difference and "global_step_2: merging" in text and "global_step_1: skipped" in text,
              "a running watcher merges step 2 once it appears in the bucket, bit-exact; step 1 not merged again"
              + ("" if not difference else f" ({difference}): {text[-800:]}"))
    client.put_object(Bucket=BUCKET, Key=f"{RUN}/latest_checkpointed_iteration.txt", Body=b"2")

    # Step 3 complete but without a marker (the tracker still says 2): settles by LastModified.
    upload(client, actor, f"{RUN}/global_step_3/actor")
    r = run.vmerge(1, "watch", "--root", f"s3://{BUCKET}/{RUN}", "--target_root", target, "--once", "--settle", "3600")
    out = r.stdout + r.stderr
    run.check(r.returncode == 0 and "global_step_3: waiting (all 2 rank files present, last changed" in out
              and not os.path.exists(os.path.join(target, "global_step_3")),
              "a step without a marker waits out --settle, timed by the objects' LastModified" + ("" if r.returncode == 0 else ": " + out[-800:]))


def bucket_target(run, client, work, disk):
    """Root and outputs in the bucket, 2 ranks: each step downloaded and compared."""
    root, target = f"s3://{BUCKET}/{RUN}", f"s3://{BUCKET}/{MERGED}"
    r = run.vmerge(2, "watch", "--root", root, "--target_root", target, "--once", "--settle", "0")
    out = r.stdout + r.stderr
    run.check(r.returncode == 0, "bucket root -> bucket target, 2 ranks" + ("" if r.returncode == 0 else ": " + out[-1200:]))
    for step in ("global_step_1", "global_step_2", "global_step_3"):
        down = os.path.join(work, "download", step)
        download(client, f"{MERGED}/{step}", down)
        difference = same_folders(disk[2], down)
        left = open_uploads(client, f"{MERGED}/{step}")
        run.check(not difference and not left, f"bucket -> bucket: {step} the same bytes as the merge from disk, no upload open"
                  + (f" ({difference}; open {left})" if difference or left else ""))
    run.check(client.list_objects_v2(Bucket=BUCKET, Prefix=f"{MERGED}/{LOCK}").get("KeyCount", 0) == 0,
              "the watcher's lock object is gone once it ends")

    r = run.vmerge(2, "watch", "--root", root, "--target_root", target, "--once", "--settle", "0")
    out = r.stdout + r.stderr
    run.check(r.returncode == 0 and out.count("skipped (merged already") == 3 and "merging" not in out,
              "a second pass over the bucket target skips the three merged steps" + ("" if r.returncode == 0 else ": " + out[-800:]))

    # A merge of step 3 interrupted: its objects gone but an upload left open, as a killed watcher leaves.
    for key in objects_under(client, f"{MERGED}/global_step_3"):
        client.delete_object(Bucket=BUCKET, Key=key)
    client.create_multipart_upload(Bucket=BUCKET, Key=f"{MERGED}/global_step_3/model.safetensors")
    r = run.vmerge(2, "watch", "--root", root, "--target_root", target, "--once", "--settle", "0")
    out = r.stdout + r.stderr
    down = os.path.join(work, "download", "resumed")
    download(client, f"{MERGED}/global_step_3", down)
    difference, left = same_folders(disk[2], down), open_uploads(client, MERGED)
    run.check(r.returncode == 0 and "global_step_3: resuming" in out and not difference and not left,
              "a step whose merge into the bucket was interrupted is resumed, bit-exact, no upload left open"
              + ("" if r.returncode == 0 and not difference else f" ({difference}): {out[-800:]}"))

    client.put_object(Bucket=BUCKET, Key="keep/user-notes.txt", Body=b"not vmerge's")
    tampered_manifest(run, client, root, target)
    r = run.vmerge(1, "watch", "--root", root, "--target_root", target, "--once", "--keep_last", "1")
    out = r.stdout + r.stderr
    gone = [s for s in ("global_step_1", "global_step_2") if not objects_under(client, f"{MERGED}/{s}")]
    run.check(r.returncode == 0 and len(gone) == 2 and objects_under(client, f"{MERGED}/global_step_3")
              and "global_step_1: removed (--keep_last 1)" in out and objects_under(client, "keep"),
              f"--keep_last 1 in the bucket removes the older steps' objects only (removed {gone})" + ("" if r.returncode == 0 else ": " + out[-800:]))

    # An object a user added to a merged step: the step is no longer vmerge's alone; the watcher
    # says which object and leaves it.
    card = f"{MERGED}/global_step_3/README.md"
    client.put_object(Bucket=BUCKET, Key=card, Body=b"a model card")
    r = run.vmerge(1, "watch", "--root", root, "--target_root", target, "--once", "--settle", "0")
    out = r.stdout + r.stderr
    run.check(r.returncode == 1 and f"s3://{BUCKET}/{card} is not in the earlier output's manifest" in out
              and client.list_objects_v2(Bucket=BUCKET, Prefix=card).get("KeyCount", 0) == 1, "a merged step with an object a user added: the watcher names it, leaves it"
              + ("" if r.returncode == 1 and "is not in the earlier" in out else ": " + out[-800:]))
    client.delete_object(Bucket=BUCKET, Key=card)


def tampered_manifest(run, client, root, target):
    """A manifest edited to list a name that climbs out of its step (a '..' name): removing the
    step by it would delete another prefix's object, since HTTP clients resolve dot segments.
    --keep_last refuses, names the manifest, and deletes nothing."""
    manifest = f"{MERGED}/global_step_1/vmerge.manifest.json"
    original = client.get_object(Bucket=BUCKET, Key=manifest)["Body"].read()
    listed = json.loads(original)
    listed["files"].append("../../keep/user-notes.txt")
    client.put_object(Bucket=BUCKET, Key=manifest, Body=json.dumps(listed).encode())
    before = objects_under(client, f"{MERGED}/global_step_1")
    r = run.vmerge(1, "watch", "--root", root, "--target_root", target, "--once", "--keep_last", "1")
    out = r.stdout + r.stderr
    run.check(r.returncode != 0 and "../../keep/user-notes.txt" in out and "not a plain relative path" in out
              and objects_under(client, "keep") and objects_under(client, f"{MERGED}/global_step_1") == before,
              "a manifest listing '../../keep/user-notes.txt': --keep_last refuses naming it, deletes nothing"
              + ("" if r.returncode != 0 else ": " + out[-800:]))
    client.put_object(Bucket=BUCKET, Key=manifest, Body=original)


def lock_cases(run, client):
    root, target = f"s3://{BUCKET}/{RUN}", f"s3://{BUCKET}/{MERGED}"
    host = socket.gethostname()
    client.put_object(Bucket=BUCKET, Key=f"{MERGED}/{LOCK}", Body=f"{host} 1 0\n".encode())  # pid 1 lives
    run.expect_error("a second watcher into the bucket target", ["watch", "--root", root, "--target_root", target, "--once"],
                     ["another vmerge watch is running", f"s3://{BUCKET}/{MERGED}/{LOCK}", f"{host} 1"])
    dead = subprocess.Popen(["true"])
    dead.wait()
    client.put_object(Bucket=BUCKET, Key=f"{MERGED}/{LOCK}", Body=f"{host} {dead.pid} 0\n".encode())
    r = run.vmerge(1, "watch", "--root", root, "--target_root", target, "--once")
    left = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{MERGED}/{LOCK}").get("KeyCount", 0)
    run.check(r.returncode == 0 and left == 0, "a lock object left by a killed watcher on this host is taken over, then released"
              + ("" if r.returncode == 0 else ": " + (r.stdout + r.stderr)[-600:]))

    # A watcher ended by SIGTERM (scancel, Ctrl-C through mpirun) deletes its lock object on the way out.
    # mpirun passes SIGTERM on and sends SIGKILL odls_base_sigkill_timeout seconds later (Open MPI's
    # default 1; the ctest environment sets 0, which leaves no time for any cleanup).
    watcher = subprocess.Popen([run.args.mpiexec, "-np", "1", run.args.vmerge, "watch", "--root", root, "--target_root",
                                target, "--every", "1"], env=dict(run.env, OMPI_MCA_odls_base_sigkill_timeout="1"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline, held = time.monotonic() + 60, 0
    while time.monotonic() < deadline and not held:
        time.sleep(0.2)
        held = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{MERGED}/{LOCK}").get("KeyCount", 0)
    time.sleep(1)
    watcher.terminate()
    watcher.wait(timeout=60)
    left = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{MERGED}/{LOCK}").get("KeyCount", 0)
    run.check(held and not left, f"a watcher stopped by SIGTERM deletes its lock object (held {held}, left {left})")


def failure_cases(run, work):
    root = f"s3://{BUCKET}/{RUN}"
    run.expect_error("watch --root in a missing bucket", ["watch", "--root", "s3://no-such-bucket-w/run", "--target_root",
                                                          os.path.join(work, "x"), "--once"],
                     ["s3://no-such-bucket-w", "HTTP 404", "NoSuchBucket"])
    run.expect_error("watch --target_root in a missing bucket", ["watch", "--root", root, "--target_root",
                                                                 "s3://no-such-bucket-w/out", "--once"],
                     ["s3://no-such-bucket-w", "HTTP 404", "NoSuchBucket"])
    run.expect_error("watch --root, a prefix with no object", ["watch", "--root", f"s3://{BUCKET}/no-run-here", "--target_root",
                                                               os.path.join(work, "x"), "--once"],
                     [f"s3://{BUCKET}/no-run-here", "no object has this prefix", "--root"])
    wrong_secret = dict(run.env, AWS_SECRET_ACCESS_KEY="not-the-secret-123")
    run.expect_error("watch with a wrong secret", ["watch", "--root", root, "--target_root", f"s3://{BUCKET}/w", "--once"],
                     [f"s3://{BUCKET}", "HTTP 403", "SignatureDoesNotMatch"], env=wrong_secret)
    run.expect_error("--target_root inside the run's prefix", ["watch", "--root", root, "--target_root", root + "/merged", "--once"],
                     ["overlaps the training run", "--target_root"])
    run.expect_error("--format hdf5 into a bucket target root", ["watch", "--root", root, "--target_root", f"s3://{BUCKET}/h5",
                                                                 "--format", "hdf5", "--once"], ["a bucket takes safetensors only"])


def main():
    args = case_args(("--vmerge", "--mpiexec", "--source", "--work"))
    os.environ["S3_UPLOAD_PART_MIN_SIZE"] = "1024"  # read by moto in the server process
    server = Server(args.source, args.work)
    env = server_env(server, VMERGE_TEST_S3_PART_SIZE="65536")
    example = os.path.join(args.source, "examples/tiny-qwen2-fsdp/global_step_1")
    try:
        client = bucket_client(server)
        run = Runner(args, env)
        disk = disk_merges(run, example, args.work)
        bucket_root_disk_target(run, client, example, args.work, disk)
        bucket_target(run, client, args.work, disk)
        lock_cases(run, client)
        failure_cases(run, args.work)
    finally:
        server.stop()
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main())
