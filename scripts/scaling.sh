#!/usr/bin/env bash
# The many-core scaling study (docs/bench.md, "Scaling study"): tern -t N, memcached -t N and
# N single-thread tern instances behind client-side ketama, for N = 1, 2, 4, 8 server cores,
# each at saturation (closed loop, pipelined) and at the SLO (tern bench slo --p999 2ms, open
# loop, unpipelined, 50 connections per server core), with the servers' CPU per request and the
# generator's own CPU; tern and memcached also at saturation with hot keys (zipf 1.2 instead of
# uniform keys), reported as a share of the uniform throughput.
#
#   scripts/scaling.sh            # the full study (estimated 8 minutes on 16 cores)
#   scripts/scaling.sh --quick    # N = 1, short runs (a 2-core machine)
#
# Environment: TERN (default target/release/tern), MEMCACHED (default: memcached on PATH),
# OUT (default target/scaling), NS (the N to try, default "1 2 4 8"; --quick: "1"), CPUS (the
# CPUs to use, space-separated; default: every CPU this process may run on), SPIN (the SLO
# probes' tern bench --spin, default 1ms: how long before each send a generator thread stops
# sleeping; 50us leaves its CPU idle between sends).
# Needs python3 and taskset; no network, cargo or package manager.
#
# Of the C CPUs this process may run on, a server gets the first N (taskset; tern also --pin),
# tern bench the other C - N with one generator thread per CPU (not pinned: see docs/bench.md);
# an N with N >= C is skipped.
# Writes OUT/raw/*.json (each run: tern bench's JSON plus the generator's CPU), OUT/scaling.json
# (everything), OUT/scaling.md (the table), OUT/scaling.svg (throughput against N), OUT/logs/,
# and prints the table.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "scaling.sh: $*" >&2; exit 1; }

quick=0
for arg in "$@"; do
  case $arg in
    --quick) quick=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $arg" ;;
  esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
TERN=${TERN:-$root/target/release/tern}
MEMCACHED=${MEMCACHED:-$(command -v memcached || true)}
OUT=${OUT:-$root/target/scaling}
command -v python3 >/dev/null || die "needs python3"
command -v taskset >/dev/null || die "needs taskset (util-linux)"
[ -x "$TERN" ] || die "no tern binary at '$TERN' (set TERN=path)"
if [ -z "$MEMCACHED" ] || [ ! -x "$MEMCACHED" ]; then die "no memcached binary (set MEMCACHED=path)"; fi
TERN=$(cd "$(dirname "$TERN")" && pwd)/$(basename "$TERN")
MEMCACHED=$(cd "$(dirname "$MEMCACHED")" && pwd)/$(basename "$MEMCACHED")
mkdir -p "$OUT/raw" "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/raw/*.json "$OUT"/raw/*.stdout "$OUT"/raw/*.stderr "$OUT"/logs/*.log

# The study's parameters.
KEYS=100000 VALUE=256 MIX=get:8,set:2 P999=2ms
HOT_ZIPF=1.2                 # the hot-key run's key distribution (tern and memcached only)
SAT_CONNS=32 SAT_PIPELINE=16 # per generator thread (a pool: divided over its servers)
SLO_CONNS_PER_CORE=50        # unpipelined connections per server core
# An SLO rate passes when most of its REPEATS probes do (tern bench slo --repeats): one probe
# a rate let a single stall of the machine decide the search (docs/performance.md, 2026-11-26).
REPEATS=3
SPIN=${SPIN:-1ms}
if [ "$quick" = 1 ]; then
  NS=${NS:-1}
  SAT_WARMUP=0.5 SAT_SECS=2 SLO_WARMUP=0.25 SLO_SECS=1 PRECISION=0.1
else
  NS=${NS:-1 2 4 8}
  SAT_WARMUP=1 SAT_SECS=5 SLO_WARMUP=0.25 SLO_SECS=1 PRECISION=0.1
fi
KINDS="tern memcached ketama"
# each run's time limit: three times what it should take, and a margin (slo: 60 probes' worth)
read -r SAT_LIMIT SLO_LIMIT < <(awk -v a="$SAT_WARMUP" -v b="$SAT_SECS" -v c="$SLO_WARMUP" -v d="$SLO_SECS" \
  'BEGIN { print int(3 * (a + b) + 20), int(60 * (c + d) + 30) }')

