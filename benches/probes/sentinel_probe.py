#!/usr/bin/env python3
"""Issue 36's Sentinel probe: 8 loops of `lockwarden run` through three Sentinels
while the master is killed (t+10 s), comes back (t+22 s) and the new master is
frozen for 3 s (t+32 s); or a replica is frozen 10 s or killed. Prints the
sections' overlaps (ordered: the later holder's token is higher and the earlier
was told it lost the lock, exit 76), the exit codes, and the longest blind gap
after each fault. Not part of the test suite: a whole run takes about 75 s.

    cargo build --release --features cli --bin lockwarden
    python3 benches/probes/sentinel_probe.py failover|replica-frozen|replica-killed

Environment: LW (the lockwarden binary, default target/release/lockwarden),
REDIS_SERVER_BIN (default redis-server), PROBE_SECS (60), LW_VERBOSE=1 (each
run's -vv log is kept in records.json in the printed log folder)."""
import os, signal, socket, subprocess, sys, tempfile, threading, time, random

BIN = os.environ.get("LW", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "target", "release", "lockwarden"))
SERVER = os.environ.get("REDIS_SERVER_BIN", "redis-server")
MODE = sys.argv[1] if len(sys.argv) > 1 else "failover"
RUN = float(os.environ.get("PROBE_SECS", "60"))
LOOPS = 8

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

tmp = tempfile.mkdtemp(prefix="probe-")
def start_server(port, extra=()):
    log = open(f"{tmp}/redis-{port}.log", "a")
    return subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", tmp, "--dbfilename", f"d{port}.rdb", *extra],
                            stdout=log, stderr=log)
def wait_ping(port, secs=10):
    end = time.time() + secs
    while time.time() < end:
        if subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG":
            return
        time.sleep(0.05)
    raise SystemExit(f"no PING on {port}")

mport, rport = free_port(), free_port()
procs = {mport: start_server(mport)}; wait_ping(mport)
procs[rport] = start_server(rport, ["--replicaof", "127.0.0.1", str(mport)]); wait_ping(rport)
sports = []
sent = []
for i in range(3):
    p = free_port(); sports.append(p)
    conf = f"{tmp}/sentinel-{p}.conf"
    open(conf, "w").write(f"port {p}\nbind 127.0.0.1\nsentinel monitor m 127.0.0.1 {mport} 2\n"
                          f"sentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 5000\n"
                          f"sentinel parallel-syncs m 1\n")
    log = open(f"{tmp}/sentinel-{p}.log", "w")
    sent.append(subprocess.Popen([SERVER, conf, "--sentinel"], stdout=log, stderr=log))
for p in sports: wait_ping(p)
# replica synced
end = time.time() + 20
while time.time() < end:
    info = subprocess.run(["redis-cli", "-p", str(mport), "INFO", "replication"], capture_output=True, text=True).stdout
    if "state=online" in info: break
    time.sleep(0.1)
time.sleep(2)  # let the Sentinels discover the replica and each other

def master_port():
    out = subprocess.run(["redis-cli", "-p", str(sports[0]), "SENTINEL", "get-master-addr-by-name", "m"],
                         capture_output=True, text=True).stdout.split()
    return int(out[1]) if len(out) > 1 else None

args = [BIN]
for p in sports: args += ["--sentinel", f"redis://127.0.0.1:{p}"]
args += ["--master-name", "m"] + (["-vv"] if os.environ.get("LW_VERBOSE") else [])
records = []  # (start, end, token, exit, pid)
lock = threading.Lock()
t0 = time.time()
stop_at = t0 + RUN

