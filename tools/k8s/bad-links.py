#!/usr/bin/env python3
"""Bad links, measured (issue 44, section 1).

A controller manager in a network namespace whose only way to kube-apiserver is the link
emulator (tools/k8s/linkemu.py), a workload of Deployments run by this script's kubelet (it
binds each pod to a node and marks it Running and Ready, and ends pods being deleted) and
nodes whose Leases it renews from the host, so that the nodes stay healthy while only the
manager's link is bad. Each run:

  1. the link good; the manager started; DEPLOYMENTS Deployments x 5 created and waited for
     (every Deployment with one ReplicaSet and exactly its Ready pods);
  2. the fault on for its duration; 5 s in, every Deployment scaled to 3; halfway, to 4;
  3. the link good again ("heal"); wait until every Deployment has one ReplicaSet and exactly
     4 Ready pods, then 10 s more in which it must stay so.

Measured per run: seconds from the heal until the manager's first write of a pod, ReplicaSet
or Deployment (it acts again), and until converged (negative: converged while the link
was still bad, counted from the last scale), whether work was lost (a Deployment not
converged, more than one ReplicaSet, more pods than asked for, or more pods created than the
scaling needed), the manager's requests (kube-apiserver's audit log, by the namespace's
source address) from the fault until converged and in all, its peak RSS (VmHWM), its log
lines, and whether a node was marked not ready or tainted, or a pod deleted by anything but
the ReplicaSet controller, while the nodes' Leases were renewed all along.

Usage (root): bad-links.py STATE_DIR MANAGER=BINARY... FAULT...
  STATE_DIR  a control plane started with the audit policy (the e2e-links recipe starts it)
  MANAGER    edgekcm=target/release/edgekcm, upstream=.../kube-controller-manager
  FAULT      blackhole | flap | delay | loss (durations: FLAP_SECS, HOLD_SECS below)
The runs go fault by fault, the managers alternately; one TSV line per run to OUT.

Environment: API_PORT (6443), DEPLOYMENTS (100), BLACKHOLE_SECS (60), FLAP_SECS (300),
HOLD_SECS (delay and loss: 90), LINK_NET (10.232.0), LINK_NS (ekcm-links), OUT
(STATE_DIR/bad-links.tsv), CONVERGE_SECS (300: the longest wait after the heal).
"""

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
import base64
import calendar
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
NODES = 5
FAULTS = {
    "blackhole": lambda: ({"down": True}, float(os.environ.get("BLACKHOLE_SECS", 60))),
    "flap": lambda: (
        {"flap": [10, 10, float(os.environ.get("FLAP_SECS", 300))]},
        float(os.environ.get("FLAP_SECS", 300)),
    ),
    "delay": lambda: ({"delay": 2.0}, float(os.environ.get("HOLD_SECS", 90))),
    "loss": lambda: ({"loss": 0.3}, float(os.environ.get("HOLD_SECS", 90))),
}


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