read -r -a cpus <<<"${CPUS:-$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')}"
ncpu=${#cpus[@]}
join() { local IFS=,; echo "$*"; }

# --- planning and the time estimate ------------------------------------------------------------
read -r -a ns <<<"$NS"
runnable=()
for n in "${ns[@]}"; do
  if [ "$n" -lt "$ncpu" ]; then runnable+=("$n"); else echo "N=$n skipped: needs more than $n CPUs, have $ncpu"; fi
done
nkinds=$(wc -w <<<"$KINDS")
estimate=$(python3 - "$nkinds" "${#runnable[@]}" "$SAT_WARMUP" "$SAT_SECS" "$SLO_WARMUP" "$SLO_SECS" "$PRECISION" "$REPEATS" <<'PY'
import math, sys
kinds, ns, sw, sd, lw, ld, prec, repeats = (float(a) for a in sys.argv[1:])
# slo: a closed-loop sizing run, the top rate (1.2x its throughput) and the bottom one (1%), then
# bisection until the bracket is within prec of the rate: assume the SLO rate is at least 30% of
# the top (a lower one takes a rate or two more); a rate takes a majority of its repeats, and
# one more probe for a split verdict now and then
rates = 2 + math.ceil(math.log2(1.2 / (prec * 0.3)))
probes = 1 + rates * (repeats // 2 + 1.2)
per_config = 1.0 + (0.7 + sw + sd) + (0.5 + probes * (lw + ld + 0.2))
hot = 2 * ns * (0.7 + sw + sd)  # tern's and memcached's zipf saturation runs
print(round(kinds * ns * per_config + hot))
PY
)
python3 - "$OUT/plan.json" <<PY
import json, sys, time, platform
json.dump({
  "mode": "quick" if $quick else "full", "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
  "host": platform.node(), "loadavg_start": open("/proc/loadavg").read().split()[:3], "cpus": [${cpus[*]/%/,}], "ns": [$(join "${ns[@]}")], "runnable": [$(join "${runnable[@]}")],
  "kinds": "$KINDS".split(), "tern": "$TERN", "memcached": "$MEMCACHED",
  "tern_version": """$("$TERN" --version 2>&1 | head -1)""",
  "memcached_version": """$("$MEMCACHED" -V 2>&1 | head -1)""",
  "params": {"keys": $KEYS, "value_size": $VALUE, "mix": "$MIX", "p999": "$P999", "hot_zipf": $HOT_ZIPF,
    "sat": {"connections_per_thread": $SAT_CONNS, "pipeline": $SAT_PIPELINE,
            "warmup_s": $SAT_WARMUP, "duration_s": $SAT_SECS},
    "slo": {"connections_per_server_core": $SLO_CONNS_PER_CORE, "pipeline": 1, "arrivals": "poisson",
            "warmup_s": $SLO_WARMUP, "probe_s": $SLO_SECS, "precision": $PRECISION, "repeats": $REPEATS, "spin": "$SPIN"}},
  "estimated_s": $estimate,
}, open(sys.argv[1], "w"), indent=1)
PY
echo "scaling.sh: $ncpu CPUs (${cpus[*]}), N = ${runnable[*]:-none}, servers: $KINDS"
echo "scaling.sh: $(( nkinds * ${#runnable[@]} )) configurations, estimated time $(( estimate / 60 )) min $(( estimate % 60 )) s; results in $OUT"

# --- servers -----------------------------------------------------------------------------------
started=() measuring=
stop_servers() {
  local pid
  if [ -n "$measuring" ]; then kill "$measuring" 2>/dev/null || true; wait "$measuring" 2>/dev/null || true; measuring=; fi
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${started[@]}"; do
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  started=()
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

free_ports() { # count: that many distinct free TCP ports
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
PY
}

start_server() { # log cpulist port command... (appends the pid to $started)
  local log=$1 cpulist=$2 port=$3; shift 3
  taskset -c "$cpulist" "$@" >>"$log" 2>&1 &
  local pid=$!
  started+=("$pid")
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || die "server exited at start: $* (see $log)"
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "server not listening on $port after 10 s: $*"
}

# --- one measured tern bench run ---------------------------------------------------------------
# measure OUTFILE TIMEOUT GEN_CPUS SERVER_PIDS META_JSON -- bench args...
# Runs `taskset -c GEN_CPUS $TERN bench args...`, samples its CPU time and the servers' (every
# 50 ms) and writes {meta, cmd, rc, wall_s, timed_out, gen_cpu_s, gen_cores_busy, servers_cpu_us_per_request, report}.
measure() { # in the background, so that a signal to the script is acted on at once
  python3 - "$@" <<'PY' &
import glob, json, os, signal, subprocess, sys, time
out, timeout, gen_cpus, spids, meta = sys.argv[1:6]
cmd = ["taskset", "-c", gen_cpus] + sys.argv[7:]
timeout = float(timeout)
spids = [int(p) for p in spids.split(",") if p]
hz = os.sysconf("SC_CLK_TCK")

def gen_cpu(pid):
    try:
        s = open(f"/proc/{pid}/stat").read()
        f = s[s.rindex(")") + 2:].split()
        return (int(f[11]) + int(f[12])) / hz
    except (OSError, ValueError, IndexError):
        return None

def servers_ns():
    total = 0
    for pid in spids:
        for path in glob.glob(f"/proc/{pid}/task/*/schedstat"):
            try:
                total += int(open(path).read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total

def at(samples, t):  # linear interpolation of (time, value) samples at time t
    pts = [(x, v) for x, v in samples if v is not None]
    if not pts or t <= pts[0][0]:
        return pts[0][1] if pts else None
    for (x0, v0), (x1, v1) in zip(pts, pts[1:]):
        if x0 <= t <= x1:
            return v0 + (v1 - v0) * (t - x0) / (x1 - x0) if x1 > x0 else v1
    return pts[-1][1]

t0 = time.monotonic()
with open(out + ".stdout", "wb") as so, open(out + ".stderr", "wb") as se:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=so, stderr=se)
def stop(signum, frame):  # the script is stopping: take the generator with us
    p.kill()
    sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
gen, srv, timed_out, deadline = [], [], False, None
while True:
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
    now = time.monotonic()
    if pid:
        break
    if not timed_out and now - t0 > timeout:
        timed_out, deadline = True, now + 3
        p.send_signal(signal.SIGTERM)
    if deadline and now > deadline:
        p.kill()
        deadline = None
    gen.append((now, gen_cpu(p.pid)))
    srv.append((now, servers_ns()))
    time.sleep(0.05)
p.returncode = os.waitstatus_to_exitcode(status)
t_exit, srv_end = now, servers_ns()
gen_total = ru.ru_utime + ru.ru_stime
try:
    report = json.load(open(out + ".stdout"))
except (OSError, ValueError):
    report = None
res = {"meta": json.loads(meta), "cmd": cmd, "rc": p.returncode, "timed_out": timed_out,
       "wall_s": t_exit - t0, "gen_cpu_s": gen_total, "gen_cores_busy": gen_total / (t_exit - t0),
       "gen_cores_busy_measured": None, "servers_cpu_us_per_request": None, "report": report}
# A closed-loop run's measured phase is its last `seconds` before exit (the report is printed
# right after it): the generator's and the servers' CPU over that window.
if report and report.get("seconds") and report.get("schema") == "tern-bench/1":
    secs = report["seconds"]
    g = at(gen, t_exit - secs)
    if g is not None:
        res["gen_cores_busy_measured"] = (gen_total - g) / secs
    s = at(srv, t_exit - secs)
    if spids and s is not None and report.get("requests"):
        res["servers_cpu_us_per_request"] = (srv_end - s) / 1e3 / report["requests"]
json.dump(res, open(out, "w"), indent=1)
PY
  measuring=$!
  wait "$measuring"
  measuring=
}

# --- the study ---------------------------------------------------------------------------------
common=(-m "$MIX" -v "$VALUE" -k "$KEYS" --seed 1 -q --json)
is_root=0; [ "$(id -u)" = 0 ] && is_root=1
t_start=$SECONDS
for n in "${runnable[@]}"; do
  srv_cpus=$(join "${cpus[@]:0:n}")
  gen_cpus=$(join "${cpus[@]:n}")
  threads=$(( ncpu - n ))
  for kind in $KINDS; do
    log="$OUT/logs/$kind-$n.log"
    servers=() pids=()
    case $kind in
      tern | memcached)
        port=$(free_ports 1)
        if [ "$kind" = tern ]; then
          start_server "$log" "$srv_cpus" "$port" "$TERN" serve -t "$n" -m 1024 -p "$port" -l 127.0.0.1 --pin "$srv_cpus"
        else
          user=(); [ "$is_root" = 1 ] && user=(-u root)
          start_server "$log" "$srv_cpus" "$port" "$MEMCACHED" -t "$n" -m 1024 -p "$port" -l 127.0.0.1 -U 0 "${user[@]}"
        fi
        servers=(-s "127.0.0.1:$port") pids=("${started[@]}")
        sat_c=$SAT_CONNS
        slo_c=$(( (SLO_CONNS_PER_CORE * n + threads - 1) / threads ))
        ;;
      ketama)
        read -r -a ports < <(free_ports "$n")
        for i in $(seq 0 $(( n - 1 ))); do
          start_server "$log" "${cpus[i]}" "${ports[i]}" "$TERN" serve -t 1 -m 1024 -p "${ports[i]}" -l 127.0.0.1 --pin "${cpus[i]}"
          servers+=(-s "127.0.0.1:${ports[i]}")
        done
        pids=("${started[@]}")
        sat_c=$(( (SAT_CONNS + n - 1) / n ))                          # per thread per server
        slo_c=$(( (SLO_CONNS_PER_CORE + threads - 1) / threads ))     # per thread per server
        ;;
    esac
    spids=$(join "${pids[@]}")
    spid_arg=(); [ "$kind" != ketama ] && spid_arg=(--server-pid "${pids[0]}")
    meta() { printf '{"kind":"%s","n":%d,"phase":"%s","server_cpus":"%s","gen_cpus":"%s","threads":%d,"connections":%d,"servers":%d}' \
      "$kind" "$n" "$1" "$srv_cpus" "$gen_cpus" "$threads" "$2" "$(( ${#servers[@]} / 2 ))"; }

    echo "[$(( SECONDS - t_start ))s] $kind N=$n: saturation (-t $threads -c $sat_c -p $SAT_PIPELINE, server CPUs $srv_cpus, generator $gen_cpus)"
    measure "$OUT/raw/$kind-$n-sat.json" "$SAT_LIMIT" "$gen_cpus" "$spids" "$(meta sat "$sat_c")" -- \
      "$TERN" bench run "${servers[@]}" "${spid_arg[@]}" -t "$threads" -c "$sat_c" -p "$SAT_PIPELINE" \
      --warmup "${SAT_WARMUP}s" -d "${SAT_SECS}s" "${common[@]}"
    echo "[$(( SECONDS - t_start ))s] $kind N=$n: SLO p99.9 <= $P999 (-t $threads -c $slo_c -p 1, poisson)"
    measure "$OUT/raw/$kind-$n-slo.json" "$SLO_LIMIT" "$gen_cpus" "$spids" "$(meta slo "$slo_c")" -- \
      "$TERN" bench slo "${servers[@]}" "${spid_arg[@]}" -t "$threads" -c "$slo_c" -p 1 --arrivals poisson \
      --p999 "$P999" --precision "$PRECISION" --repeats "$REPEATS" --spin "$SPIN" --warmup "${SLO_WARMUP}s" -d "${SLO_SECS}s" "${common[@]}"
    if [ "$kind" != ketama ]; then
      echo "[$(( SECONDS - t_start ))s] $kind N=$n: saturation, hot keys (zipf $HOT_ZIPF)"
      measure "$OUT/raw/$kind-$n-hot.json" "$SAT_LIMIT" "$gen_cpus" "$spids" "$(meta hot "$sat_c")" -- \
        "$TERN" bench run "${servers[@]}" "${spid_arg[@]}" -t "$threads" -c "$sat_c" -p "$SAT_PIPELINE" \
        --warmup "${SAT_WARMUP}s" -d "${SAT_SECS}s" --key-distribution "zipf:$HOT_ZIPF" "${common[@]}"
    fi
    stop_servers
  done
done
echo "scaling.sh: measured in $(( SECONDS - t_start )) s (estimated $estimate s)"

# --- the report: scaling.json, scaling.md, scaling.svg -----------------------------------------
python3 - "$OUT" "$(( SECONDS - t_start ))" <<'PY'
import glob, json, math, os, sys
out, elapsed = sys.argv[1], int(sys.argv[2])
plan = json.load(open(f"{out}/plan.json"))
plan["elapsed_s"] = elapsed
plan["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/raw/*.json"))]
by = {(r["meta"]["kind"], r["meta"]["n"], r["meta"]["phase"]): r for r in runs}
label = {"tern": "tern -t N", "memcached": "memcached -t N", "ketama": "N x tern -t 1, ketama"}

