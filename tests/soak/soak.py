#!/usr/bin/env python3
"""Bounded soak of airlock (CASES-style, by hand, not in CI): mixed pass/stage/deny traffic
at a steady rate through the proxy for a few minutes, sampling airlock's RSS and open file
descriptors. Loopback only; stops by itself.

    cargo build --release -p airlock
    python3 tests/soak/soak.py [--airlock target/release/airlock] [--seconds 180] [--rate 200]
        [--clients 1] [--https] [--wrap "heaptrack -o /tmp/airlock.heap"]
        [--serve-args="--ledger-cache-mib 8"] [--keep]

Each client is a thread; urllib opens a new connection for every request (with --https a
new CONNECT and TLS handshake with airlock too), so the soak also churns connections.
--rate is shared among the clients (one reaches ~40 req/s here, so a higher rate needs
several). A request counts only with the answer its kind must get (pass: the origin's 200,
stage: airlock's 202, deny: 403), and at the end the run must hold exactly the effects
staged. The exit status is 0 only with no error. --wrap runs airlock under a profiler (the
string is split on spaces and put before the command).
"""
import argparse, http.server, json, os, shutil, socket, ssl, subprocess, sys, tempfile, threading, time, urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--airlock", default=os.path.join(REPO, "target", "release", "airlock"),
                    help="the airlock binary [default: this checkout's target/release/airlock]")
    ap.add_argument("--seconds", type=int, default=180, help="how long to send traffic")
    ap.add_argument("--rate", type=int, default=200, help="requests per second, all kinds, all clients")
    ap.add_argument("--clients", type=int, default=1, help="client threads sharing --rate")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (ledger, logs, keys)")
    ap.add_argument("--wrap", default="", help="command put before airlock, e.g. a profiler")
    ap.add_argument("--https", action="store_true",
                    help="an HTTPS origin: every request is a CONNECT that airlock intercepts (needs openssl)")
    ap.add_argument("--serve-args", default="",
                    help='more arguments for airlock serve, split on spaces: --serve-args="--ledger-cache-mib 8"')
    args = ap.parse_args()
    for name in ("seconds", "rate", "clients"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if not os.access(args.airlock, os.X_OK):
        ap.error(f"no airlock binary at {args.airlock}: run `cargo build --release -p airlock` or pass --airlock")

    port = free_port()
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", port), Origin)
    work = tempfile.mkdtemp(prefix="airlock-soak-")
    scheme, upstream = "http", []
    if args.https:
        # A throwaway CA and an origin certificate for 127.0.0.1 it issues; airlock alone trusts the CA.
        def at(name):
            return os.path.join(work, name)
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        with open(at("origin.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
        for command in (
            ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=airlock soak CA", "-keyout", at("ca.key"), "-out", at("ca.pem")],
            ["req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", at("origin.key"), "-out", at("origin.csr")],
            ["x509", "-req", "-in", at("origin.csr"), "-CA", at("ca.pem"), "-CAkey", at("ca.key"), "-set_serial", "1",
             "-days", "2", "-extfile", at("origin.ext"), "-out", at("origin.pem")],
        ):
            subprocess.run(["openssl", *command], check=True, capture_output=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(at("origin.pem"), at("origin.key"))
        origin.socket = context.wrap_socket(origin.socket, server_side=True)
        scheme, upstream = "https", ["--upstream-ca", at("ca.pem")]
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    policy = os.path.join(work, "policy.toml")
    with open(policy, "w") as f:
        f.write(f"""version = 1
allow_private = ["127.0.0.0/8"]
[[rule]]
id = "deny"
host = "127.0.0.1"
port = {port}
scheme = "{scheme}"
path = "/denied/**"
action = "deny"
[[rule]]
id = "reads"
host = "127.0.0.1"
port = {port}
scheme = "{scheme}"
method = "read"
action = "pass"
[[rule]]
id = "writes"
host = "127.0.0.1"
port = {port}
scheme = "{scheme}"
method = "write"
action = "stage"
""")
    data = os.path.join(work, "data")
    log = open(os.path.join(work, "airlock.log"), "w")
    server = subprocess.Popen(args.wrap.split() + [args.airlock, "serve", "--data", data, "--policy", policy,
                               "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"] + upstream + args.serve_args.split(),
                              stderr=log)
    try:
        addresses = None
        for _ in range(400):
            try:
                found = json.load(open(os.path.join(data, "addresses.json")))
                if found["pid"] == server.pid or (args.wrap and found["pid"]):
                    addresses = found
                    break
            except (OSError, ValueError, KeyError):
                pass
            if server.poll() is not None:
                break
            time.sleep(0.05)
        if addresses is None:
            log.flush()
            tail = open(log.name, errors="replace").read()[-2000:]
            print(f"airlock did not start (exit status {server.poll()}); its log:\n{tail}", file=sys.stderr)
            return 2
        token = open(os.path.join(data, "admin.token")).read().strip()
        request = urllib.request.Request(addresses["admin"] + "/v1/runs", data=b"{}", method="POST",
                                         headers={"authorization": f"Bearer {token}"})
        run = json.load(urllib.request.urlopen(request))
        pid = addresses["pid"]
        base = f"{scheme}://127.0.0.1:{port}"
        counts = {"pass": 0, "stage": 0, "deny": 0, "error": 0}
        lock = threading.Lock()
        first_error = []
        started = time.time()

        expected = {"pass": 200, "stage": 202, "deny": 403}

        def client(c):
            handlers = [urllib.request.ProxyHandler({"http": run["proxy_url"], "https": run["proxy_url"]})]
            if args.https:
                trust = ssl.create_default_context(cafile=os.path.join(data, "ca.pem"))
                handlers.append(urllib.request.HTTPSHandler(context=trust))
            opener = urllib.request.build_opener(*handlers)
            i, rate = c, args.rate / args.clients
            n = 0
            while time.time() - started < args.seconds:
                kind = ("pass", "pass", "stage", "deny")[(n + c) % 4]
                try:
                    if kind == "pass":
                        response = opener.open(f"{base}/read/{i % 97}", timeout=10)
                    elif kind == "stage":
                        response = opener.open(urllib.request.Request(f"{base}/hook/{i}", data=b'{"n": %d}' % i), timeout=10)
                    else:
                        response = opener.open(f"{base}/denied/{i}", timeout=10)
                    body = response.read()
                    outcome = kind if response.status == expected[kind] else "error"
                    if outcome == "error":
                        first_error.append(f"{kind}: HTTP {response.status} {body[:300]!r}")
                except urllib.error.HTTPError as e:
                    outcome = kind if e.code == expected[kind] else "error"
                    if outcome == "error":
                        first_error.append(f"{kind}: HTTP {e.code} {e.read()[:300]!r}")
                except Exception as e:
                    outcome = "error"
                    first_error.append(f"{kind}: {e!r}")
                with lock:
                    counts[outcome] += 1
                i += args.clients
                n += 1
                delay = started + n / rate - time.time()
                if delay > 0:
                    time.sleep(delay)

        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(args.clients)]
        for t in threads:
            t.start()
        samples = []
        while time.time() - started < args.seconds:
            rss, fds = sample(pid)
            samples.append((round(time.time() - started), rss, fds))
            time.sleep(min(10, max(0.1, args.seconds - (time.time() - started))))
        for t in threads:
            t.join(timeout=15)
        rss, fds = sample(pid)
        samples.append((round(time.time() - started), rss, fds))
        total = sum(counts.values())
        elapsed = time.time() - started
        # Every 202 must be an effect in the ledger, and nothing else.
        request = urllib.request.Request(f"{addresses['admin']}/v1/runs/{run['id']}/effects",
                                         headers={"authorization": f"Bearer {token}"})
        staged = len(json.load(urllib.request.urlopen(request, timeout=60))["effects"])
        if staged != counts["stage"]:
            first_error.insert(0, f"the run holds {staged} effects, but {counts['stage']} POSTs got 202")
            counts["error"] += 1
        print(f"soak: {elapsed:.0f} s, {total / elapsed:.0f} req/s achieved (target {args.rate}; {args.clients} client(s)); requests: {counts}")
        if first_error:
            print(f"first error: {first_error[0]}")
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
        log.close()
        if args.keep:
            print(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
