"""Parts of the crash campaign (campaign.py): the logging origin, the airlock process, the
staging clients and the ledger snapshot. Loopback only; no state outside the work directory
the campaign gives them.
"""
import base64, collections, http.server, json, os, random, signal, socket, ssl, subprocess, sys, threading, time

import requests


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_origin_certificates(work):
    """A throwaway CA and a certificate for 127.0.0.1 it issues; returns (ca, cert, key) paths.
    Only airlock trusts the CA (--upstream-ca)."""
    def at(name):
        return os.path.join(work, name)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    with open(at("origin.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    for command in (
        ["req", "-x509", *ec, "-days", "2", "-subj", "/CN=airlock campaign CA", "-keyout", at("origin-ca.key"),
         "-out", at("origin-ca.pem")],
        ["req", *ec, "-subj", "/CN=127.0.0.1", "-keyout", at("origin.key"), "-out", at("origin.csr")],
        ["x509", "-req", "-in", at("origin.csr"), "-CA", at("origin-ca.pem"), "-CAkey", at("origin-ca.key"),
         "-set_serial", "1", "-days", "2", "-extfile", at("origin.ext"), "-out", at("origin.pem")],
    ):
        subprocess.run(["openssl", *command], check=True, capture_output=True)
    return at("origin-ca.pem"), at("origin.pem"), at("origin.key")


class OriginLog:
    """Every request body id an origin received, appended to a file (one id a line, one
    O_APPEND write each, so lines never interleave) before the origin answers. The file is
    the record: `counts()` reads it back, so duplicates are counted exactly whatever
    happens to the origin's threads. `total` is the in-memory count, for timing kills."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.lock = threading.Lock()
        self.total = 0

    def record(self, body_id):
        os.write(self.fd, (body_id + "\n").encode())
        with self.lock:
            self.total += 1

    def counts(self):
        """Counter of body id -> how many times an origin received it (from the file)."""
        with open(self.path) as f:
            return collections.Counter(line.strip() for line in f if line.strip())

    def close(self):
        os.close(self.fd)


class Origin:
    """A logging origin on 127.0.0.1 (HTTPS with `certs`, else HTTP). Every POST's body is
    read whole, its `id` logged, then answered 200 — or, with probability `drop_rate`, the
    connection is closed without an answer (the body was delivered; the sender cannot
    know). It runs in this process, outside airlock, and is never killed."""

    def __init__(self, log, drop_rate, certs=None, rng=None):
        self.log, self.drop_rate, self.rng = log, drop_rate, rng or random.Random()
        self.dropped = 0
        self.rng_lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                try:
                    body_id = json.loads(body)["id"]
                except (ValueError, KeyError, TypeError):
                    body_id = "unparsed:" + base64.b16encode(body[:32]).decode()
                outer.log.record(body_id)
                with outer.rng_lock:
                    drop = outer.rng.random() < outer.drop_rate
                    outer.dropped += drop
                if drop:
                    self.close_connection = True
                    return
                answer = b'{"ok":true}'
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                # A connection airlock's death reset is expected here; anything else is printed.
                if not isinstance(sys.exc_info()[1], OSError):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if certs:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(certs[0], certs[1])
            # The handshake happens in the handler's thread, not in the accept loop.
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True,
                                                     do_handshake_on_connect=False)
            self.scheme = "https"
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def campaign_policy(scheme, ports):
    """Stage every POST to the origins (loopback needs allow_private); deny the rest."""
    return f"""version = 1
default = "deny"
allow_private = ["127.0.0.0/8"]

[[rule]]
id = "campaign-writes"
host = "127.0.0.1"
port = [{", ".join(str(p) for p in ports)}]
scheme = "{scheme}"
method = ["POST"]
action = "stage"
"""


class AirlockError(Exception):
    pass


class Airlock:
    """One `airlock serve` on a data directory, started, SIGKILLed and restarted on fixed
    loopback ports (so a run's proxy URL stays valid across restarts)."""

    def __init__(self, binary, data, policy, upstream_ca, log_path, serve_args=()):
        self.binary, self.data, self.policy, self.upstream_ca = binary, data, policy, upstream_ca
        self.serve_args = list(serve_args)
        self.log_path = log_path
        self.listen, self.admin_port = free_port(), free_port()
        self.proc = None
        self.admin = None
        self.token = None
        self.http = requests.Session()
        self.http.trust_env = False
        self.last_start_s = 0.5

    def spawn(self):
        """Starts the process and returns at once (recovery may be killed before it listens)."""
        assert self.proc is None
        try:
            os.remove(os.path.join(self.data, "addresses.json"))
        except FileNotFoundError:
            pass
        log = open(self.log_path, "a")
        env = dict(os.environ, AIRLOCK_LOG="info")
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
            env.pop(name, None)
        self.spawned_at = time.monotonic()
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--data", self.data, "--policy", self.policy,
             "--listen", f"127.0.0.1:{self.listen}", "--admin", f"127.0.0.1:{self.admin_port}",
             *(["--upstream-ca", self.upstream_ca] if self.upstream_ca else []), *self.serve_args],
            stdout=subprocess.DEVNULL, stderr=log, env=env)
        log.close()

    def wait_listening(self, timeout=60):
        """Waits for addresses.json naming this process; raises AirlockError with the log's
        tail when it exits or takes too long."""
        path = os.path.join(self.data, "addresses.json")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    found = json.load(f)
                if found.get("pid") == self.proc.pid:
                    self.admin = found["admin"]
                    with open(os.path.join(self.data, "admin.token")) as f:
                        self.token = f.read().strip()
                    self.last_start_s = time.monotonic() - self.spawned_at
                    return
            except (OSError, ValueError, KeyError):
                pass
            if self.proc.poll() is not None:
                raise AirlockError(f"airlock exited with status {self.proc.returncode} before listening; "
                                   f"its log ends:\n{self.log_tail()}")
            time.sleep(0.01)
        raise AirlockError(f"airlock did not listen within {timeout} s; its log ends:\n{self.log_tail()}")

    def start(self, timeout=60):
        self.spawn()
        self.wait_listening(timeout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """SIGKILL (no chance to flush or clean up) and reap; returns whether it was alive."""
        if self.proc is None:
            return False
        was_alive = self.proc.poll() is None
        if was_alive:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc = None
        return was_alive

    def stop(self):
        """SIGTERM (graceful), SIGKILL after 15 s."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log_tail(self, chars=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-chars:]
        except OSError:
            return "(no log)"

    def api(self, method, path, body=None, timeout=60):
        """One admin API call; returns (status, JSON or None)."""
        response = self.http.request(method, self.admin + path, json=body, timeout=timeout,
                                     headers={"authorization": f"Bearer {self.token}"})
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, None

    def approve_pending_body(self, run, timeout=60):
        """The body of a commit that approves the run's pending effects as listed now:
        `{"approve_pending": true, "expect": ...}`, the `expect` of `GET /v1/runs/{run}/effects`
        (a commit with approve_pending must say which set it approves; docs/admin-api.md)."""
        status, listed = self.api("GET", f"/v1/runs/{run}/effects", timeout=timeout)
        if status != 200 or not isinstance(listed, dict):
            raise AirlockError(f"GET /v1/runs/{run}/effects answered {status}: {listed}")
        return {"approve_pending": True, "expect": listed.get("expect")}

    def commit(self, run, timeout=60):
        """Commits `run`, approving what is pending; a set that changed between the listing
        and the commit (409 set_changed) is listed again, up to 5 times. Returns (status, JSON)."""
        for _ in range(5):
            status, answer = self.api("POST", f"/v1/runs/{run}/commit",
                                      self.approve_pending_body(run, timeout), timeout=timeout)
            if status != 409 or not isinstance(answer, dict) or answer.get("code") != "set_changed":
                return status, answer
        return status, answer

    def create_run(self):
        status, run = self.api("POST", "/v1/runs")
        if status != 201:
            raise AirlockError(f"POST /v1/runs answered {status}: {run}")
        return run["id"], run["proxy_url"]

    def proxy_url(self, run):
        status, env = self.api("GET", f"/v1/runs/{run}/env")
        if status != 200:
            raise AirlockError(f"GET /v1/runs/{run}/env answered {status}: {env}")
        return env["env"]["HTTPS_PROXY"]

    def runs(self):
        """GET /v1/runs: the runs, each with its effect counts by state."""
        status, listed = self.api("GET", "/v1/runs")
        if status != 200:
            raise AirlockError(f"GET /v1/runs answered {status}: {listed}")
        return listed["runs"]

    def effects(self, run):
        """GET /v1/runs/{run}/effects: the run's effect summaries."""
        status, page = self.api("GET", f"/v1/runs/{run}/effects", timeout=120)
        if status != 200:
            raise AirlockError(f"GET /v1/runs/{run}/effects answered {status}: {page}")
        return page["effects"]

    def wait_quiet(self, timeout=60):
        """Waits until no run is `committing`; returns whether that happened in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, listed = self.api("GET", "/v1/runs")
            if status == 200 and not any(r["state"] == "committing" for r in listed["runs"]):
                return True
            time.sleep(0.1)
        return False


def body_id_of(effect):
    """The body id a campaign effect carries, from its URL (…/hook/ID)."""
    return effect["url"].rsplit("/", 1)[-1]


class Target:
    """The run the clients stage into now; switched before a run is committed."""

    def __init__(self, run, proxy_url):
        self.lock = threading.Lock()
        self.run, self.proxy_url, self.generation = run, proxy_url, 0

    def set(self, run, proxy_url):
        with self.lock:
            self.run, self.proxy_url = run, proxy_url
            self.generation += 1

    def get(self):
        with self.lock:
            return self.run, self.proxy_url, self.generation


class Clients:
    """N threads POSTing unique bodies through airlock to the origins (a new body id every
    attempt, never a retry of the same one, so the origin never sees an id twice unless
    airlock sent one effect twice), pausing while the run of the moment holds `cap` acked
    effects (so staging never outruns release for long). A `202` with `airlock-effect` is an acknowledged effect:
    `acked[body_id] = (effect id, run)`. Every other outcome is counted by kind in
    `outcomes`, and in `window` while one is open (the full-disk phase reads it)."""

    def __init__(self, count, origins, ca_file, target, tag, rate, body_bytes, cap=None, timeout=10):
        self.origins, self.ca_file, self.target, self.tag, self.cap = origins, ca_file, target, tag, cap
        self.rate, self.body_bytes, self.timeout = rate, body_bytes, timeout
        self.lock = threading.Lock()
        self.acked = {}
        self.acked_per_run = collections.Counter()
        self.outcomes = collections.Counter()
        self.window = None
        self.first_error = {}
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(c, count), daemon=True) for c in range(count)]
        for t in self.threads:
            t.start()

    def open_window(self):
        with self.lock:
            self.window = {"outcomes": collections.Counter(), "acked": [], "first_202_at": None}

    def close_window(self):
        with self.lock:
            window, self.window = self.window, None
            return window

    def _note(self, kind, detail=None):
        with self.lock:
            self.outcomes[kind] += 1
            if self.window is not None:
                self.window["outcomes"][kind] += 1
            if detail and kind not in self.first_error:
                self.first_error[kind] = detail

    def _client(self, c, count):
        session, generation = None, None
        n, period = 0, count / self.rate if self.rate > 0 else 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            run, proxy_url, current = self.target.get()
            if self.cap and self.acked_per_run[run] >= self.cap:
                time.sleep(0.05)  # backpressure: the run holds enough; wait for the next one
                next_at = time.monotonic()
                continue
            if current != generation or session is None:
                if session is not None:
                    session.close()
                session = requests.Session()
                session.trust_env = False
                generation = current
            body_id = f"{self.tag}.{c}.{n}"
            n += 1
            origin = self.origins[n % len(self.origins)]
            body = json.dumps({"id": body_id, "pad": "x" * self.body_bytes})
            try:
                response = session.post(f"{origin}/hook/{body_id}", data=body, timeout=self.timeout,
                                        headers={"content-type": "application/json"},
                                        proxies={"http": proxy_url, "https": proxy_url}, verify=self.ca_file)
                effect = response.headers.get("airlock-effect")
                if response.status_code == 202 and effect:
                    with self.lock:
                        self.acked[body_id] = (effect, run)
                        self.acked_per_run[run] += 1
                        self.outcomes["202"] += 1
                        if self.window is not None:
                            self.window["outcomes"]["202"] += 1
                            self.window["acked"].append(body_id)
                            if self.window["first_202_at"] is None:
                                self.window["first_202_at"] = time.monotonic()
                else:
                    self._note(f"HTTP {response.status_code}", response.text[:300])
                    if response.status_code == 409:
                        time.sleep(0.02)  # the run closed; the target is being switched
            except requests.RequestException as e:
                self._note(type(e).__name__, repr(e)[:300])
                session.close()
                session = None
                time.sleep(0.02)  # airlock is down or restarting
            if period:
                next_at += period
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_at = time.monotonic()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=self.timeout + 5)
