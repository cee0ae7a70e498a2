#!/usr/bin/env python3
"""Bounded soak of airlock (CASES-style, by hand, not in CI): mixed pass/stage/deny traffic
at a steady rate through the proxy for a few minutes, sampling airlock's RSS and open file
descriptors. Loopback only; stops by itself.

    cargo build --release -p airlock
    python3 tests/soak/soak.py [--airlock target/release/airlock] [--seconds 180] [--rate 200]
"""
import argparse, http.server, json, os, socket, subprocess, sys, tempfile, threading, time, urllib.request


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _reply(self, code, body):
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._reply(200, json.dumps({"path": self.path, "rows": list(range(50))}).encode())

    def do_POST(self):
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        self._reply(201, b'{"ok":true}')

    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) // 1024
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return rss, fds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--airlock", default="target/release/airlock")
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--rate", type=int, default=200, help="requests per second, all kinds")
    args = ap.parse_args()

    port = free_port()
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", port), Origin)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    work = tempfile.mkdtemp(prefix="airlock-soak-")
    policy = os.path.join(work, "policy.toml")
    with open(policy, "w") as f:
        f.write(f"""version = 1
allow_private = ["127.0.0.0/8"]
[[rule]]
id = "deny"
host = "127.0.0.1"
port = {port}
scheme = "http"
path = "/denied/**"
action = "deny"
[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
scheme = "http"
method = "read"
action = "pass"
[[rule]]
id = "writes"
host = "127.0.0.1"
port = {port}
scheme = "http"
method = "write"
action = "stage"
""")
    data = os.path.join(work, "data")
    server = subprocess.Popen([args.airlock, "serve", "--data", data, "--policy", policy,
                               "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"],
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                addresses = json.load(open(os.path.join(data, "addresses.json")))
                if addresses["pid"] == server.pid:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        token = open(os.path.join(data, "admin.token")).read().strip()
        request = urllib.request.Request(addresses["admin"] + "/v1/runs", data=b"{}", method="POST",
                                         headers={"authorization": f"Bearer {token}"})
        run = json.load(urllib.request.urlopen(request))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": run["proxy_url"]}))
        base = f"http://127.0.0.1:{port}"
        counts = {"pass": 0, "stage": 0, "deny": 0, "error": 0}
        samples = []
        started = time.time()
        next_sample = started
        i = 0
        while time.time() - started < args.seconds:
            kind = ("pass", "pass", "stage", "deny")[i % 4]
            try:
                if kind == "pass":
                    opener.open(f"{base}/read/{i % 97}", timeout=10).read()
                elif kind == "stage":
                    opener.open(urllib.request.Request(f"{base}/hook/{i}", data=b'{"n": %d}' % i), timeout=10).read()
                else:
                    opener.open(f"{base}/denied/{i}", timeout=10).read()
                counts[kind] += 1
            except urllib.error.HTTPError as e:
                counts["deny" if e.code == 403 and kind == "deny" else "error"] += 1
            except Exception:
                counts["error"] += 1
            i += 1
            target = started + i / args.rate
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            if time.time() >= next_sample:
                rss, fds = sample(server.pid)
                samples.append((round(time.time() - started), rss, fds))
                next_sample += 10
        rss, fds = sample(server.pid)
        samples.append((round(time.time() - started), rss, fds))
        elapsed = time.time() - started
        print(f"soak: {elapsed:.0f} s, {i / elapsed:.0f} req/s achieved (target {args.rate}; one client); requests: {counts}")
        print("  t(s)  RSS(MiB)  fds")
        for t, rss, fds in samples:
            print(f"  {t:>4}  {rss:>8}  {fds:>3}")
        first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
        print(f"RSS {first[1]} -> {last[1]} MiB after warm-up; fds {first[2]} -> {last[2]}")
        return 0 if counts["error"] == 0 else 1
    finally:
        server.terminate()
        server.wait(timeout=20)
        origin.shutdown()


if __name__ == "__main__":
    sys.exit(main())
