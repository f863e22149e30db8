#!/usr/bin/env python3
"""Merges INTO an S3-compatible bucket (s3_server.py on loopback, every SigV4 signature checked):
disk -> bucket and bucket -> bucket for an FSDP, a Megatron and a DeepSpeed fixture on 1 and 3
ranks, each output downloaded with boto3 (an independent client) and compared bit for bit with
the same merge to disk, itself checked against the generator's reference. Then what can go
wrong: an UploadPart denied mid-merge (no object under the prefix, no open upload left), a rank
killed mid-upload then --resume (same bytes as an uninterrupted merge, the parts the store held
not sent again), a prefix that holds other objects or an earlier output (--force), wrong
credentials and a missing bucket. Parts are made small (VMERGE_TEST_S3_PART_SIZE, and the
server's S3_UPLOAD_PART_MIN_SIZE) so these small models span several parts and the ranks' shares
cross part boundaries.

    s3_output_cases.py --vmerge BIN --mpiexec MPIEXEC --source SRC --fixtures BUILD/fixtures --work DIR
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_merge_cases import case_args, BUCKET, Runner, Server, bucket_client, case_fields, same_folders, server_env, upload  # noqa: E402

CASES = [("fsdp", "fp32_to_bf16_w2"), ("megatron", "mlm_llama_tp2_pp2"), ("deepspeed", "zero2_bf16_w3")]
PART_SIZE = 7000  # bytes: a 25 KB model is four parts, and three ranks' shares end inside parts


def download(client, prefix, folder):
    """Every object under `prefix`, as files under `folder`; returns how many."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    keys = objects_under(client, prefix)
    for key in keys:
        path = os.path.join(folder, key[len(prefix) + 1:])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        client.download_file(BUCKET, key, path)
    return len(keys)