def num(x, digits=0):
    return "-" if x is None else f"{x:,.{digits}f}"

rows, table = [], []
for kind in plan["kinds"]:
    base_sat = base_slo = None
    for n in plan["ns"]:
        row = {"kind": kind, "n": n, "skipped": n not in plan["runnable"]}
        sat, slo, hot = by.get((kind, n, "sat")), by.get((kind, n, "slo")), by.get((kind, n, "hot"))
        if sat:
            rep = sat["report"] or {}
            row["sat_ops"] = rep.get("ops_per_sec")
            cpu = (rep.get("cpu") or {}).get("server_cpu_us_per_request")
            row["cpu_us_per_req"] = cpu if cpu is not None else sat["servers_cpu_us_per_request"]
            row["sat_p999_us"] = (rep.get("latency_us") or {}).get("p999")
            row["sat_errors"] = rep.get("errors_total")
            row["gen_threads"] = sat["meta"]["threads"]
            busy = sat["gen_cores_busy_measured"]
            row["gen_cpu_pct"] = None if busy is None else 100 * busy / sat["meta"]["threads"]
            row["sat_rc"] = sat["rc"]
        if hot:
            row["hot_ops"] = (hot["report"] or {}).get("ops_per_sec")
            if row["hot_ops"] and row.get("sat_ops"):
                row["hot_share"] = row["hot_ops"] / row["sat_ops"]
        if slo:
            rep = slo["report"] or {}
            best = rep.get("best")
            row["slo_rc"] = slo["rc"]
            if best:
                row["slo_ops"] = best.get("ops_per_sec")
                row["slo_rate"] = rep.get("best_rate")
                row["slo_p999_us"] = best["latency_us"]["p999"]
            elif rep.get("probes"):
                low = min(rep["probes"], key=lambda p: p["rate"])
                row["slo_lowest_probe"] = {"rate": low["rate"], "p999_us": low["report"]["latency_us"]["p999"]}
            row["slo_probes"] = len(rep.get("probes") or [])
        if n == 1:
            base_sat, base_slo = row.get("sat_ops"), row.get("slo_ops")
        if base_sat and row.get("sat_ops"):
            row["speedup_sat"] = row["sat_ops"] / base_sat
        if base_slo and row.get("slo_ops"):
            row["speedup_slo"] = row["slo_ops"] / base_slo
        rows.append(row)
        name = label[kind].replace("N", str(n)) if kind != "ketama" else f"{n} x tern -t 1, ketama"
        if row["skipped"]:
            table.append(f"| {name} | {n} | skipped: needs more than {n} CPUs, have {len(plan['cpus'])} | | | | | | | |")
            continue
        if "slo_ops" in row:
            slo_ops, slo_p = num(row["slo_ops"]), num(row["slo_p999_us"])
        elif "slo_lowest_probe" in row:
            lp = row["slo_lowest_probe"]
            slo_ops, slo_p = f"none met (lowest probe {num(lp['rate'])}/s)", num(lp["p999_us"])
        else:
            slo_ops, slo_p = f"failed (rc {row.get('slo_rc')})", "-"
        spd = lambda k: "-" if k not in row else f"{row[k]:.2f}x"
        gen = "-" if row.get("gen_cpu_pct") is None else f"{row['gen_cpu_pct']:.0f}% of {row['gen_threads']}"
        if (row.get("gen_cpu_pct") or 0) >= 90:
            gen += " (generator-bound?)"
        if not row.get("sat_ops"):
            row["sat_ops"] = None
            table.append(f"| {name} | {n} | failed (rc {row.get('sat_rc')}, see raw/{kind}-{n}-sat.json.stderr) | | | | | | | |")
            continue
        if kind == "ketama":
            hot_cell = "not run"
        elif row.get("hot_ops"):
            hot_cell = f"{num(row['hot_ops'])} ({row['hot_share']:.2f}x)"
        else:
            hot_cell = "failed"
        table.append(f"| {name} | {n} | {num(row.get('sat_ops'))} | {num(row.get('cpu_us_per_req'), 2)} | "
                     f"{spd('speedup_sat')} | {slo_ops} | {slo_p} | {spd('speedup_slo')} | {hot_cell} | {gen} |")

