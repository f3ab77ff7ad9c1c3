"""Run a command; sample every 0.1 s the summed PSS and RSS of its process tree; print the peaks."""
import os, subprocess, sys, time

def tree(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out

def mem(p):
    pss = rss = 0
    try:
        with open(f"/proc/{p}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"): pss = int(line.split()[1])
                elif line.startswith("Rss:"): rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss

proc = subprocess.Popen(sys.argv[1:])
peak_pss = peak_rss = peak_n = 0
t0 = time.time(); series = {}
while proc.poll() is None:
    ps = tree(proc.pid)
    m = [mem(p) for p in ps]
    k = int((time.time() - t0) // 5) * 5; series[k] = max(series.get(k, 0), sum(x for x, _ in m))
    peak_pss = max(peak_pss, sum(x for x, _ in m)); peak_rss = max(peak_rss, sum(y for _, y in m)); peak_n = max(peak_n, len(ps))
    time.sleep(0.1)
print("PSS MB by 5 s: " + " ".join(f"{k}s:{v//1024}" for k, v in sorted(series.items())), file=sys.stderr)
print(f"exit {proc.returncode}; peak summed PSS {peak_pss/1024:.0f} MB, peak summed RSS {peak_rss/1024:.0f} MB, up to {peak_n} processes", file=sys.stderr)