def objects_under(client, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def open_uploads(client, prefix):
    return [u["Key"] for u in client.list_multipart_uploads(Bucket=BUCKET, Prefix=prefix + "/").get("Uploads", [])]


def same_as_disk(run, client, prefix, disk, work, what):
    down = os.path.join(work, "download")
    download(client, prefix, down)
    difference = same_folders(disk, down)
    left = open_uploads(client, prefix)
    run.check(not difference and not left, f"{what}: same bytes as the merge to disk, no upload left open"
              + (f" ({difference}; open: {left})" if difference or left else ""))


def merge_cases(run, fixtures, work, client):
    for kind, case in CASES:
        fields = case_fields(fixtures, kind, case)
        local_dir = os.path.join(fixtures, kind, fields.get("local_dir", case))
        extra = list(fields.get("merge_args", []))
        prefix = f"in/{kind}/{case}"
        upload(client, local_dir, prefix + "/ckpt")
        s3_extra = list(extra)
        if fields.get("hf_config"):
            hf = os.path.join(fixtures, kind, fields["hf_config"])
            upload(client, hf, prefix + "/hf")
            extra += ["--hf_config", hf]
            s3_extra += ["--hf_config", f"s3://{BUCKET}/{prefix}/hf"]
        for np in (1, 3):
            disk = os.path.join(work, f"{case}.np{np}")
            r = run.vmerge(np, "merge", "--local_dir", local_dir, "--target_dir", disk, *extra, "--quiet")
            run.check(r.returncode == 0, f"{case}: merge to disk, {np} ranks" + ("" if r.returncode == 0 else ": " + r.stderr[-800:]))
            reference = os.path.join(fixtures, kind, fields.get("reference", case + ".reference"))
            checker = subprocess.run([run.args.checker_python, os.path.join(run.args.source, "tests/tools/check_hf_output.py"),
                                      "--out", disk, "--ref", reference], capture_output=True, text=True)
            run.check(checker.returncode == 0, f"{case}: {np} ranks to disk, against the generator's reference: "
                      f"{checker.stdout.strip()[-300:]}")
            for source, args, name in ((local_dir, extra, "disk -> bucket"),
                                       (f"s3://{BUCKET}/{prefix}/ckpt", s3_extra, "bucket -> bucket")):
                out = f"out/{case}/np{np}/{'b2b' if source.startswith('s3://') else 'd2b'}"
                r = run.vmerge(np, "merge", "--local_dir", source, "--target_dir", f"s3://{BUCKET}/{out}", *args, "--quiet")
                if r.returncode != 0:
                    run.check(False, f"{case}: {name}, {np} ranks: {r.stderr[-1500:]}")
                    continue
                same_as_disk(run, client, out, disk, work, f"{case}: {name}, {np} ranks")


def denied_part(run, server, client):
    """An UploadPart refused halfway: the merge fails naming the part, nothing is visible."""
    ckpt = os.path.join(run.args.fixtures, "fsdp", "fp32_to_bf16_w2")
    for np in (1, 3):
        server.test_call("/_test/deny_part?after=2", "POST")
        prefix = f"denied/np{np}"
        r = run.vmerge(np, "merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/{prefix}", "--quiet")
        out = r.stdout + r.stderr
        run.check(r.returncode != 0 and "HTTP 403" in out and "UploadPart" in out and f"s3://{BUCKET}/{prefix}/" in out,
                  f"an UploadPart denied, {np} ranks: fails naming the part and the status"
                  + ("" if r.returncode != 0 and "HTTP 403" in out else f": {out.strip()[-400:]}"))
        objects, left = objects_under(client, prefix), open_uploads(client, prefix)
        run.check(not objects and not left, f"an UploadPart denied, {np} ranks: no object and no open upload left"
                  + (f" (objects {objects}, open {left})" if objects or left else ""))
    server.test_call("/_test/deny_part?after=-1", "POST")


def kill_and_resume(run, server, work, client):
    """A rank killed while the ranks upload (each block slowed by the test hook): no object
    appears, the uploads stay open; --resume completes them with the parts already held (their
    MD5 checked) and gives the bytes of an uninterrupted merge to disk."""
    example = os.path.join(run.args.source, "examples/tiny-qwen2-fsdp/global_step_1/actor")
    args = ["--max-shard-size", "1MB", "--max-memory", "1MiB"]
    straight = os.path.join(work, "example.disk")
    r = run.vmerge(3, "merge", "--local_dir", example, "--target_dir", straight, *args, "--quiet")
    run.check(r.returncode == 0, "example: uninterrupted merge to disk")
    prefix, env = "killed", dict(run.env, VMERGE_TEST_BLOCK_DELAY_MS="150", VMERGE_TEST_S3_PART_SIZE="65536")
    server.test_call("/_test/reset", "POST")
    command = [run.args.mpiexec, "--oversubscribe", "-np", "3", run.args.vmerge, "merge", "--local_dir", example,
               "--target_dir", f"s3://{BUCKET}/{prefix}", *args]
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, parts = time.monotonic() + 90, 0
    while time.monotonic() < deadline and parts < 6:
        time.sleep(0.1)
        parts = server.test_call("/_test/stats").get("PUT", {}).get("requests", 0)
    pids = subprocess.run(["pgrep", "-f", f"vmerge-mpi merge .*--target_dir s3://{BUCKET}/{prefix}"],
                          capture_output=True, text=True).stdout.split()
    if parts < 6 or len(pids) < 2:
        launcher.kill()
        run.check(False, f"kill during a merge into the bucket: never started uploading ({parts} parts, {len(pids)} ranks)")
        return
    os.kill(int(pids[1]), signal.SIGKILL)
    launcher.wait(timeout=120)
    objects, left = objects_under(client, prefix), open_uploads(client, prefix)
    run.check(launcher.returncode != 0 and not objects and left,
              f"a rank killed mid-upload: it fails, no object visible, the uploads kept open (objects {objects}, open {len(left)})")
    r = run.vmerge(3, "merge", "--local_dir", example, "--target_dir", f"s3://{BUCKET}/{prefix}", *args, "--resume",
                   env=dict(run.env, VMERGE_TEST_S3_PART_SIZE="65536"))
    run.check(r.returncode == 0 and "not sent again" in r.stdout,
              "--resume into the bucket: completes, reusing the parts the store held"
              + ("" if r.returncode == 0 and "not sent again" in r.stdout else ": " + (r.stdout + r.stderr)[-800:]))
    same_as_disk(run, client, prefix, straight, work, "--resume into the bucket")


def prefix_cases(run, client):
    """A prefix that holds other objects is refused; an earlier vmerge output only with --force."""
    ckpt = os.path.join(run.args.fixtures, "fsdp", "fp32_to_bf16_w2")
    client.put_object(Bucket=BUCKET, Key="busy/notes.txt", Body=b"user data")
    run.expect_error("a prefix holding other objects", ["merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/busy"],
                     [f"--target_dir s3://{BUCKET}/busy", "not a vmerge output", f"s3://{BUCKET}/busy/notes.txt"])
    run.check(objects_under(client, "busy") == ["busy/notes.txt"], "a refused prefix is left as it was")
    earlier = "out/fp32_to_bf16_w2/np1/d2b"
    run.expect_error("a prefix holding an earlier output", ["merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/{earlier}"],
                     ["holds an earlier vmerge output", "--force"])
    run.check(f"{earlier}/vmerge.manifest.json" in objects_under(client, earlier), "a refused earlier output keeps its manifest")
    client.put_object(Bucket=BUCKET, Key=f"{earlier}/README.md", Body=b"a model card the user added")
    run.expect_error("--force over an output with an object it did not write",
                     ["merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/{earlier}", "--force"],
                     [f"s3://{BUCKET}/{earlier}/README.md", "is not in the earlier output's manifest"])
    client.delete_object(Bucket=BUCKET, Key=f"{earlier}/README.md")
    megatron = "out/mlm_llama_tp2_pp2/np1/d2b"  # an output with other files, replaced by the FSDP merge
    r = run.vmerge(1, "merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/{megatron}", "--force", "--quiet")
    run.check(r.returncode == 0, "--force replaces an earlier output in the bucket" + ("" if r.returncode == 0 else ": " + r.stderr[-600:]))
    same_as_disk(run, client, megatron, os.path.join(run.args.work, "fp32_to_bf16_w2.np1"),
                 run.args.work, "--force into the bucket: only the new output's objects")
    run.expect_error("a target inside the input prefix",
                     ["merge", "--local_dir", f"s3://{BUCKET}/in/fsdp/fp32_to_bf16_w2/ckpt", "--target_dir",
                      f"s3://{BUCKET}/in/fsdp/fp32_to_bf16_w2/ckpt/merged"], ["overlaps", "--target_dir"])


def credential_cases(run):
    ckpt = os.path.join(run.args.fixtures, "fsdp", "fp32_to_bf16_w2")
    wrong_secret = dict(run.env, AWS_SECRET_ACCESS_KEY="not-the-secret-123")
    run.expect_error("into a bucket with a wrong secret", ["merge", "--local_dir", ckpt, "--target_dir", f"s3://{BUCKET}/w"],
                     [f"s3://{BUCKET}", "HTTP 403", "SignatureDoesNotMatch"], env=wrong_secret)
    run.expect_error("into a missing bucket", ["merge", "--local_dir", ckpt, "--target_dir", "s3://no-such-bucket-y/out"],
                     ["s3://no-such-bucket-y", "HTTP 404", "NoSuchBucket"])
    run.expect_error("--format hdf5 into a bucket", ["merge", "--local_dir", ckpt, "--format", "hdf5", "--target_dir",
                                                    f"s3://{BUCKET}/h5"], ["writes safetensors only"])


def main():
    args = case_args(("--vmerge", "--mpiexec", "--source", "--fixtures", "--work"))
    os.environ["S3_UPLOAD_PART_MIN_SIZE"] = "1024"  # read by moto in the server process
    server = Server(args.source, args.work)
    env = server_env(server, VMERGE_TEST_S3_PART_SIZE=str(PART_SIZE))
    try:
        client = bucket_client(server)
        run = Runner(args, env)
        merge_cases(run, args.fixtures, args.work, client)
        denied_part(run, server, client)
        kill_and_resume(run, server, args.work, client)
        prefix_cases(run, client)
        credential_cases(run)
    finally:
        server.stop()
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main())