p = plan["params"]
md = [f"Scaling study ({plan['mode']}), {plan['date']} on {plan['host']} ({len(plan['cpus'])} CPUs), "
      f"{plan['tern_version']} ({plan['tern']}), {plan['memcached_version']} ({plan['memcached']}); "
      f"{p['mix']}, {p['value_size']} B values, {p['keys']:,} keys. Saturation: closed loop, "
      f"{p['sat']['connections_per_thread']} connections per generator thread x pipeline {p['sat']['pipeline']}, "
      f"{p['sat']['warmup_s']} s warm-up + {p['sat']['duration_s']} s. SLO: `tern bench slo --p999 {p['p999']}`, "
      f"unpipelined, Poisson arrivals, {p['slo']['connections_per_server_core']} connections per server core, "
      f"{p['slo']['probe_s']} s probes, precision {p['slo']['precision']}, a rate passing when most of "
      f"its {p['slo']['repeats']} probes do, `--spin {p['slo']['spin']}`. Measured in {elapsed} s; "
      f"load average {' '.join(plan['loadavg_start'])} before, {' '.join(plan['loadavg_end'])} after.",
      "",
      "| server | N | saturation ops/s | server CPU µs/request | speed-up | SLO ops/s (p99.9 <= %s) | p99.9 µs there | SLO speed-up | hot keys: zipf %s saturation ops/s (x uniform) | generator CPU (saturation) |" % (p["p999"], p["hot_zipf"]),
      "|---|---|---|---|---|---|---|---|---|---|"] + table + ["",
      "Speed-up: against the same server at N = 1. Hot keys: the saturation run again with zipf-distributed keys, as a share of the uniform run. Server CPU: all its threads (tern bench's /proc "
      "figure; for a ketama pool the sum over its instances, sampled every 50 ms). Generator CPU: "
      "tern bench's user + system time over the measured phase, as a share of its cores (one "
      "thread per CPU not given to the server); near 100% the generator, not the server, may be the limit."]
