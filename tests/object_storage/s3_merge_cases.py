#!/usr/bin/env python3
"""Merges from an S3-compatible bucket (s3_server.py on loopback, which checks every SigV4
signature) and checks each result bit for bit against the same merge from disk and against the
generator's reference; a rank killed mid-merge, then --resume; then the failures a user meets:
wrong secret, unknown key id, missing bucket, missing prefix, no credentials, and throttling
(503 SlowDown) that retries absorb.
Every message must name the s3:// URL, and no output may contain the secret.

The checkpoints are uploaded with boto3 (an independent client); the oracle is the generator's
reference folder and vmerge's own merge of the same files from disk.

    s3_merge_cases.py --vmerge BIN --mpiexec MPIEXEC --source SRC --fixtures BUILD/fixtures --work DIR
"""
import argparse
import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import boto3

ACCESS_KEY, SECRET_KEY = "vmerge-test-key", "vmerge-test-secret-7f3a"
BUCKET = "vmerge-ckpt"
# (fixture set, case) pairs of the generators' cases.json: FSDP, Megatron legacy, Megatron
# torch_dist, DeepSpeed ZeRO, torchtitan (a run folder: the latest step-N found by listing).
CASES = [("fsdp", "fp32_to_bf16_w2"), ("megatron", "mlm_llama_tp2_pp2"),
         ("megatron", "mlm_distckpt_deepseekv3_tp2"), ("deepspeed", "zero2_bf16_w3"), ("torchtitan", "tt_llama3_last")]
# verl layout v2 run folders (no cases.json; the fields as tests/integration/verl_v2_cases.sh uses them).
VERL_V2 = {"verl_v2_dist_run": {"local_dir": "dist_run", "hf_config": "base_model", "reference": "reference_step20"},
           "verl_v2_hf_run": {"local_dir": "hf_run", "reference": "reference_hf"},
           # LoRA: adapter-only rank files, the base model from --lora_base (in the bucket too),
           # folded; compared with the merge from disk only (the fold's reference is within ulps).
           "verl_v2_fsdp_lora": {"local_dir": "fsdp_lora_run", "lora_base": "fsdp_lora_base", "reference": "",
                                 "merge_args": ["--merge_lora"]}}


