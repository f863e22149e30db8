#!/usr/bin/env python3
"""Bytes and requests of a merge from a bucket (docs/performance.md, "s3:// input"): generates an
FSDP bf16 and a Megatron tp2 pp2 checkpoint, uploads each to the loopback S3 server of the tests
(tests/object_storage/s3_server.py, which counts what it serves), merges it from the bucket, and
prints bytes served per byte written, requests per GiB written, and the wall time against
download-everything (boto3) + local merge. Run with build/s3-venv/bin/python.

    bench_s3.py --vmerge build/vmerge-mpi [--size-gb 0.5] [--np 2] [--work /tmp/vmerge-bench-s3]
"""
import argparse
import os
import shutil
import subprocess
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/object_storage"))
from s3_merge_cases import BUCKET, Server, bucket_client, server_env, upload  # noqa: E402



def output_bytes(folder):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs if f.endswith(".safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vmerge", required=True)
    ap.add_argument("--size-gb", type=float, default=0.5)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--work", default="/tmp/vmerge-bench-s3")
    args = ap.parse_args()
    source = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    server = Server(source, args.work)
    env = server_env(server, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    client = bucket_client(server)
    launch = ["mpiexec", "--oversubscribe", "-np", str(args.np), args.vmerge, "merge", "--quiet"]
    gen = "/usr/bin/python3"
    checkpoints = {
        "fsdp_bf16": ([gen, os.path.join(source, "scripts/bench/make_bench_checkpoint.py"), "--size-gb", str(args.size_gb),
                       "--world", "4", "--dtype", "bf16"], ""),
        "megatron_tp2_pp2": ([gen, os.path.join(source, "scripts/bench/make_bench_megatron.py"), "--size-gb",
                              str(args.size_gb)], "actor"),
    }
    print(f"| checkpoint | output bytes | bytes served / byte written | requests | requests per GiB written | "
          f"vmerge from the bucket | download + local merge |")
    print("|---|---|---|---|---|---|---|")
    for name, (command, sub) in checkpoints.items():
        folder = os.path.join(args.work, name)
        subprocess.run(command[:2] + [folder] + command[2:], check=True, stdout=subprocess.DEVNULL)
        local_dir = os.path.join(folder, sub) if sub else folder
        upload(client, local_dir, name)
        server.test_call("/_test/reset", "POST")
        out = os.path.join(args.work, name + ".out")
        start = time.monotonic()
        subprocess.run(launch + ["--local_dir", f"s3://{BUCKET}/{name}", "--target_dir", out], env=env, check=True)
        direct = time.monotonic() - start
        stats = server.test_call("/_test/stats")
        served = sum(s["bytes_to_client"] for s in stats.values())
        requests = sum(s["requests"] for s in stats.values())
        written = output_bytes(out)
        # The copy-down way: every object to local disk, then a local merge.
        start = time.monotonic()
        down = os.path.join(args.work, name + ".down")
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=name + "/"):
            for o in page.get("Contents", []):
                path = os.path.join(down, os.path.relpath(o["Key"], name))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                client.download_file(BUCKET, o["Key"], path)
        subprocess.run(launch + ["--local_dir", down, "--target_dir", out + ".2"], env=env, check=True)
        copied = time.monotonic() - start
        print(f"| {name} | {written} | {served / written:.4f} | {requests} | {requests / (written / 2**30):.0f} | "
              f"{direct:.1f} s | {copied:.1f} s |", flush=True)
        shutil.rmtree(folder)
        shutil.rmtree(down)
    server.stop()


if __name__ == "__main__":
    main()