md_text = "\n".join(md) + "\n"
open(f"{out}/scaling.md", "w").write(md_text)
json.dump({"plan": plan, "rows": rows, "runs": runs}, open(f"{out}/scaling.json", "w"), indent=1)

# SVG: throughput against N (log2 axis), saturation solid, SLO dashed.
W, H, L, R, T, B = 840, 420, 80, 300, 40, 50
ns = plan["ns"]
xs = {n: (L + 30 + (W - L - R - 60) * (0.5 if len(ns) == 1 else math.log2(n / ns[0]) / math.log2(ns[-1] / ns[0]))) for n in ns}
vals = [r.get(k) for r in rows for k in ("sat_ops", "slo_ops") if r.get(k)]
top = max(vals) if vals else 1
step = 10 ** math.floor(math.log10(top / 4)) if top > 0 else 1
step *= 5 if top / step > 20 else 2 if top / step > 8 else 1
ymax = step * math.ceil(top * 1.05 / step)
y = lambda v: T + (H - T - B) * (1 - v / ymax)
colors = {"tern": "#d62728", "memcached": "#1f77b4", "ketama": "#2ca02c"}
s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
     f'<rect width="{W}" height="{H}" fill="white"/>',
     f'<text x="{L}" y="22" font-size="14">Throughput against server cores N ({plan["mode"]}, {len(plan["cpus"])} CPUs)</text>']
