#!/usr/bin/env python3
"""The crash campaign (by hand, not in CI): SIGKILL airlock at random points while clients
stage, while it releases, while it recovers and right after a commit, restart it on the same
data directory each time, and check every acknowledged effect; then a full-disk phase on a
small tmpfs. Loopback only; bounded; cleans up its processes and mounts.

    cargo build --release -p airlock
    python3 tests/soak/campaign.py [--airlock target/release/airlock] [--kills 50] [--seconds 900]
        [--clients 4] [--rate 50] [--release-set 100] [--drop-rate 0] [--http] [--no-disk]
        [--disk-mib 24] [--full-check-every 25] [--seed N] [--verbose] [--keep]

The origins (two, HTTPS by default, in this process, never killed) append the id of every
body they receive to a file before answering; with --drop-rate a fraction of requests is read
whole and the connection then closed without an answer. Clients POST unique bodies (a new id
every attempt) through airlock, which stages them; a 202 is an acknowledged (acked) effect.
They pause while the run of the moment holds 2 x --release-set acked effects, so staging does
not outrun release. Each kill picks a phase:

  staging       while the clients stage (they always do, into the run of the moment)
  release       during the release of an approved set (--release-set effects or more,
                committed with approve_pending), once the origins got a random part of it
  recovery      a release is killed (counted as a release kill), airlock restarted, and
                killed again while it finishes that commit (or before it even listens)
  after-commit  0-30 ms after a commit request was sent

After each restart the ledger is listed and checked: lost = acked but absent (or with another
body); finished runs whose counts did not change are listed again every --full-check-every-th
check and at the end. See tests/soak/README.md. At the end every run is committed and the table printed: kills (per phase),
acked, lost, duplicates at the origin (a body id received more than once), unknown,
delivered but marked failed (state `failed` although an origin logged the body), released,
released but never received. The full-disk phase (root only: it mounts a tmpfs) runs a
second airlock on a --disk-mib tmpfs, fills it while clients stage, frees it, reports whether
staging recovered without a restart, then SIGKILLs and restarts it and checks its acked
effects the same way. Exit status: 0 when lost, duplicates, delivered-but-failed and
released-but-never-received are all 0 and nothing else went wrong (a failed restart, a
stalled commit), 1 otherwise, 2 on a setup error.
"""
import argparse, collections, os, random, shutil, signal, subprocess, sys, tempfile, threading, time

import requests

from campaign_kit import (Airlock, AirlockError, Clients, Origin, OriginLog, Target, body_id_of, campaign_policy,
                          make_origin_certificates)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PHASES = ("staging", "release", "recovery", "after-commit", "full-disk")
SETTLED = ("released", "failed", "unknown", "skipped")
FINISHED = ("committed", "partially_committed", "aborted")


class Committer(threading.Thread):
    """POST /v1/runs/{run}/commit with approve_pending in the background; `sent` is set just
    before the request leaves."""

    def __init__(self, airlock, run):
        super().__init__(daemon=True)
        self.url = f"{airlock.admin}/v1/runs/{run}/commit"
        self.token = airlock.token
        # Listed before the request leaves, so `sent` still marks the commit itself.
        self.body = airlock.approve_pending_body(run)
        self.sent = threading.Event()
        self.sent_at = None
        self.result = None
        self.start()

    def run(self):
        session = requests.Session()
        session.trust_env = False
        self.sent_at = time.monotonic()
        self.sent.set()
        try:
            response = session.post(self.url, json=self.body, timeout=300,
                                    headers={"authorization": f"Bearer {self.token}"})
            self.result = response.status_code
        except requests.RequestException as e:
            self.result = type(e).__name__


