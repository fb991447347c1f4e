#!/usr/bin/env python3
"""A bad link in userspace, for machines without netem (issue 44, section 1).

A network namespace whose only way out is a TUN device; its twin on the host; and this
process between them, copying every IP packet from one to the other after applying the
link's faults:

    delay   seconds added to each packet, each way (constant, so order is kept)
    loss    the fraction of packets dropped at random, each way
    down    every packet dropped, no reset sent (a blackhole: TCP hangs)
    flap    [up, down, total]: from the moment it is set, `up` seconds good, `down` seconds
            dropped, ... for `total` seconds, then good

The faults are read from a JSON control file whenever it changes, e.g.
    {"delay": 2.0}  {"loss": 0.3}  {"down": true}  {"flap": [10, 10, 300]}  {}
and what happened goes to a JSON stats file once a second (packets forwarded and dropped per
direction, the mode, whether the link is up now).

Addresses: the host end is NET.1, the namespace's NET.2 (point to point); a process in the
namespace reaches the host (an apiserver bound to 0.0.0.0) at NET.1.

Usage (root): linkemu.py NAMESPACE NET CONTROL STATS
  e.g. linkemu.py ekcm-links 10.232.0 /tmp/x/link.json /tmp/x/link.stats
The namespace is created when missing; the TUN devices go when this process ends (SIGTERM).

       linkemu.py --check [NAMESPACE NET]   (default ekcm-linkcheck 10.233.0)
checks the emulator itself, from a process in the namespace to a listener on the host: TCP
connects take one round trip (4 s with 2 s each way, within 0.3 s), 2000 datagrams lose 30 %
(within 27-33 %), a blackhole lets no connect through, a 2 s / 2 s flap lets them through
only while up. Exits 1 naming what is off.
"""

import ctypes
import fcntl
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time
from collections import deque

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def run(*cmd):
    subprocess.run(cmd, check=True)


def setns(fd):
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class Link:
    """The faults in force, from the control file."""

    def __init__(self):
        self.spec = {}
        self.since = time.monotonic()

    def load(self, spec):
        self.spec = spec
        self.since = time.monotonic()

    def up(self, now):
        if self.spec.get("down"):
            return False
        flap = self.spec.get("flap")
        if flap:
            up, down, total = flap
            t = now - self.since
            if t < total and (t % (up + down)) >= up:
                return False
        return True

    def delay(self):
        return float(self.spec.get("delay", 0))

    def loss(self):
        return float(self.spec.get("loss", 0))


def main():
    ns, net, control, stats_path = sys.argv[1:5]
    if not os.path.exists(f"/run/netns/{ns}"):
        run("ip", "netns", "add", ns)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
    inner_ns = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    setns(inner_ns)
    inner = open_tun("lk0")
    setns(host_ns)
    host_name = ("lk-" + ns)[:15]
    host = open_tun(host_name)
    run("ip", "addr", "add", f"{net}.1", "peer", f"{net}.2", "dev", host_name)
    run("ip", "link", "set", host_name, "up", "txqueuelen", "10000")
    run("ip", "-n", ns, "addr", "add", f"{net}.2", "peer", f"{net}.1", "dev", "lk0")
    # Long device queues: a forwarder that falls behind for a moment (a busy machine) must
    # not add losses of its own.
    run("ip", "-n", ns, "link", "set", "lk0", "up", "txqueuelen", "10000")

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    link = Link()
    mtime = None
    # Per direction: the fd to write to and the packets waiting (release time, bytes).
    dirs = {inner: ("out", host, deque()), host: ("in", inner, deque())}
    counts = {d: {"forwarded": 0, "lost": 0, "blackholed": 0} for d in ("out", "in")}
    next_check = next_stats = 0.0
    rng = random.Random(int(os.environ.get("LINKEMU_SEED", "44")))
    while not stop:
        now = time.monotonic()
        if now >= next_check:
            next_check = now + 0.1
            try:
                m = os.stat(control).st_mtime_ns
            except FileNotFoundError:
                m = None
            if m != mtime:
                mtime = m
                try:
                    with open(control) as f:
                        link.load(json.load(f) if m else {})
                except (OSError, ValueError):
                    pass  # being written: read it again next time
        if now >= next_stats:
            next_stats = now + 1.0
            tmp = stats_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"time": time.time(), "spec": link.spec, "up": link.up(now),
                           "queued": sum(len(q) for _, _, q in dirs.values()), **counts}, f)
            os.replace(tmp, stats_path)
        due = [q[0][0] for _, _, q in dirs.values() if q]
        wait = max(0.0, min([next_check] + due) - now)
        try:
            ready, _, _ = select.select(list(dirs), [], [], wait)
        except InterruptedError:
            continue
        now = time.monotonic()
        up, delay, loss = link.up(now), link.delay(), link.loss()
        for fd in ready:
            name, _, q = dirs[fd]
            for _ in range(64):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not up:
                    counts[name]["blackholed"] += 1
                elif loss and rng.random() < loss:
                    counts[name]["lost"] += 1
                else:
                    q.append((now + delay, pkt))
        for fd, (name, out, q) in dirs.items():
            while q and q[0][0] <= now:
                try:
                    os.write(out, q.popleft()[1])
                    counts[name]["forwarded"] += 1
                except OSError:
                    pass  # the device is down or full: the packet is lost
    os.close(inner)
    os.close(host)