v = 0
while v <= ymax + 1e-9:
    s.append(f'<line x1="{L}" y1="{y(v):.1f}" x2="{W - R}" y2="{y(v):.1f}" stroke="#ddd"/>')
    s.append(f'<text x="{L - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v / 1e3:,.0f}k</text>')
    v += step
for n in ns:
    s.append(f'<text x="{xs[n]:.1f}" y="{H - B + 18}" text-anchor="middle">{n}</text>')
s.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">server cores N</text>')
s.append(f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" text-anchor="middle">ops/s</text>')
s.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#444"/>')
ly = T + 10
for kind in plan["kinds"]:
    for key, dash, what in (("sat_ops", "", "saturation"), ("slo_ops", ' stroke-dasharray="6 4"', f"p99.9 &lt;= {p['p999']}")):
        pts = [(xs[r["n"]], y(r[key])) for r in rows if r["kind"] == kind and r.get(key)]
        c = colors[kind]
        if len(pts) > 1:
            s.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in pts) + '"/>')
        for a, b in pts:
            s.append(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="4" fill="{c if not dash else "white"}" stroke="{c}" stroke-width="2"/>')
        s.append(f'<line x1="{W - R + 12}" y1="{ly}" x2="{W - R + 40}" y2="{ly}" stroke="{c}" stroke-width="2"{dash}/>')
        s.append(f'<text x="{W - R + 46}" y="{ly + 4}">{label[kind]}, {what}</text>')
        ly += 20
s.append("</svg>")
open(f"{out}/scaling.svg", "w").write("\n".join(s) + "\n")
print(md_text)
print(f"(also {out}/scaling.json, {out}/scaling.svg)")
PY