class Api:
    """The admin's client: one keep-alive connection per thread."""

    def __init__(self, state, port):
        self.host, self.port = "127.0.0.1", port
        conf = open(f"{state}/admin.conf").read()

        def field(name):
            for line in conf.splitlines():
                line = line.strip()
                if line.startswith(name + ":"):
                    return base64.b64decode(line.split(":", 1)[1].strip().strip('"'))
            raise KeyError(name)

        for name, path in (("client-certificate-data", "admin.crt"), ("client-key-data", "admin.key")):
            with open(f"{state}/{path}", "wb") as f:
                f.write(field(name))
        self.ctx = ssl.create_default_context(cafile=f"{state}/pki/ca.crt")
        self.ctx.load_cert_chain(f"{state}/admin.crt", f"{state}/admin.key")
        self.local = threading.local()

    def req(self, method, path, body=None, ctype="application/json"):
        for attempt in range(5):
            c = getattr(self.local, "conn", None)
            if c is None:
                c = self.local.conn = http.client.HTTPSConnection(
                    self.host, self.port, context=self.ctx, timeout=30)
            try:
                data = None if body is None else json.dumps(body).encode()
                c.request(method, path, body=data, headers={"Content-Type": ctype})
                r = c.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else {})
            except (OSError, http.client.HTTPException, ValueError):
                self.local.conn = None
                time.sleep(0.2 * (attempt + 1))
        return 0, {}

    def get(self, path):
        return self.req("GET", path)[1]


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def ensure_nodes(api):
    """NODES Ready nodes, no taints, and their Leases."""
    for i in range(NODES):
        name = f"links-node-{i}"
        api.req("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}})
        api.req("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}},
                "application/merge-patch+json")
        now = now_rfc3339()
        api.req("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "500"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "links bench", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}]}}, "application/strategic-merge-patch+json")
        api.req("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}})


class Kubelet(threading.Thread):
    """Binds the namespace's pods to the nodes, makes them Running and Ready, ends pods being
    deleted, renews the nodes' Leases every 10 s, and notes nodes marked not ready or
    tainted by the manager."""

    def __init__(self, api, ns):
        super().__init__(daemon=True)
        self.api, self.ns, self.stop = api, ns, False
        self.pool = ThreadPoolExecutor(8)
        self.next_ip = 0
        self.bad_nodes = set()
        self.pods = []
        self.most_pods = 0

    def beat(self):
        t = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        for i in range(NODES):
            self.api.req("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/links-node-{i}",
                         {"spec": {"renewTime": t}}, "application/merge-patch+json")

    def act(self, p):
        name = p["metadata"]["name"]
        base = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        if p["metadata"].get("deletionTimestamp"):
            self.api.req("DELETE", base + "?gracePeriodSeconds=0")
            return
        if not p["spec"].get("nodeName"):
            self.next_ip += 1
            node = f"links-node-{self.next_ip % NODES}"
            self.api.req("POST", base + "/binding", {"apiVersion": "v1", "kind": "Binding",
                         "metadata": {"name": name}, "target": {"kind": "Node", "name": node}})
        now = now_rfc3339()
        ip = self.next_ip = self.next_ip + 1
        self.api.req("PATCH", base + "/status", {"status": {
            "phase": "Running", "podIP": f"10.88.{ip // 250 % 250}.{ip % 250 + 1}", "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
                           {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]}},
            "application/strategic-merge-patch+json")

    def run(self):
        last_beat = 0
        while not self.stop:
            if time.monotonic() - last_beat >= 10:
                last_beat = time.monotonic()
                self.pool.submit(self.beat)
            pods = self.api.get(f"/api/v1/namespaces/{self.ns}/pods").get("items", [])
            self.pods = pods
            live = {}
            for p in pods:
                if not p["metadata"].get("deletionTimestamp"):
                    app = p["metadata"]["labels"].get("app")
                    live[app] = live.get(app, 0) + 1
            self.most_pods = max([self.most_pods, *live.values()])
            todo = [p for p in pods if p["metadata"].get("deletionTimestamp") or not ready(p)]
            list(self.pool.map(self.act, todo))
            for n in self.api.get("/api/v1/nodes?labelSelector=kubernetes.io%2Fhostname").get("items", []):
                if not n["metadata"]["name"].startswith("links-node-"):
                    continue
                conds = {c["type"]: c["status"] for c in n.get("status", {}).get("conditions", [])}
                taints = [t["key"] for t in n["spec"].get("taints", []) or []]
                if conds.get("Ready") != "True" or taints:
                    self.bad_nodes.add(f'{n["metadata"]["name"]}:{conds.get("Ready")}:{",".join(taints)}')
            time.sleep(0.5)


def ready(p):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in p.get("status", {}).get("conditions", []))


def check(api, ns, n, replicas, pods):
    """Every Deployment with one ReplicaSet and exactly `replicas` Ready pods, not being
    deleted: (converged, how many are off)."""
    deps = api.get(f"/apis/apps/v1/namespaces/{ns}/deployments").get("items", [])
    rss = api.get(f"/apis/apps/v1/namespaces/{ns}/replicasets").get("items", [])
    if len(deps) != n:
        return False, n
    rs_of = {}
    for r in rss:
        rs_of.setdefault(r["metadata"]["labels"].get("app"), []).append(r)
    by_app = {}
    for p in pods:
        if p["metadata"].get("deletionTimestamp"):
            continue
        app = p["metadata"]["labels"].get("app")
        by_app.setdefault(app, []).append(p)
    off = 0
    for d in deps:
        app = d["metadata"]["name"]
        st = d.get("status", {})
        mine = by_app.get(app, [])
        good = (len(rs_of.get(app, [])) == 1 and len(mine) == replicas
                and all(ready(p) for p in mine)
                and st.get("observedGeneration") == d["metadata"]["generation"]
                and st.get("readyReplicas") == replicas and st.get("replicas") == replicas
                and st.get("availableReplicas") == replicas)
        off += not good
    return off == 0, off


def scale_all(api, ns, n, replicas):
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: api.req("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/d{i}/scale",
                                      {"spec": {"replicas": replicas}}, "application/merge-patch+json"),
                    range(n)))