CHECK_CLIENT = r"""
import socket, sys, time
what, host = sys.argv[1], sys.argv[2]
if what == "rtt":
    out = []
    for _ in range(int(sys.argv[3])):
        s = socket.socket(); s.settimeout(float(sys.argv[4])); t = time.monotonic()
        try:
            s.connect((host, 7777)); out.append(round(time.monotonic() - t, 3))
        except OSError:
            out.append(None)
        s.close()
    print(" ".join(str(x) for x in out))
else:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(int(sys.argv[3])):
        s.sendto(b"x", (host, 7778)); time.sleep(0.001)
"""


def check(ns, net):
    """The emulator measured: see the module's docstring."""
    import socket
    import tempfile
    import threading
    d = tempfile.mkdtemp(prefix="linkemu-check-")
    control = f"{d}/link.json"
    open(control, "w").write("{}")
    emu = subprocess.Popen([sys.executable, __file__, ns, net, control, f"{d}/stats"])
    bad = []
    try:
        time.sleep(1.5)
        tcp = socket.socket()
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        tcp.bind((f"{net}.1", 7777))
        tcp.listen(64)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((f"{net}.1", 7778))
        # Room for every datagram, however late this process reads (SO_RCVBUFFORCE, as root).
        udp.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)

        def accept():
            while True:
                try:
                    tcp.accept()[0].close()
                except OSError:
                    return

        threading.Thread(target=accept, daemon=True).start()

        def client(*args):
            out = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHECK_CLIENT,
                                  *args], capture_output=True, text=True, check=True).stdout
            return [None if x == "None" else float(x) for x in out.split()]

        def link(spec):
            open(control + ".tmp", "w").write(json.dumps(spec))
            os.replace(control + ".tmp", control)
            time.sleep(0.3)

        good = client("rtt", f"{net}.1", "3", "5")
        print(f"good link: connect {good} s")
        if None in good or max(good) > 0.3:
            bad.append("a good link is slow or drops")
        link({"delay": 2.0})
        slow = client("rtt", f"{net}.1", "3", "10")
        print(f"delay 2 s each way: connect {slow} s")
        if None in slow or not all(3.95 <= x <= 4.3 for x in slow):
            bad.append("2 s each way is not a 4 s round trip")
        link({"loss": 0.3})
        udp.settimeout(3)
        counted = []

        def count():
            got = 0
            try:
                while True:
                    udp.recv(16)
                    got += 1
            except socket.timeout:
                counted.append(got)

        reader = threading.Thread(target=count)
        reader.start()
        client("udp", f"{net}.1", "2000")
        reader.join()
        got = counted[0]
        lost = 1 - got / 2000
        time.sleep(1.2)
        with open(f"{d}/stats") as f:
            out = json.load(f)["out"]
        print(f"loss 30 %: {2000 - got} of 2000 datagrams lost ({lost:.1%}); "
              f"the forwarder read {out['forwarded'] + out['lost']} and dropped {out['lost']}")
        if not 0.27 <= lost <= 0.33:
            bad.append(f"loss {lost:.1%}, not 30 %")
        link({"down": True})
        dark = client("rtt", f"{net}.1", "2", "3")
        print(f"blackhole: connect {dark}")
        if any(x is not None for x in dark):
            bad.append("a connect went through the blackhole")
        link({"flap": [2, 2, 8]})
        t0 = time.monotonic()
        seen = []
        while time.monotonic() - t0 < 9.5:
            t = time.monotonic() - t0
            r = client("rtt", f"{net}.1", "1", "0.4")[0]
            phase = "up" if t >= 8 or (t % 4) < 2 else "down"
            seen.append((round(t, 1), phase, r is not None))
            time.sleep(0.3)
        # Around a switch a connect may go either way: only those well inside a phase count.
        wrong = [x for x in seen if (x[0] % 4) % 2 > 0.5 and (x[0] % 4) % 2 < 1.5
                 and (x[1] == "up") != x[2]]
        print(f"flap 2 s / 2 s for 8 s: {len(seen)} connects, {len(wrong)} against the phase")
        if wrong:
            bad.append(f"flap: {wrong}")
    finally:
        emu.send_signal(signal.SIGTERM)
        emu.wait()
        subprocess.run(["ip", "netns", "del", ns], check=False)
    if bad:
        print("linkemu check FAILED: " + "; ".join(bad))
        sys.exit(1)
    print("linkemu check: ok")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        check(*(sys.argv[2:4] or ["ekcm-linkcheck", "10.233.0"]))
    else:
        main()