def loop(i):
    while time.time() < stop_at:
        ms = random.randint(20, 50)
        cmd = args + ["run", "sent0", "--wait", "20s", "--", "sh", "-c",
                      f'echo "S $(date +%s.%N) $LOCKWARDEN_TOKEN"; sleep 0.0{ms}; echo "E $(date +%s.%N)"']
        t_start = time.time()
        p = subprocess.run(cmd, capture_output=True, text=True)
        done = time.time()
        s = e = tok = None
        for line in p.stdout.splitlines():
            f = line.split()
            if f and f[0] == "S": s, tok = float(f[1]), int(f[2])
            if f and f[0] == "E": e = float(f[1])
        if s is not None and e is None: e = done
        with lock:
            records.append((s, e, tok, p.returncode, p.stderr.strip().splitlines()[-1:] if p.returncode else [], p.stderr, t_start))

threads = [threading.Thread(target=loop, args=(i,)) for i in range(LOOPS)]
for t in threads: t.start()
faults = []
def at(sec):
    d = t0 + sec - time.time()
    if d > 0: time.sleep(d)
try:
    if MODE == "failover":
        at(10); faults.append(("master killed", time.time())); procs[mport].send_signal(signal.SIGKILL)
        at(22); procs[mport] = start_server(mport); faults.append(("old master back", time.time()))
        at(32); nm = master_port(); faults.append((f"new master {nm} frozen 3 s", time.time()))
        procs[nm].send_signal(signal.SIGSTOP)
        at(35); procs[nm].send_signal(signal.SIGCONT)
    elif MODE == "replica-frozen":
        at(10); faults.append(("replica frozen 10 s", time.time())); procs[rport].send_signal(signal.SIGSTOP)
        at(20); procs[rport].send_signal(signal.SIGCONT); faults.append(("replica resumed", time.time()))
    elif MODE == "replica-killed":
        at(10); faults.append(("replica killed", time.time())); procs[rport].send_signal(signal.SIGKILL)
    for t in threads: t.join()
finally:
    for p in list(procs.values()) + sent:
        try: p.send_signal(signal.SIGCONT); p.kill()
        except Exception: pass

secs = sorted([r for r in records if r[0] is not None], key=lambda r: r[0])
over = ordered = untold = 0
for i, a in enumerate(secs):
    for b in secs[i+1:]:
        if b[0] >= a[1]: break
        over += 1
        if b[2] > a[2] and a[3] == 76: ordered += 1
        else: untold += 1
codes = {}
for r in records: codes[r[3]] = codes.get(r[3], 0) + 1
print(f"mode={MODE} server={os.path.basename(SERVER)} runs={len(records)} sections={len(secs)} exit codes={codes}")
print(f"overlaps={over} ordered(earlier told lost, later higher token)={ordered} unordered/untold={untold}")
toks = [r[2] for r in secs]
print(f"tokens strictly rising in start order: {all(x < y for x, y in zip(toks, toks[1:]))}")
bounds = [f[1] for f in faults] + [stop_at]
for k, (name, ft) in enumerate(faults):
    win_end = bounds[k+1]
    # longest gap with no section running, from the fault to the next fault
    last = ft
    ends = [r[1] or r[0] for r in secs if r[0] < ft]
    busy_until = max([e for e in ends if e > ft], default=ft)
    gap = 0.0; cur = max(ft, busy_until)
    for r in secs:
        if r[0] < ft: continue
        if r[0] > win_end: break
        gap = max(gap, r[0] - cur); cur = max(cur, r[1] or r[0])
    print(f"  {name} at t+{ft-t0:.1f}s: longest blind gap {gap:.2f}s")
fails = [r for r in records if r[3] not in (0,)]
for r in fails[:12]: print("   exit", r[3], r[4])
print("logs in", tmp)
import json
json.dump({"t0": t0, "faults": faults, "records": records}, open(f"{tmp}/records.json", "w"))
shown = 0
for i, a in enumerate(secs):
    for b in secs[i+1:]:
        if b[0] >= a[1]: break
        shown += 1
        if shown <= 10:
            print(f"   overlap: a t+{a[0]-t0:.3f}..{a[1]-t0:.3f} tok {a[2]} exit {a[3]}; b t+{b[0]-t0:.3f}..{b[1]-t0:.3f} tok {b[2]} exit {b[3]}")