def wait_for(condition, timeout, step=0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


class Instance:
    """One airlock under test with its clients and what its checks found."""

    def __init__(self, airlock, clients, target, full_every):
        self.airlock, self.clients, self.target, self.full_every = airlock, clients, target, full_every
        self.lost = set()
        self.checks = 0
        self.check_seconds = 0.0
        self.listed = 0
        self.effects = {}
        self.cache = {}  # run -> (its counts by state when listed, its effects then)

    def check(self, full=False):
        """Lists the ledger and records every acked effect it lacks (or holds with another
        body) as lost. A finished run whose counts by state are those of its last listing is
        not listed again, except on every --full-check-every-th check and when `full`."""
        started = time.monotonic()
        # Acks first: each was durable before its 202, so the listing after must hold it.
        with self.clients.lock:
            acked = dict(self.clients.acked)
        full = full or self.checks % self.full_every == 0
        effects = {}
        for run in self.airlock.runs():
            cached = self.cache.get(run["id"])
            if full or run["state"] not in FINISHED or cached is None or cached[0] != run["effects"]:
                cached = (run["effects"], self.airlock.effects(run["id"]))
                self.cache[run["id"]] = cached
                self.listed += 1
            for effect in cached[1]:
                effects[effect["id"]] = effect
        self.effects = effects
        for body_id, (effect_id, _run) in acked.items():
            effect = effects.get(effect_id)
            if effect is None or body_id_of(effect) != body_id:
                self.lost.add(effect_id)
        self.checks += 1
        self.check_seconds += time.monotonic() - started

    def restart(self):
        self.airlock.start()
        run, _, _ = self.target.get()
        self.target.set(run, self.airlock.proxy_url(run))

    def switch_run(self):
        """Points the clients at a fresh run; returns the previous one."""
        old, _, _ = self.target.get()
        self.target.set(*self.airlock.create_run())
        return old

    def settle(self, timeout):
        """Commits every run still open or sealed and waits for every commit to finish."""
        for listed in self.airlock.runs():
            run, state = listed["id"], listed["state"]
            if state in ("open", "sealed"):
                status, answer = self.airlock.commit(run, timeout=timeout)
                if status != 200:
                    print(f"  commit of {run} at the end answered {status}: {answer}")
        return self.airlock.wait_quiet(timeout)


class Campaign:
    def __init__(self, args, rng, log):
        self.args, self.rng, self.log = args, rng, log
        self.kills = collections.Counter()
        self.late = collections.Counter()  # kills that came after the moment they aimed at
        self.problems = []

    def kill(self, instance, phase):
        instance.airlock.kill()
        self.kills[phase] += 1

    def total_kills(self):
        return sum(self.kills.values())

    # The phases. Each ends with airlock killed.

    def staging(self, main):
        time.sleep(self.rng.uniform(0.05, 1.0))
        self.kill(main, "staging")

    def release(self, main, high=None):
        """Commits a set of at least --release-set acked effects and kills once the origins got
        a random number of them; returns (bodies the origins had before, set size)."""
        size = self.args.release_set
        run, _, _ = main.target.get()
        wait_for(lambda: main.clients.acked_per_run[run] >= size, 60, 0.02)
        main.switch_run()
        size = max(2, main.clients.acked_per_run[run])
        baseline = self.log.total
        committer = Committer(main.airlock, run)
        k = self.rng.randint(1, (high or size) - 1)
        if not wait_for(lambda: self.log.total - baseline >= k or committer.result is not None, 60):
            self.problems.append(f"release of {run}: the origins got {self.log.total - baseline} of {size} in 60 s")
        if committer.result is not None:
            self.late["release"] += 1
        self.kill(main, "release")
        return baseline, size

    def recovery(self, main):
        baseline, size = self.release(main, high=max(2, self.args.release_set // 2))
        main.airlock.spawn()
        if self.rng.random() < 0.25:
            # Before it listens: while Ledger::recover marks `releasing` effects unknown.
            time.sleep(self.rng.uniform(0, main.airlock.last_start_s))
        else:
            main.airlock.wait_listening()
            remaining = max(0, size - (self.log.total - baseline))
            k = self.rng.randint(0, max(0, remaining // 2))
            resumed = self.log.total
            if not wait_for(lambda: self.log.total - resumed >= k, 10):
                self.late["recovery"] += 1
        self.kill(main, "recovery")

    def after_commit(self, main):
        run, _, _ = main.target.get()
        wait_for(lambda: main.clients.acked_per_run[run] >= 1, 10, 0.01)
        main.switch_run()
        committer = Committer(main.airlock, run)
        committer.sent.wait()
        delay = self.rng.uniform(0, 0.030) - (time.monotonic() - committer.sent_at)
        if delay > 0:
            time.sleep(delay)
        self.kill(main, "after-commit")

    def kill_loop(self, main, deadline):
        choices = ("staging", "release", "recovery", "after-commit")
        printed = 0
        while self.total_kills() < self.args.kills and time.monotonic() < deadline:
            phase = self.rng.choice(choices)
            if phase == "recovery" and self.args.kills - self.total_kills() < 2:
                phase = "staging"
            t0 = time.monotonic()
            getattr(self, phase.replace("-", "_"))(main)
            t1 = time.monotonic()
            main.restart()
            t2 = time.monotonic()
            main.check()
            t3 = time.monotonic()
            if not main.airlock.wait_quiet(120):
                self.problems.append("a commit was still running 120 s after a restart")
            if self.args.verbose:
                print(f"    {phase}: phase {t1 - t0:.2f} s, restart {t2 - t1:.2f} s, check {t3 - t2:.2f} s, "
                      f"commits finished {time.monotonic() - t3:.2f} s; acked {len(main.clients.acked)}, "
                      f"origin {self.log.total}", flush=True)
            if self.total_kills() // 10 > printed // 10 or self.total_kills() >= self.args.kills:
                printed = self.total_kills()
                print(f"  {self.total_kills()} kills ({dict(self.kills)}), acked {len(main.clients.acked)}, "
                      f"lost {len(main.lost)}, origin received {self.log.total}, "
                      f"{time.monotonic() - self.started:.0f} s", flush=True)

    def disk_phase(self, work, make_airlock, origins, ca_file_of, mounts, instances):
        """Runs the full-disk phase on a second airlock (appended to `instances` as soon as it
        exists, for the tally and the clean-up); returns (instance or None, report lines)."""
        args = self.args
        if args.no_disk:
            return None, ["full-disk phase: skipped (--no-disk)"]
        if os.geteuid() != 0:
            return None, ["full-disk phase: skipped (mounting a tmpfs needs root)"]
        mount = os.path.join(work, "disk")
        os.makedirs(mount)
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mib}m", "airlock-campaign", mount],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return None, [f"full-disk phase: skipped (mount -t tmpfs failed: {done.stderr.strip()})"]
        mounts.append(mount)
        lines = []
        # No free-space floor (--ledger-min-free-mib 0): the phase fills the disk for real.
        airlock = make_airlock(os.path.join(mount, "data"), os.path.join(work, "airlock-disk.log"),
                               ["--ledger-min-free-mib", "0"])
        try:
            airlock.start()
            target = Target(*airlock.create_run())
        except (AirlockError, requests.RequestException):
            airlock.kill()
            raise
        clients = Clients(args.clients, origins, ca_file_of(airlock), target, f"{self.tag}d", args.rate,
                          args.body_bytes)
        disk = Instance(airlock, clients, target, args.full_check_every)
        instances.append(disk)
        wait_for(lambda: len(clients.acked) >= 20, 10, 0.02)
        filler = os.path.join(mount, "filler")

        def fill():
            with open(filler, "ab", buffering=0) as f:
                for chunk in (1 << 20, 1 << 12, 1 << 9):
                    try:
                        while True:
                            f.write(b"\0" * chunk)
                    except OSError:
                        pass

        fill()
        clients.open_window()
        full_until = time.monotonic() + 3
        while time.monotonic() < full_until and airlock.alive():
            fill()  # keep it full: whatever airlock frees, the filler takes
            time.sleep(0.2)
        full = clients.close_window()
        exited = airlock.proc.poll() if airlock.proc else None
        os.remove(filler)
        freed = time.monotonic()
        outcome = ", ".join(f"{k}: {v}" for k, v in sorted(full["outcomes"].items())) or "no answers"
        lines.append(f"full disk, 3 s of staging: {outcome}")
        if exited is not None:
            lines.append(f"  airlock exited while the disk was full (status {exited})")
        clients.open_window()
        recovered = airlock.alive() and wait_for(lambda: clients.window["first_202_at"] is not None, 10, 0.02)
        after_free = clients.close_window()
        if recovered:
            lines.append(f"staging recovered without restart: yes ({(after_free['first_202_at'] - freed) * 1000:.0f} ms "
                         "after the space was freed)")
        else:
            outcome = ", ".join(f"{k}: {v}" for k, v in sorted(after_free["outcomes"].items())) or "no answers"
            lines.append(f"staging recovered without restart: no (10 s after the space was freed: {outcome})")
        self.kill(disk, "full-disk")
        try:
            disk.restart()
        except AirlockError as e:
            self.problems.append(f"airlock did not restart after the full disk: {e}")
            lines.append("restart after the full disk: FAILED")
            clients.stop()
            return disk, lines
        clients.open_window()
        restarted = wait_for(lambda: clients.window["first_202_at"] is not None, 10, 0.02)
        clients.close_window()
        lines.append(f"staging after a restart: {'yes' if restarted else 'no'}")
        if not restarted:
            self.problems.append("staging did not work after restarting on the freed disk")
        disk.check()
        lines.append(f"full-disk instance after the restart: {len(clients.acked)} acked, {len(disk.lost)} lost "
                     f"({len(full['acked'])} of them acked while the disk was full)")
        clients.stop()
        if not disk.settle(120):
            self.problems.append("the full-disk instance's commit did not finish in 120 s")
        disk.check(full=True)
        return disk, lines


def tally(instances, counts):
    """The final figures over every instance's last check and the origins' log."""
    t = collections.Counter()
    states = collections.Counter()
    for inst in instances:
        t["acked"] += len(inst.clients.acked)
        t["lost"] += len(inst.lost)
        acked_ids = {effect for effect, _ in inst.clients.acked.values()}
        for effect_id, effect in inst.effects.items():
            state, body = effect["state"], body_id_of(effect)
            states[state] += 1
            if state == "failed" and counts[body]:
                t["delivered but marked failed"] += 1
            if state == "released" and not counts[body]:
                t["released but never received"] += 1
            if effect_id in acked_ids and state not in SETTLED:
                t["acked but unsettled"] += 1
    t["duplicates at origin"] = sum(1 for n in counts.values() if n > 1)
    t["unknown"] = states["unknown"]
    t["released"] = states["released"]
    return t, states


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--airlock", default=os.path.join(REPO, "target", "release", "airlock"),
                    help="the airlock binary [default: this checkout's target/release/airlock]")
    ap.add_argument("--kills", type=int, default=50, help="SIGKILLs in the kill loop [default: 50]")
    ap.add_argument("--seconds", type=int, default=900,
                    help="the kill loop stops after this long even short of --kills; settling and the "
                         "full-disk phase add about a minute [default: 900]")
    ap.add_argument("--clients", type=int, default=4, help="client threads staging [default: 4]")
    ap.add_argument("--rate", type=float, default=50,
                    help="staging attempts per second, all clients; keep it below what airlock releases per second [default: 50]")
    ap.add_argument("--release-set", type=int, default=100,
                    help="acked effects in a run before a release phase commits it [default: 100]")
    ap.add_argument("--full-check-every", type=int, default=25,
                    help="list finished runs whose counts did not change only on every Nth check [default: 25]")
    ap.add_argument("--body-bytes", type=int, default=200, help="padding in each body [default: 200]")
    ap.add_argument("--drop-rate", type=float, default=0.0,
                    help="fraction of origin requests read whole, then closed without an answer [default: 0]")
    ap.add_argument("--http", action="store_true", help="plain HTTP origins instead of HTTPS")
    ap.add_argument("--no-disk", action="store_true", help="skip the full-disk phase")
    ap.add_argument("--disk-mib", type=int, default=24, help="size of the full-disk phase's tmpfs [default: 24]")
    ap.add_argument("--seed", type=int, default=None, help="seed for the phase and timing choices")
    ap.add_argument("--serve-args", default="", help="more arguments for airlock serve, split on spaces")
    ap.add_argument("--verbose", action="store_true", help="a line per kill with where the time went")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (ledgers, logs, origin log)")
    args = ap.parse_args()
    for name in ("kills", "seconds", "clients", "release_set", "disk_mib", "full_check_every"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.release_set < 2:
        ap.error("--release-set must be at least 2")
    if not 0 <= args.drop_rate <= 1:
        ap.error("--drop-rate is a fraction from 0 to 1")
    if args.rate <= 0:
        ap.error("--rate must be positive")
    if not os.access(args.airlock, os.X_OK):
        ap.error(f"no airlock binary at {args.airlock}: run `cargo build --release -p airlock` or pass --airlock")
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    rng = random.Random(seed)

    # SIGTERM and Ctrl-C unwind through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    work = tempfile.mkdtemp(prefix="airlock-campaign-")
    mounts, instances, origins = [], [], []
    log = OriginLog(os.path.join(work, "origin.log"))
    try:
        certs = None if args.http else make_origin_certificates(work)
        origins = [Origin(log, args.drop_rate, certs and certs[1:], random.Random(rng.random())) for _ in range(2)]
        policy = os.path.join(work, "policy.toml")
        with open(policy, "w") as f:
            f.write(campaign_policy(origins[0].scheme, [o.port for o in origins]))
        serve_args = args.serve_args.split()

        def make_airlock(data, log_path, extra=()):
            return Airlock(args.airlock, data, policy, certs[0] if certs else None, log_path,
                           list(serve_args) + list(extra))

        def ca_file_of(airlock):
            return os.path.join(airlock.data, "ca.pem")

        campaign = Campaign(args, rng, log)
        campaign.tag = f"{seed:x}"
        main_airlock = make_airlock(os.path.join(work, "data"), os.path.join(work, "airlock.log"))
        try:
            main_airlock.start()
        except AirlockError as e:
            print(e, file=sys.stderr)
            return 2
        target = Target(*main_airlock.create_run())
        clients = Clients(args.clients, [o.base for o in origins], ca_file_of(main_airlock), target, campaign.tag,
                          args.rate, args.body_bytes, cap=2 * args.release_set)
        main_instance = Instance(main_airlock, clients, target, args.full_check_every)
        instances.append(main_instance)
        print(f"crash campaign: seed {seed}, {args.kills} kills at most, {args.seconds} s at most, {args.clients} "
              f"clients at {args.rate:g}/s, {origins[0].scheme} origins, drop rate {args.drop_rate:g}; work {work}",
              flush=True)
        campaign.started = time.monotonic()
        failed_restart = None
        try:
            campaign.kill_loop(main_instance, campaign.started + args.seconds)
        except (AirlockError, requests.RequestException) as e:
            failed_restart = str(e)
            campaign.problems.append(f"the kill loop stopped: airlock did not come back or stopped answering "
                                     f"(process alive: {main_airlock.alive()}): {e}\nits log ends:\n"
                                     f"{main_airlock.log_tail()}")
        loop_seconds = time.monotonic() - campaign.started
        clients.stop()
        if failed_restart is None:
            if not main_instance.settle(300):
                campaign.problems.append("the final commits did not finish in 300 s")
            main_instance.check(full=True)
            main_airlock.stop()  # done with it: the full-disk phase gets the machine
        disk_lines = []
        if failed_restart is None:
            try:
                _, disk_lines = campaign.disk_phase(work, make_airlock, [o.base for o in origins], ca_file_of,
                                                       mounts, instances)
            except (AirlockError, requests.RequestException) as e:
                campaign.problems.append(f"the full-disk phase stopped: {e}")
        counts = log.counts()
        t, states = tally(instances, counts)
        report(args, campaign, t, states, loop_seconds, instances, disk_lines, sum(o.dropped for o in origins))
        missed = t["lost"] or t["duplicates at origin"] or t["delivered but marked failed"] or \
            t["released but never received"] or campaign.problems
        if args.keep:
            print(f"work directory kept: {work}")
        return 1 if missed else 0
    finally:
        for inst in instances:
            inst.clients.stopping.set()
            inst.airlock.kill()
        for origin in origins:
            origin.stop()
        log.close()
        for mount in mounts:
            if subprocess.run(["umount", mount], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mount], capture_output=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def report(args, campaign, t, states, loop_seconds, instances, disk_lines, dropped):
    kills = campaign.kills
    rows = [
        ("kills", sum(kills.values()), ""),
        *[(f"  {phase}", kills[phase], "") for phase in PHASES],
        ("acked (202)", t["acked"], ""),
        ("lost", t["lost"], "0"),
        ("duplicates at origin", t["duplicates at origin"], "0"),
        ("unknown", t["unknown"], ""),
        ("delivered but marked failed", t["delivered but marked failed"], "0"),
        ("released", t["released"], ""),
        ("released but never received", t["released but never received"], "0"),
        ("acked but unsettled at the end", t["acked but unsettled"], ""),
    ]
    print()
    print(f"| {'crash campaign':<32} | {'count':>7} | target |")
    print(f"|{'-' * 34}|{'-' * 9}|--------|")
    for name, value, note in rows:
        print(f"| {name:<32} | {value:>7} | {note:<6} |")
    print()
    print(f"kill loop: {loop_seconds:.0f} s; effects by state at the end: "
          + ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    print(f"origin requests dropped without an answer: {dropped} (--drop-rate {args.drop_rate:g})")
    if campaign.late:
        print("kills that landed after their moment (the release had finished): "
              + ", ".join(f"{k} {v}" for k, v in campaign.late.items()))
    for inst in instances:
        if inst.checks:
            print(f"ledger checks ({inst.airlock.data}): {inst.checks}, {inst.check_seconds / inst.checks * 1000:.0f} ms "
                  f"each, {inst.listed} run listings")
        errors = {k: v for k, v in inst.clients.outcomes.items() if k != "202"}
        if errors:
            print("  other client outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(errors.items())))
            for kind, detail in sorted(inst.clients.first_error.items()):
                print(f"    first {kind}: {' '.join(detail.split())[:240]}")
        if inst.lost:
            print("  lost effects (first 10): " + ", ".join(sorted(inst.lost)[:10]))
    for line in disk_lines:
        print(line)
    for problem in campaign.problems:
        print(f"problem: {problem}")


if __name__ == "__main__":
    sys.exit(main())
