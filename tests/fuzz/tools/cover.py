#!/usr/bin/env python3
# Picks a small corpus for a harness: runs the harness on each input file alone (libFuzzer
# -merge=1 with a control file, which lists what the file covers), then chooses greedily,
# most new coverage first, the files that cover every edge the inputs reach, then files that
# add features (hit counts, value profile, Lua lines) while under --max-files (edges come
# first, whatever the count) and --max-bytes. --save FILE keeps what each input covers, to
# choose again without running them.
# Files in --keep DIRs (crash inputs) are always taken. Writes them, named by SHA-1 as
# libFuzzer does, to OUTDIR (emptied first). Run a plain -merge=1 first on a big pile.
#   tests/fuzz/tools/cover.py build/fuzz/fuzz_ref tests/fuzz/corpus/ref DIR... [--keep DIR]
import argparse, hashlib, os, shutil, subprocess, sys, tempfile

ap = argparse.ArgumentParser()
ap.add_argument('fuzzer')
ap.add_argument('outdir')
ap.add_argument('dirs', nargs='+')
ap.add_argument('--keep', action='append', default=[])
ap.add_argument('--max-files', type=int, default=200)
ap.add_argument('--max-bytes', type=int, default=2_000_000)
ap.add_argument('--save')
a = ap.parse_args()
import json

def listdir(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if os.path.isfile(os.path.join(d, f))) if os.path.isdir(d) else []

files = {}
for d in a.keep + a.dirs:
    for f in listdir(d):
        data = open(f, 'rb').read()
        files.setdefault(hashlib.sha1(data).hexdigest(), (f, data, d in a.keep))
tmp = tempfile.mkdtemp()
cov, ft = {}, {}
if a.save and os.path.exists(a.save):
    saved = json.load(open(a.save))
    cov = {h: set(v) for h, v in saved['cov'].items() if h in files}
    ft = {h: set(v) for h, v in saved['ft'].items() if h in files}
for n, (h, (f, data, keep)) in enumerate(sorted(files.items())):
    if h in cov:
        continue
    one, out, ctl = os.path.join(tmp, 'one'), os.path.join(tmp, 'out'), os.path.join(tmp, 'ctl')
    for p in (one, out):
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(p)
    open(os.path.join(one, h), 'wb').write(data)
    if os.path.exists(ctl):
        os.remove(ctl)  # an existing control file would be resumed
    subprocess.run([a.fuzzer, '-merge=1', '-timeout=30', f'-merge_control_file={ctl}', out, one],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cov[h], ft[h] = set(), set()
    for line in open(ctl).read().split('\n'):
        p = line.split()
        if p and p[0] == 'COV':
            cov[h] = set(p[2:])
        elif p and p[0] == 'FT':
            ft[h] = set(p[2:])
    if n % 200 == 199:
        print(f'{n + 1}/{len(files)} inputs run', file=sys.stderr)
shutil.rmtree(tmp)
if a.save:
    json.dump({'cov': {h: sorted(v) for h, v in cov.items()}, 'ft': {h: sorted(v) for h, v in ft.items()}},
              open(a.save, 'w'))

chosen = [h for h, v in files.items() if v[2]]
got_cov = set().union(*(cov[h] for h in chosen)) if chosen else set()
got_ft = set().union(*(ft[h] for h in chosen)) if chosen else set()
total = sum(len(files[h][1]) for h in chosen)
def pick(key, have, max_files):
    global total
    while len(chosen) < max_files:
        best = max((h for h in files if h not in chosen and len(key[h] - have) > 0
                    and total + len(files[h][1]) <= a.max_bytes),
                   key=lambda h: (len(key[h] - have), -len(files[h][1])), default=None)
        if best is None:
            return
        chosen.append(best)
        total += len(files[best][1])
        got_cov.update(cov[best])
        got_ft.update(ft[best])
pick(cov, got_cov, len(files))
all_cov, all_ft = set().union(*cov.values()), set().union(*ft.values())
print(f'{len(chosen)} files cover {len(got_cov)}/{len(all_cov)} edges')
pick(ft, got_ft, a.max_files)
print(f'{len(chosen)} files, {total} bytes: {len(got_cov)}/{len(all_cov)} edges, {len(got_ft)}/{len(all_ft)} features')
shutil.rmtree(a.outdir, ignore_errors=True)
os.makedirs(a.outdir)
for h in chosen:
    open(os.path.join(a.outdir, h), 'wb').write(files[h][1])
