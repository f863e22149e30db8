#!/usr/bin/env python3
"""Bytes, requests and wall time of a merge INTO a bucket (docs/performance.md, "s3:// output"):
generates an FSDP bf16 and a Megatron tp2 pp2 checkpoint on local disk, starts the loopback S3
server of the tests (tests/object_storage/s3_server.py, which counts what it receives), and for
each checkpoint compares
  - vmerge disk -> bucket (each rank sends its own parts),
  - vmerge bucket -> bucket (the checkpoint uploaded first; reads and writes both through the store),
  - the copy-up way: vmerge to local disk, then every file uploaded with boto3's managed transfer
    (what `aws s3 cp --recursive` does: 8 MiB multipart chunks, 10 threads).
It prints bytes sent to the store per byte of the output, requests per GiB of the output, and
the wall times. Run with build/s3-venv/bin/python.

    bench_s3_output.py --vmerge build/vmerge-mpi [--size-gb 0.5] [--np 2] [--work /tmp/vmerge-bench-s3-out]
                       [--ways d2b,b2b,up] [--checkpoints fsdp_bf16,megatron_tp2_pp2]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/object_storage"))
from s3_merge_cases import BUCKET, Server, bucket_client, server_env, upload  # noqa: E402



def stored_bytes(client, prefix):
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return sum(o["Size"] for page in pages for o in page.get("Contents", []))


def measured(server, run):
    """(seconds, bytes sent to the store, bytes received from it, requests) of `run()`."""
    server.test_call("/_test/reset", "POST")
    start = time.monotonic()
    run()
    seconds = time.monotonic() - start
    stats = server.test_call("/_test/stats")
    return (seconds, sum(s["bytes_from_client"] for s in stats.values()),
            sum(s["bytes_to_client"] for s in stats.values()), sum(s["requests"] for s in stats.values()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmerge", required=True)
    ap.add_argument("--size-gb", type=float, default=0.5)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--work", default="/tmp/vmerge-bench-s3-out")
    ap.add_argument("--ways", default="d2b,b2b,up", help="disk->bucket, bucket->bucket, merge to disk + upload")
    ap.add_argument("--checkpoints", default="fsdp_bf16,megatron_tp2_pp2")
    args = ap.parse_args()
    source = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    server = Server(source, args.work)
    env = server_env(server, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    try:
        client = bucket_client(server)
        launch = ["mpiexec", "--oversubscribe", "-np", str(args.np), args.vmerge, "merge", "--quiet"]
        gen = "/usr/bin/python3"
        checkpoints = {
            "fsdp_bf16": ([gen, os.path.join(source, "scripts/bench/make_bench_checkpoint.py"), "--size-gb", str(args.size_gb),
                           "--world", "4", "--dtype", "bf16"], ""),
            "megatron_tp2_pp2": ([gen, os.path.join(source, "scripts/bench/make_bench_megatron.py"), "--size-gb",
                                  str(args.size_gb)], "actor"),
        }
        print("| checkpoint | way | output bytes | bytes sent / byte of output | requests | requests per GiB of output | wall |")
        print("|---|---|---|---|---|---|---|")
        for name, (command, sub) in checkpoints.items():
            if name not in args.checkpoints.split(","):
                continue
            folder = os.path.join(args.work, name)
            subprocess.run(command[:2] + [folder] + command[2:], check=True, stdout=subprocess.DEVNULL)
            local_dir = os.path.join(folder, sub) if sub else folder
            upload(client, local_dir, "ckpt/" + name)
            out = os.path.join(args.work, name + ".out")

            def copy_up():
                subprocess.run(launch + ["--local_dir", local_dir, "--target_dir", out], env=env, check=True)
                for root, _, files in os.walk(out):
                    for f in files:
                        path = os.path.join(root, f)
                        client.upload_file(path, BUCKET, f"up/{name}/" + os.path.relpath(path, out))

            ways = [
                ("d2b", "vmerge disk -> bucket", f"d2b/{name}", lambda: subprocess.run(
                    launch + ["--local_dir", local_dir, "--target_dir", f"s3://{BUCKET}/d2b/{name}"], env=env, check=True)),
                ("b2b", "vmerge bucket -> bucket", f"b2b/{name}", lambda: subprocess.run(
                    launch + ["--local_dir", f"s3://{BUCKET}/ckpt/{name}", "--target_dir", f"s3://{BUCKET}/b2b/{name}"],
                    env=env, check=True)),
                ("up", "merge to disk + boto3 upload", f"up/{name}", copy_up),
            ]
            for key, way, prefix, run in ways:
                if key not in args.ways.split(","):
                    continue
                seconds, sent, _, requests = measured(server, run)
                written = stored_bytes(client, prefix)
                print(f"| {name} | {way} | {written} | {sent / written:.4f} | {requests} | "
                      f"{requests / (written / 2**30):.0f} | {seconds:.1f} s |", flush=True)
            shutil.rmtree(folder)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