def case_fields(fixtures, kind, case):
    if kind == "verl_v2":
        return VERL_V2[case]
    return json.load(open(os.path.join(fixtures, kind, "cases.json")))[case]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, source, work):
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(work, "s3_server.log"), "w")
        self.proc = subprocess.Popen([sys.executable, os.path.join(source, "tests/object_storage/s3_server.py"),
                                      "--port", str(self.port), "--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise SystemExit("the S3 test server did not start (see s3_server.log)")

    def test_call(self, path, method="GET"):
        request = urllib.request.Request(self.endpoint + path, method=method)
        with urllib.request.urlopen(request) as r:
            return json.loads(r.read())

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def upload(client, folder, prefix):
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            client.upload_file(path, BUCKET, prefix + "/" + os.path.relpath(path, folder))


def same_folders(a, b):
    names_a = sorted(os.path.relpath(os.path.join(r, f), a) for r, _, fs in os.walk(a) for f in fs)
    names_b = sorted(os.path.relpath(os.path.join(r, f), b) for r, _, fs in os.walk(b) for f in fs)
    if names_a != names_b:
        return f"different files: {names_a} vs {names_b}"
    for name in names_a:
        if not filecmp.cmp(os.path.join(a, name), os.path.join(b, name), shallow=False):
            return f"{name} differs"
    return ""


def server_env(server, **extra):
    """What a vmerge run against the test server gets: its keys and endpoint, and none of the
    caller's AWS settings or files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY, AWS_ENDPOINT_URL_S3=server.endpoint,
               AWS_REGION="us-east-1", AWS_SHARED_CREDENTIALS_FILE=os.devnull, AWS_CONFIG_FILE=os.devnull, **extra)
    return env


def bucket_client(server):
    """A boto3 client of the test server, with the test bucket created."""
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1",
                          aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
    client.create_bucket(Bucket=BUCKET)
    return client


def case_args(flags):
    """The test script's flags (each required, and --checker-python), with --work made empty."""
    parser = argparse.ArgumentParser()
    for flag in flags:
        parser.add_argument(flag, required=True)
    parser.add_argument("--checker-python", default="/usr/bin/python3")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    return args


class Runner:
    def __init__(self, args, env):
        self.args, self.env, self.failures = args, env, []

    def vmerge(self, np, *argv, env=None):
        command = [self.args.mpiexec, "--oversubscribe", "-np", str(np), self.args.vmerge, *argv]
        return subprocess.run(command, env=env or self.env, capture_output=True, text=True, timeout=600)

    def check(self, ok, what):
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)

    def exit_status(self):
        if self.failures:
            print(f"{len(self.failures)} failed")
            return 1
        print("all passed")
        return 0

    def expect_error(self, what, argv, needles, env=None):
        r = self.vmerge(1, *argv, env=env)
        out = r.stdout + r.stderr
        missing = [n for n in needles if n not in out]
        self.check(r.returncode != 0 and not missing and SECRET_KEY not in out,
                   f"{what}: fails naming {needles}" + (f" (missing {missing}; output: {out.strip()[-600:]})" if missing or r.returncode == 0 else ""))


def merge_cases(run, fixtures, work, client):
    for kind, case in CASES + [("verl_v2", name) for name in VERL_V2]:
        fields = case_fields(fixtures, kind, case)
        local_dir = os.path.join(fixtures, kind, fields.get("local_dir", case))
        prefix = f"{kind}/{case}"
        upload(client, local_dir, prefix + "/ckpt")
        extra = list(fields.get("merge_args", []))
        s3_extra = list(extra)
        if fields.get("hf_config"):
            hf = os.path.join(fixtures, kind, fields["hf_config"])
            upload(client, hf, prefix + "/hf")
            extra += ["--hf_config", hf]
            s3_extra += ["--hf_config", f"s3://{BUCKET}/{prefix}/hf"]
        if fields.get("lora_base"):
            base = os.path.join(fixtures, kind, fields["lora_base"])
            upload(client, base, prefix + "/base")
            extra += ["--lora_base", base]
            s3_extra += ["--lora_base", f"s3://{BUCKET}/{prefix}/base"]
        reference = fields.get("reference", case + ".reference")
        for np in (1, 3):
            # vmerge.checksums.json records each rank's blocks: compared with a merge of as many ranks.
            from_disk = os.path.join(work, f"{case}.disk" + ("" if np == 1 else f".np{np}"))
            r = run.vmerge(np, "merge", "--local_dir", local_dir, "--target_dir", from_disk, *extra, "--quiet")
            run.check(r.returncode == 0, f"{case}: merge from disk, {np} ranks" + ("" if r.returncode == 0 else ": " + r.stderr[-800:]))
            out = os.path.join(work, f"{case}.s3.np{np}")
            r = run.vmerge(np, "merge", "--local_dir", f"s3://{BUCKET}/{prefix}/ckpt", "--target_dir", out, *s3_extra, "--quiet")
            if r.returncode != 0:
                run.check(False, f"{case}: bucket -> disk, {np} ranks: {r.stderr[-1500:]}")
                continue
            difference = same_folders(from_disk, out)
            run.check(not difference, f"{case}: bucket -> disk, {np} ranks, same bytes as from disk {difference}")
            if not reference:
                shutil.rmtree(out)
                continue
            checker = subprocess.run([run.args.checker_python, os.path.join(run.args.source, "tests/tools/check_hf_output.py"),
                                      "--out", out, "--ref", os.path.join(fixtures, kind, reference)],
                                     capture_output=True, text=True)
            run.check(checker.returncode == 0, f"{case}: {np} ranks, against the generator's reference: {checker.stdout.strip()[-300:]}")
            shutil.rmtree(out)


def kill_and_resume(run, work, client):
    """A rank killed while the ranks write (each block slowed by the test hook); --resume then
    finishes from the staging folder, reading the rest from the bucket, bit for bit as an
    uninterrupted merge of as many ranks from disk."""
    example = os.path.join(run.args.source, "examples/tiny-qwen2-fsdp/global_step_1/actor")
    upload(client, example, "example/actor")
    args = ["--max-shard-size", "1MB", "--max-memory", "1MiB", "--quiet"]
    straight = os.path.join(work, "example.disk")
    r = run.vmerge(3, "merge", "--local_dir", example, "--target_dir", straight, *args)
    run.check(r.returncode == 0, "example: uninterrupted merge from disk")
    target = os.path.join(work, "killed")
    journal = os.path.join(work, ".killed.vmerge-staging", ".vmerge-journal")
    env = dict(run.env, VMERGE_TEST_BLOCK_DELAY_MS="150")
    command = [run.args.mpiexec, "--oversubscribe", "-np", "3", run.args.vmerge, "merge", "--local_dir",
               f"s3://{BUCKET}/example/actor", "--target_dir", target, *args]
    launcher = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 60
    lines = 0
    while time.monotonic() < deadline and lines < 3:
        time.sleep(0.05)
        if os.path.isdir(journal):
            lines = sum(sum(1 for _ in open(os.path.join(journal, f))) for f in os.listdir(journal) if f.startswith("rank-"))
    pids = subprocess.run(["pgrep", "-f", f"vmerge-mpi merge .*--target_dir {target}"], capture_output=True, text=True).stdout.split()
    if lines < 3 or len(pids) < 2:
        launcher.kill()
        run.check(False, f"kill during a merge from the bucket: never started writing ({lines} journal lines, {len(pids)} ranks)")
        return
    os.kill(int(pids[1]), 9)
    launcher.wait(timeout=120)
    run.check(launcher.returncode != 0 and not os.path.exists(target) and os.path.isdir(journal),
              "a rank killed during a merge from the bucket: it fails, no target, the staging folder kept")
    r = run.vmerge(3, "merge", "--local_dir", f"s3://{BUCKET}/example/actor", "--target_dir", target, *args, "--resume")
    difference = same_folders(straight, target) if r.returncode == 0 else r.stderr[-800:]
    run.check(not difference, f"--resume from the bucket: same bytes as the uninterrupted merge {difference}")


def failure_cases(run, work, server):
    target = os.path.join(work, "failed")
    ckpt = f"s3://{BUCKET}/fsdp/fp32_to_bf16_w2/ckpt"
    wrong_secret = dict(run.env, AWS_SECRET_ACCESS_KEY="not-the-secret-123")
    run.expect_error("wrong secret", ["merge", "--local_dir", ckpt, "--target_dir", target],
                     ["s3://" + BUCKET, "HTTP 403", "SignatureDoesNotMatch"], env=wrong_secret)
    wrong_id = dict(run.env, AWS_ACCESS_KEY_ID="AKIDUNKNOWN")
    run.expect_error("unknown access key id", ["merge", "--local_dir", ckpt, "--target_dir", target],
                     ["HTTP 403", "InvalidAccessKeyId", "the environment"], env=wrong_id)
    run.expect_error("missing bucket", ["merge", "--local_dir", "s3://no-such-bucket-x/ckpt", "--target_dir", target],
                     ["s3://no-such-bucket-x", "HTTP 404", "NoSuchBucket"])
    run.expect_error("missing prefix", ["merge", "--local_dir", f"s3://{BUCKET}/no/such/run", "--target_dir", target],
                     [f"s3://{BUCKET}/no/such/run: no object has this prefix"])
    run.expect_error("missing HF config object", ["merge", "--local_dir", ckpt, "--target_dir", target,
                                                 "--hf_config", f"s3://{BUCKET}/nothing-here"],
                     [f"s3://{BUCKET}/nothing-here/config.json"])
    no_keys = {k: v for k, v in run.env.items() if not k.startswith("AWS_ACCESS") and not k.startswith("AWS_SECRET")}
    no_keys["AWS_SHARED_CREDENTIALS_FILE"] = os.path.join(work, "no-credentials")
    no_keys["AWS_CONFIG_FILE"] = os.path.join(work, "no-config")
    run.expect_error("no credentials", ["merge", "--local_dir", ckpt, "--target_dir", target],
                     ["no S3 credentials", "AWS_ACCESS_KEY_ID"], env=no_keys)
    run.expect_error("verify of a bucket (merge alone writes one)", ["verify", "--target_dir", f"s3://{BUCKET}/out"],
                     [f"--target_dir s3://{BUCKET}/out: verify takes a local folder"])
    run.check(not os.path.exists(target) and not os.path.exists("s3:"), "the failed merges left no target folder")

    # Credentials from a profile of the shared files, the endpoint from the profile's config.
    with open(os.path.join(work, "credentials"), "w") as f:
        f.write(f"[default]\naws_access_key_id = wrong\n\n[vmerge-test]\naws_access_key_id = {ACCESS_KEY}\n"
                f"aws_secret_access_key = {SECRET_KEY}\n")
    with open(os.path.join(work, "config"), "w") as f:
        f.write(f"[profile vmerge-test]\nregion = eu-west-3\nendpoint_url = {server.endpoint}\ns3 =\n  addressing_style = path\n")
    profile_env = {k: v for k, v in no_keys.items() if not k.startswith("AWS_ENDPOINT")}
    profile_env.update(AWS_PROFILE="vmerge-test", AWS_SHARED_CREDENTIALS_FILE=os.path.join(work, "credentials"),
                       AWS_CONFIG_FILE=os.path.join(work, "config"))
    out = os.path.join(work, "from-profile")
    r = run.vmerge(1, "merge", "--local_dir", ckpt, "--target_dir", out, "--quiet", env=profile_env)
    run.check(r.returncode == 0 and not same_folders(os.path.join(work, "fp32_to_bf16_w2.disk"), out),
              "credentials, region and endpoint from a named profile" + ("" if r.returncode == 0 else ": " + r.stderr[-600:]))

    # Throttling: the first requests answered 503 SlowDown; the retries absorb them.
    server.test_call("/_test/throttle?count=4", "POST")
    out = os.path.join(work, "throttled")
    r = run.vmerge(1, "merge", "--local_dir", ckpt, "--target_dir", out, "--quiet")
    run.check(r.returncode == 0 and not same_folders(os.path.join(work, "fp32_to_bf16_w2.disk"), out),
              "4 throttled requests retried" + ("" if r.returncode == 0 else ": " + r.stderr[-600:]))
    server.test_call("/_test/throttle?count=100", "POST")
    run.expect_error("throttled beyond the retries", ["merge", "--local_dir", ckpt, "--target_dir", target],
                     ["HTTP 503", "SlowDown", "attempts"])
    server.test_call("/_test/throttle?count=0", "POST")


def main():
    args = case_args(("--vmerge", "--mpiexec", "--source", "--fixtures", "--work"))
    server = Server(args.source, args.work)
    env = server_env(server)
    try:
        client = bucket_client(server)
        run = Runner(args, env)
        merge_cases(run, args.fixtures, args.work, client)
        kill_and_resume(run, args.work, client)
        failure_cases(run, args.work, server)
    finally:
        server.stop()
    return run.exit_status()


if __name__ == "__main__":
    sys.exit(main())
