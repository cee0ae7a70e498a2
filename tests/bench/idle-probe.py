#!/usr/bin/env python3
"""Idle intercepted tunnels: VmRSS of an airlock process before and after opening N tunnels
(CONNECT + TLS handshake with the run's CA, no request), held 2 s; prints KiB per tunnel.

usage: idle-probe.py ENV_JSON N PID PORT
  ENV_JSON  the "env" object of `airlock runs create --json`, as a file
  N         tunnels to open, one after another
  PID       the airlock serve process
  PORT      a port on 127.0.0.1 the policy passes reads to (nothing is sent to it)
"""
import socket, ssl, sys, os, time, base64, json, urllib.parse
env = json.load(open(sys.argv[1]))
n = int(sys.argv[2]); pid = int(sys.argv[3]); port = int(sys.argv[4])
proxy = urllib.parse.urlparse(env["HTTPS_PROXY"])
auth = base64.b64encode(f"{urllib.parse.unquote(proxy.username)}:{urllib.parse.unquote(proxy.password)}".encode()).decode()
ctx = ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
def rss():
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"): return int(l.split()[1])
base = rss(); held = []
for i in range(n):
    s = socket.create_connection((proxy.hostname, proxy.port))
    s.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nProxy-Authorization: Basic {auth}\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(1)
    assert b" 200" in buf.split(b"\r\n")[0], buf
    t = ctx.wrap_socket(s, server_hostname="127.0.0.1")
    held.append(t)
time.sleep(2)
after = rss()
print(f"base {base} KiB, after {n}: {after} KiB, per tunnel {(after-base)/n:.1f} KiB")