def deployment(i, replicas):
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"d{i}"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": f"d{i}"}},
                     "template": {"metadata": {"labels": {"app": f"d{i}"}}, "spec": {
                         "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}


def audit(path, start_byte, ip):
    """The manager's requests (one per audit ID) after `start_byte`: (received epoch, verb,
    resource, user)."""
    out = {}
    with open(path, "rb") as f:
        f.seek(start_byte)
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if (e.get("sourceIPs") or [""])[0] != ip:
                continue
            ts = e["requestReceivedTimestamp"]
            t = calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
            t += float("0" + ts[19:-1]) if len(ts) > 20 else 0
            ref = e.get("objectRef", {})
            out[e["auditID"]] = (t, e["verb"], ref.get("resource", "-"), e["user"]["username"])
    return list(out.values())


def kubeconfig(state, port, net):
    src = open(f"{state}/controller-manager.conf").read()
    out = []
    for line in src.splitlines():
        if line.strip().startswith("server:"):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}server: "https://{net}.1:{port}"')
            out.append(f'{indent}tls-server-name: "kubernetes"')
        else:
            out.append(line)
    path = f"{state}/links-manager.conf"
    open(path, "w").write("\n".join(out) + "\n")
    return path


def set_link(state, spec):
    tmp = f"{state}/link.json.tmp"
    open(tmp, "w").write(json.dumps(spec))
    os.replace(tmp, f"{state}/link.json")


def vm(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def wait_converged(api, ns, n, replicas, kubelet, timeout):
    t0 = time.monotonic()
    off = n
    while time.monotonic() - t0 < timeout:
        ok, off = check(api, ns, n, replicas, kubelet.pods)
        if ok:
            return time.time(), 0
        time.sleep(0.5)
    return None, off


def one_run(ctx, run, fault, mname, binary):
    api, state, n = ctx["api"], ctx["state"], ctx["n"]
    ns = f"links-{run}"
    spec, secs = FAULTS[fault]()
    api.req("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    ensure_nodes(api)
    set_link(state, {})
    mlog = f"{state}/links-{run}-{mname}-{fault}.log"
    audit_from = os.path.getsize(ctx["audit"])
    cmd = ["ip", "netns", "exec", ctx["netns"], binary, f"--kubeconfig={ctx['kubeconfig']}",
           f"--root-ca-file={state}/pki/ca.crt", "--use-service-account-credentials=true",
           f"--service-account-private-key-file={state}/pki/sa.key", "--leader-elect=false",
           "--secure-port=0", "--v=2"]
    proc = subprocess.Popen(cmd, stdout=open(mlog, "w"), stderr=subprocess.STDOUT)
    kubelet = Kubelet(api, ns)
    kubelet.start()
    t_start = time.time()
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: api.req("POST", f"/apis/apps/v1/namespaces/{ns}/deployments",
                                      deployment(i, 5)), range(n)))
    base, off = wait_converged(api, ns, n, 5, kubelet, 300)
    row = {"run": run, "fault": fault, "manager": mname, "first_converge_s": base and round(base - t_start, 1)}
    if base is None:
        log(f"run {run}: {mname} never converged before the fault ({off} off)")
    kubelet.bad_nodes.clear()
    t_fault = time.time()
    set_link(state, spec)
    log(f"run {run}: {mname} {fault} {spec} for {secs:.0f} s")
    time.sleep(5)
    scale_all(api, ns, n, 3)
    time.sleep(max(0, t_fault + secs / 2 - time.time()))
    scale_all(api, ns, n, 4)
    t_last_scale = time.time()
    # Converged while the link is still bad counts too.
    conv = None
    while time.time() < t_fault + secs:
        if conv is None and check(api, ns, n, 4, kubelet.pods)[0]:
            conv = time.time()
        time.sleep(0.5)
    set_link(state, {})
    t_heal = time.time()
    if conv is None or not check(api, ns, n, 4, kubelet.pods)[0]:
        conv, off = wait_converged(api, ns, n, 4, kubelet, ctx["converge"])
    else:
        off = 0
    # Stays converged for 10 s.
    stayed = conv is not None
    t_end = time.time() + 10
    while stayed and time.time() < t_end:
        stayed = check(api, ns, n, 4, kubelet.pods)[0]
        time.sleep(0.5)
    t_done = time.time()
    time.sleep(1)
    reqs = audit(ctx["audit"], audit_from, f"{ctx['net']}.2")
    pods_created = sum(1 for r in reqs if r[1] == "create" and r[2] == "pods")
    pod_deletes = [r for r in reqs if r[1] == "delete" and r[2] == "pods"]
    writes_after_heal = [r[0] for r in reqs if r[0] >= t_heal and r[1] in ("create", "delete", "update", "patch")
                         and r[2] in ("pods", "replicasets", "deployments")]
    others = sorted({r[3].split(":")[-1] for r in pod_deletes if not r[3].endswith("replicaset-controller")})
    row.update({
        "fault_s": round(secs),
        "heal_epoch": round(t_heal, 3),
        "first_write_after_heal_s": round(min(writes_after_heal) - t_heal, 2) if writes_after_heal else None,
        "converge_after_heal_s": None if conv is None else round(conv - t_heal, 1),
        "converge_after_last_scale_s": None if conv is None else round(conv - t_last_scale, 1),
        "work_lost": "no" if (stayed and pods_created <= 6 * n and kubelet.most_pods <= 5) else
        f"yes: off={off} stayed={stayed} created={pods_created} most_pods={kubelet.most_pods}",
        "pods_created": pods_created,
        "pods_deleted": len(pod_deletes),
        "requests_fault_to_converged": sum(1 for r in reqs if t_fault <= r[0] <= (conv or t_done)),
        "requests_total": len(reqs),
        "peak_rss_mb": vm(proc.pid, "VmHWM"),
        "log_lines": None,
        "nodes_marked": ";".join(sorted(kubelet.bad_nodes)) or "none",
        "pods_deleted_by_others": ",".join(others) or "none",
        "alive": proc.poll() is None,
    })
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    row["log_lines"] = sum(1 for _ in open(mlog, errors="replace"))
    kubelet.stop = True
    kubelet.join()
    # Clean up without a manager: the bench's own deletes, then the namespace finalized.
    for path in (f"/apis/apps/v1/namespaces/{ns}/deployments", f"/apis/apps/v1/namespaces/{ns}/replicasets"):
        api.req("DELETE", path)
    api.req("DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
    api.req("DELETE", f"/api/v1/namespaces/{ns}")
    api.req("PUT", f"/api/v1/namespaces/{ns}/finalize", {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns}, "spec": {"finalizers": []}})
    log(f"run {run}: {json.dumps(row)}")
    return row


COLUMNS = ["run", "fault", "manager", "fault_s", "first_converge_s", "heal_epoch",
           "first_write_after_heal_s", "converge_after_heal_s",
           "converge_after_last_scale_s", "work_lost", "pods_created", "pods_deleted",
           "requests_fault_to_converged", "requests_total", "peak_rss_mb", "log_lines",
           "nodes_marked", "pods_deleted_by_others", "alive"]


def main():
    if os.getuid() != 0:
        print("bad-links: skipped: needs root (network namespaces, TUN devices)")
        return
    state = os.path.abspath(sys.argv[1])
    managers = [a.split("=", 1) for a in sys.argv[2:] if "=" in a]
    faults = [a for a in sys.argv[2:] if "=" not in a] or ["blackhole", "flap", "delay", "loss"]
    port = int(os.environ.get("API_PORT", 6443))
    net = os.environ.get("LINK_NET", "10.232.0")
    netns = os.environ.get("LINK_NS", "ekcm-links")
    out = os.environ.get("OUT", f"{state}/bad-links.tsv")
    set_link(state, {})
    emu = subprocess.Popen([sys.executable, f"{HERE}/linkemu.py", netns, net, f"{state}/link.json",
                            f"{state}/link.stats"])
    try:
        time.sleep(1.5)
        if emu.poll() is not None:
            raise SystemExit("the link emulator did not start")
        ctx = {"api": Api(state, port), "state": state, "n": int(os.environ.get("DEPLOYMENTS", 100)),
               "audit": f"{state}/audit.log", "net": net, "netns": netns,
               "kubeconfig": kubeconfig(state, port, net),
               "converge": float(os.environ.get("CONVERGE_SECS", 300))}
        if not os.path.exists(out):
            open(out, "w").write("\t".join(COLUMNS) + "\n")
        run = int(time.time()) % 100000
        for fault in faults:
            for mname, binary in managers:
                run += 1
                row = one_run(ctx, run, fault, mname, binary)
                with open(out, "a") as f:
                    f.write("\t".join(str(row.get(c)) for c in COLUMNS) + "\n")
    finally:
        emu.send_signal(signal.SIGTERM)
        emu.wait()
        subprocess.run(["ip", "netns", "del", netns], check=False)


if __name__ == "__main__":
    main()
