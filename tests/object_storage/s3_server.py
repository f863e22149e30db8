#!/usr/bin/env python3
"""An S3-compatible server on loopback for the s3:// tests: moto's S3 emulation behind a WSGI
layer that checks every request's SigV4 signature the way AWS does (moto's own check is off by
default and, once on, rebuilds the request from its decoded URL), so a request vmerge signs
wrongly fails here as it would on AWS. The layer also counts requests and bytes (GET
/_test/stats, POST /_test/reset) for docs/performance.md, and can answer the first N requests
with 503 SlowDown (POST /_test/throttle?count=N) to exercise the retries, or deny one UploadPart
with 403 AccessDenied after N have gone through (POST /_test/deny_part?after=N), a failure in the
middle of a merge into the bucket. Run with S3_UPLOAD_PART_MIN_SIZE=<bytes> in the environment,
moto takes parts smaller than S3's 5 MiB (the tests' models are small).

    s3_server.py --port P [--access-key K --secret-key S]   prints "ready" when listening
"""
import argparse
import hashlib
import hmac
import io
import json
import sys
import threading
import urllib.parse

from werkzeug.serving import make_server
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~"


def aws_encode(text, keep_slash):
    safe = UNRESERVED + ("/" if keep_slash else "")
    return urllib.parse.quote(text, safe=safe)


def error(start_response, status, code, message):
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>").encode()
    start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


class SigV4Check:
    def __init__(self, app, access_key, secret_key):
        self.app, self.access_key, self.secret_key = app, access_key, secret_key
        self.lock = threading.Lock()
        self.stats = {}
        self.throttle = 0
        self.deny_part_after = -1  # UploadParts to let through before one is denied; -1: none

    def count(self, method, sent, received):
        with self.lock:
            s = self.stats.setdefault(method, {"requests": 0, "bytes_to_client": 0, "bytes_from_client": 0})
            s["requests"] += 1
            s["bytes_to_client"] += sent
            s["bytes_from_client"] += received

    def test_endpoint(self, environ, start_response):
        path, method = environ["PATH_INFO"], environ["REQUEST_METHOD"]
        with self.lock:
            if path == "/_test/stats":
                body = json.dumps(self.stats).encode()
            elif path == "/_test/reset" and method == "POST":
                self.stats = {}
                body = b"{}"
            elif path == "/_test/deny_part" and method == "POST":
                self.deny_part_after = int(urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))["after"][0])
                body = b"{}"
            elif path == "/_test/throttle" and method == "POST":
                self.throttle = int(urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))["count"][0])
                body = b"{}"
            else:
                return error(start_response, "404 Not Found", "NoSuchTestEndpoint", path)
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def signature_problem(self, environ, body):
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return "403 Forbidden", "AccessDenied", "no SigV4 Authorization header"
        fields = dict(part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 "):].split(","))
        akid, date, region, service, terminal = fields["Credential"].split("/")
        if akid != self.access_key:
            return "403 Forbidden", "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records."
        payload_hash = environ.get("HTTP_X_AMZ_CONTENT_SHA256")
        if payload_hash is None:
            return "400 Bad Request", "InvalidRequest", "Missing required header for this request: x-amz-content-sha256"
        if payload_hash != "UNSIGNED-PAYLOAD" and payload_hash != hashlib.sha256(body).hexdigest():
            return "400 Bad Request", "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
        raw = environ.get("REQUEST_URI") or environ.get("RAW_URI")
        raw_path, _, raw_query = raw.partition("?")
        canonical_uri = aws_encode(urllib.parse.unquote(raw_path), True)
        pairs = [p.partition("=") for p in raw_query.split("&") if p]
        canonical_query = "&".join(sorted(
            aws_encode(urllib.parse.unquote(k), False) + "=" + aws_encode(urllib.parse.unquote(v), False)
            for k, _, v in pairs))
        signed = fields["SignedHeaders"].split(";")
        lines = []
        for name in signed:
            key = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}.get(
                name, "HTTP_" + name.upper().replace("-", "_"))
            lines.append(name + ":" + " ".join(environ.get(key, "").split()) + "\n")
        canonical = "\n".join([environ["REQUEST_METHOD"], canonical_uri, canonical_query, "".join(lines),
                               fields["SignedHeaders"], payload_hash])
        scope = f"{date}/{region}/{service}/{terminal}"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", environ.get("HTTP_X_AMZ_DATE", ""), scope,
                             hashlib.sha256(canonical.encode()).hexdigest()])
        key = ("AWS4" + self.secret_key).encode()
        for part in (date, region, service, terminal):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, fields["Signature"]):
            return "403 Forbidden", "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided."
        return None

    def __call__(self, environ, start_response):
        if environ["PATH_INFO"].startswith("/_test/"):
            return self.test_endpoint(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        method = environ["REQUEST_METHOD"]
        with self.lock:
            throttled = self.throttle > 0
            self.throttle -= 1 if throttled else 0
        if throttled:
            self.count(method, 0, len(body))
            return error(start_response, "503 Slow Down", "SlowDown", "Please reduce your request rate.")
        if method == "PUT" and "partNumber=" in environ.get("QUERY_STRING", ""):
            with self.lock:
                denied = self.deny_part_after == 0
                self.deny_part_after -= 1 if self.deny_part_after >= 0 else 0
            if denied:
                self.count(method, 0, len(body))
                return error(start_response, "403 Forbidden", "AccessDenied", "UploadPart denied by the test.")
        problem = self.signature_problem(environ, body)
        if problem:
            self.count(method, 0, len(body))
            return error(start_response, *problem)
        chunks = list(self.app(environ, start_response))
        self.count(method, sum(len(c) for c in chunks), len(body))
        return chunks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--access-key", default="vmerge-test-key")
    parser.add_argument("--secret-key", default="vmerge-test-secret")
    args = parser.parse_args()
    app = DomainDispatcherApplication(create_backend_app)
    server = make_server("127.0.0.1", args.port, SigV4Check(app, args.access_key, args.secret_key), threaded=True)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
