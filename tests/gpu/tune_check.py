"""Checks what `kiln tune` wrote to a plans.lock (tests/gpu/run's tune step): in every entry the
winner is never slower than the default plan measured in the same run, and a build that reads
the lock takes, per graph instance, the plan fastest over every shape class measured (the
geometric mean of its medians over the default's), which `kiln explain` says is from plans.lock.
Usage: tune_check.py LOCK SPEC:GRAPH:INSTANCE..."""
import glob
import json
import math
import subprocess
import sys

KILN = "build/kiln"


def key(p):
    return p["id"] + "".join(" %s=%s" % kv for kv in sorted((p.get("settings") or {}).items()))


def expected(entries, group):
    """The plan of `group` fastest over the entries, as kiln.lock picks it."""
    best, best_r = None, None
    groups = [next(g for g in e["groups"] if g["group"] == group) for e in entries]
    for p in groups[0]["plans"]:
        logs = []
        for g in groups:
            mine = next((q["median_us"] for q in g["plans"] if key(q) == key(p)), None)
            base = next(q["median_us"] for q in g["plans"] if q["id"] == g["default"] and not q.get("settings"))
            if mine is None:
                break
            logs.append(math.log(mine / base))
        else:
            r = math.exp(sum(logs) / len(logs))
            if best_r is None or r < best_r:
                best, best_r = p, r
    return best


def main():
    lock, cases = sys.argv[1], sys.argv[2:]
    failures = 0
    for case in cases:
        spec, graph, instance = case.split(":")
        entries = [json.load(open(f)) for f in sorted(glob.glob("%s/%s-*.json" % (lock, graph)))]
        entries = [e for e in entries if e["graph"] == graph and e["instance"] == instance]
        if not entries:
            print("not ok - %s [%s]: no lock entry" % (graph, instance))
            failures += 1
            continue
        for e in entries:
            for g in e["groups"]:
                win = g["plans"][0]
                base = next(q for q in g["plans"] if q["id"] == g["default"] and not q.get("settings"))
                good = win["median_us"] <= base["median_us"]
                failures += not good
                print("%s - %s [%s] at %s group %d: winner %s %.2f us, default %s %.2f us (%.3fx)" % (
                    "ok" if good else "not ok", graph, instance, e["shape_class"], g["group"], key(win),
                    win["median_us"], g["default"], base["median_us"], base["median_us"] / win["median_us"]))
        sets = ["--set=" + kv for kv in instance.split(",")]
        out = subprocess.run([KILN, "explain", spec, "--graph", graph, "--plans-lock", lock] + sets,
                             capture_output=True, text=True)
        for g in entries[0]["groups"]:
            want = expected(entries, g["group"])
            line = "    chosen     %s, from plans.lock %s (" % (want["id"], lock)
            good = out.returncode == 0 and line in out.stdout and \
                ("group %d (%s): plan %s\n" % (g["group"], g["ops"], want["id"])) in out.stdout
            failures += not good
            print("%s - %s [%s] group %d: a build with the lock takes %s (fastest over %s)" % (
                "ok" if good else "not ok", graph, instance, g["group"], key(want),
                ", ".join(e["shape_class"] for e in entries)))
            if not good:
                print(out.stdout + out.stderr)
    sys.exit(1 if failures else 0)


main()
