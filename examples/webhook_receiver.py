#!/usr/bin/env python3
"""A local receiver for orca's completion webhooks, to try them (docs/webhooks.md).

    ORCA_WEBHOOKS__SECRET=... python3 examples/webhook_receiver.py 127.0.0.1:9999 [--once]

Listens on the address, answers each POST 204, and prints one line per delivery: the path, whether
the `Orca-Signature` verifies with ORCA_WEBHOOKS__SECRET (HMAC-SHA256 over `<t>.<body>`, `t` at
most five minutes off), the run's id, status and output. With `--once` it exits after the first.
Standard library only.
"""

import hashlib
import hmac
import http.server
import json
import os
import sys
import time


def verified(secret: bytes, header: str, body: bytes) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    if "t" not in parts or "v1" not in parts:
        return False
    mac = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(parts["t"])) < 300
    return fresh and hmac.compare_digest(mac, parts["v1"])


class Receiver(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        secret = os.environ.get("ORCA_WEBHOOKS__SECRET", "").encode()
        signature = self.headers.get("orca-signature", "")
        ok = "ok" if secret and verified(secret, signature, body) else "NOT VERIFIED"
        run = json.loads(body).get("run", {})
        output = json.dumps(run.get("output"), ensure_ascii=False)
        self.send_response(204)
        self.end_headers()
        print(f"POST {self.path}: signature {ok}, run {run.get('id')} {run.get('status')}: {output}",
              flush=True)

    def log_message(self, *args):
        pass  # one line per delivery is enough


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: webhook_receiver.py HOST:PORT [--once]")
    host, port = sys.argv[1].rsplit(":", 1)
    server = http.server.HTTPServer((host, int(port)), Receiver)
    if "--once" in sys.argv[2:]:
        server.handle_request()
    else:
        server.serve_forever()


if __name__ == "__main__":
    main()
