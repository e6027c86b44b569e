#!/usr/bin/env python3
"""bench/RESULTS.md from the CSV files of a device run (tests/gpu/run writes them under its $OUT).

Reads the CSV files each benchmark writes (bench.csv, bench_gemm.csv, gemm_shapes.csv, axes.csv, axis_ops.csv,
scratch.csv, norm_bwd.csv, stream_bound.csv, sdpa.csv, sdpa_decode.csv, sdpa_bwd.csv) from each DIR, with the run's gpu.log
(`kiln env`: the device) and summary.txt (each step's ok / FAIL) where they are there, and
writes one Markdown section a family: a table of kiln beside its peers, the ratios, the misses
(ratio < 1, in bold and named in the miss column) and their counts. A family whose CSV is
missing is left out; an unknown CSV is listed by name. The same files give the same bytes.
Standard library only. Usage:

    python3 bench/results.py DIR [DIR...] [--commit SHA] [--command "CMD"] [--date YYYY-MM-DD]
                             [--device NAME] [--keep OLD.md] [-o bench/RESULTS.md | -o -]

--keep OLD.md keeps OLD.md's sections (and summary rows) of the families this run did not
measure, each with its own device, commit and date line.
    python3 bench/results.py --list-columns   # the files, their writers and the columns read
"""
import argparse
import csv
import datetime
import glob
import math
import os
import re
import shlex
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "RESULTS.md")
DASH = "–"


# --- cells -------------------------------------------------------------------------------

def num(v):
    """The float in a CSV cell, or None (empty, not a number, nan, inf)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) or math.isinf(x) else x


def fixed(v, digits, suffix=""):
    x = num(v)
    return DASH if x is None else "%.*f%s" % (digits, x, suffix)


def ratio_text(x, digits):
    """x with `digits` decimals, more where a ratio below 1 would round up to 1."""
    d = digits
    s = "%.*f" % (d, x)
    while x < 1 and float(s) >= 1 and d < 6:
        d += 1
        s = "%.*f" % (d, x)
    return s + "x"


def ratio_cell(v, digits=2):
    x = num(v)
    if x is None:
        return DASH
    t = ratio_text(x, digits)
    return "**%s**" % t if x < 1 else t


def prose(text):
    """A paragraph wrapped at 100 columns (code spans and words kept whole)."""
    return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)


def code(s):
    return "`%s`" % s if s else DASH


def md(s):
    """A table cell: no pipes or line breaks."""
    return str(s).replace("|", "\\|").replace("\n", " ")


def truth(v):
    """bench.py's and bench_gemm.py's `agrees` (True / False): yes, **no**, or a dash."""
    s = (v or "").strip().lower()
    if s in ("true", "1", "ok", "yes"):
        return "yes"
    if s in ("false", "0", "no"):
        return "**no**"
    return md(v) if v else DASH


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# --- families ----------------------------------------------------------------------------

class Ratio:
    """A ratio column of a family: the CSV key, the peer it compares with, its decimals."""

    def __init__(self, key, peer, digits=2):
        self.key, self.peer, self.digits = key, peer, digits


class Family:
    """One CSV file and how it is rendered.

    cols: (header, function of a row -> cell text); ratios: the Ratio columns (their cells
    come from cols too; they give the miss column and the counts); name: a row's case in the
    counts; bad: a row's failed check (None: fine); intro: the section's text; pivot: rows ->
    rows (stream_bound.csv, one row a shape)."""

    def __init__(self, file, title, writer, step, alone, columns, cols, ratios, name, intro,
                 bad=None, pivot=None, notes=None):
        self.file, self.title, self.writer, self.step, self.alone = file, title, writer, step, alone
        self.columns, self.cols, self.ratios, self.name, self.intro = columns, cols, ratios, name, intro
        self.bad, self.pivot, self.notes = bad, pivot, notes


KILN = "build/kiln"
SPEED_COLUMNS = ["case", "shape", "kiln_ms", "kiln_TBs", "pct_copy", "x_eager", "x_compile"]


def gemm_cols(digits):
    """The columns of the GEMM tables (bench_gemm.csv, gemm_shapes.csv); times with `digits`."""
    return [("case", lambda r: code(r["case"])), ("M x N x K", lambda r: r["shape"]), ("peer", lambda r: code(r["peer"])),
            ("kiln ms", lambda r: fixed(r["kiln_ms"], digits)), ("kiln TFLOP/s", lambda r: fixed(r["kiln_tflops"], 1)),
            ("peer ms", lambda r: fixed(r["peer_ms"], digits)), ("peer TFLOP/s", lambda r: fixed(r["peer_tflops"], 1)),
            ("x peer", lambda r: ratio_cell(r["vs_peer"])),
            ("rel L2 kiln / peer", lambda r: "%s / %s" % (fixed_e(r["rel_l2"]), fixed_e(r["peer_rel_l2"]))),
            ("agrees", lambda r: truth(r["agrees"])), ("plan", lambda r: code(r.get("plan", "")))]


def geomean_note(rows):
    """The geometric mean of the x-peer ratios and how many lie below 0.9."""
    vals = [num(r.get("vs_peer")) for r in rows]
    vals = [v for v in vals if v]
    if not vals:
        return []
    gm = math.exp(sum(math.log(v) for v in vals) / len(vals))
    return ["Geometric mean over the %d shapes: %s of cuBLAS; %d below 0.9x." % (len(vals), ratio_text(gm, 3),
                                                                              sum(v < 0.9 for v in vals))]


def speed_cols():
    """The columns of bench.speed_row (axes.csv, axis_ops.csv, norm_bwd.csv)."""
    return [("case", lambda r: code(r["case"])), ("shape", lambda r: r["shape"]),
            ("kiln ms", lambda r: fixed(r["kiln_ms"], 4)), ("kiln TB/s", lambda r: fixed(r["kiln_TBs"], 2)),
            ("% of copy", lambda r: fixed(r["pct_copy"], 0, "%")),
            ("x torch eager", lambda r: ratio_cell(r["x_eager"])),
            ("x torch.compile", lambda r: ratio_cell(r["x_compile"]))]


def case_shape(r):
    return "%s %s" % (r["case"], r["shape"])


SPEED_TIMING = ("Times are medians over interleaved rounds (kiln and its peers in turn) of CUDA-graph "
                "replays (kernel time, no host overhead). The CSV keeps kiln's time and the ratios, not "
                "the peers' times (a peer's time is kiln's times its ratio). x = the peer's time over "
                "kiln's: > 1, kiln faster. Bandwidth counts %s; %% of copy is against the device-to-device "
                "copy rate of 1 GiB that the script measures first.")


def bench_notes(rows):
    ceil = sorted({fixed(r.get("copy_tbs"), 2) for r in rows} - {DASH})
    return ["The copy ceiling of this run (1 GiB device-to-device copy, read + write): %s TB/s."
            % " / ".join(ceil)] if ceil else []


def stream_pivot(rows):
    """stream_bound.csv (a row per shape and case) as one row per shape: each case's TB/s and %
    of the copy rate, kiln's stream over torch's add, each other kiln case's share of the stream."""
    shapes, by = [], {}
    for r in rows:
        if r["shape"] not in by:
            shapes.append(r["shape"])
            by[r["shape"]] = {}
        by[r["shape"]].setdefault(r["case"], r)
    cases = []
    for r in rows:
        if r["case"] not in cases:
            cases.append(r["case"])
    out = []
    for s in shapes:
        got = by[s]
        p = {"shape": s, "_cases": cases, "_got": got}
        add = next((got[c] for c in got if c.startswith("torch add")), None)
        stream = next((got[c] for c in got if c.startswith("kiln stream")), None)
        a, k = num(add["ms"]) if add else None, num(stream["ms"]) if stream else None
        p["x_add"] = a / k if a and k else ""
        p["_stream_tbs"] = num(stream["tbs"]) if stream else None
        out.append(p)
    return out


def stream_cols(prows):
    cases = prows[0]["_cases"] if prows else []
    cols = [("shape", lambda p: p["shape"])]

    def tbs(c):
        def cell(p):
            r = p["_got"].get(c)
            if not r or num(r["tbs"]) is None:
                return DASH
            return "%s TB/s, %s" % (fixed(r["tbs"], 3), fixed(r["pct_copy"], 1, "%"))
        return cell

    def share(c):
        def cell(p):
            r, st = p["_got"].get(c), p["_stream_tbs"]
            x = num(r["tbs"]) if r else None
            return DASH if x is None or not st else "%.1f%%" % (100 * x / st)
        return cell

    for c in cases:
        cols.append((c, tbs(c)))
        if c.startswith("kiln stream"):
            cols.append(("x torch add", lambda p: ratio_cell(p["x_add"])))
        elif c.startswith("kiln "):
            cols.append(("%s, of the stream" % c[5:], share(c)))
    return cols


def stream_notes(prows):
    """The lowest share of kiln's stream for each other kiln case."""
    notes = []
    for c in (prows[0]["_cases"] if prows else []):
        if not c.startswith("kiln ") or c.startswith("kiln stream"):
            continue
        shares = []
        for p in prows:
            r, st = p["_got"].get(c), p["_stream_tbs"]
            x = num(r["tbs"]) if r else None
            if x is not None and st:
                shares.append((100 * x / st, p["shape"]))
        if shares:
            lo = min(shares, key=lambda t: t[0])
            notes.append("%s: %d shapes, lowest share of kiln's stream %.1f%% (%s)." % (c[5:], len(shares), lo[0], lo[1]))
    return notes


SCRATCH_SHAPES = {"norm_gemm": "%dx4096 · 4096x4096", "two_anchors": "%dx4096", "bn_train": "%dx64x3136"}


def scratch_shape(r):
    n = num(r["n"])
    f = SCRATCH_SHAPES.get(r["case"])
    return f % n if f and n is not None and n == int(n) else "n=%s" % r["n"]



def attention_cols(unit, label, err, err_label):
    """The table columns of bench_sdpa.py's CSV files: times and rates (kiln_<unit>, ...) of kiln,
    cuDNN and FA2, the ratios, kiln's error against the check's reference, check, plan."""
    return [("case", lambda r: r["case"]), ("kiln ms", lambda r: fixed(r["kiln_ms"], 4)),
            ("kiln " + label, lambda r: fixed(r["kiln_" + unit], 0)), ("cuDNN ms", lambda r: fixed(r["cudnn_ms"], 4)),
            ("cuDNN " + label, lambda r: fixed(r["cudnn_" + unit], 0)), ("x cuDNN", lambda r: ratio_cell(r["x_cudnn"], 3)),
            ("FA2 " + label, lambda r: fixed(r["fa2_" + unit], 0)), ("x FA2", lambda r: ratio_cell(r["x_fa2"], 3)),
            (err_label, lambda r: r.get(err) or DASH),
            ("check", lambda r: r["check"] if r["check"] == "ok" else "**%s**" % r["check"]),
            ("plan", lambda r: code(r.get("plan", "")))]


ATTENTION_RATIOS = [Ratio("x_cudnn", "cuDNN (torch SDPA)", 3), Ratio("x_fa2", "FlashAttention-2 (torch SDPA)", 3)]

def peer_cols(err, err_label, copy_first):
    """The table columns of bench_gdn.py's and bench_conv1d.py's CSV files: kiln's time, FLA's, the
    ratio, % of a same-bytes copy (right after kiln's time where copy_first), the error, check, plan."""
    copy = [("% of copy", lambda r: r.get("pct_copy") or DASH)]
    peer = [("peer", lambda r: r["peer"] or DASH), ("peer us", lambda r: fixed(r["peer_us"], 1)),
            ("x peer", lambda r: ratio_cell(r["ratio"], 3))]
    return ([("case", lambda r: r["case"]), ("kiln us", lambda r: fixed(r["kiln_us"], 1))]
            + (copy + peer if copy_first else peer + copy)
            + [(err_label, lambda r: r.get(err) or DASH),
               ("check", lambda r: r["check"] if r["check"] == "ok" else "**%s**" % r["check"]),
               ("plan", lambda r: code(r.get("plan", "")))])


# Gated DeltaNet (bench/bench_gdn.py): kiln's gdn forward beside FLA.
def gdn_family():
    """gdn.csv: decode (state traffic as % of a copy) and 32K-token forward cases against FLA."""
    cols = peer_cols("err_ratio", "err vs peer", False)
    return Family(
        "gdn.csv", "Gated DeltaNet beside FLA", "bench/bench_gdn.py", "bench-gdn",
        "%s build specs/gdn_decode.lua tests/specs/gdn/bench.lua --sm 90a -o gdn.kpack && FLA_FLASH_QLA=0 "
        "python3 bench/bench_gdn.py --pack gdn.kpack --out DIR" % KILN,
        ["case", "plan", "kiln_us", "peer", "peer_us", "ratio", "pct_copy", "check"], cols,
        [Ratio("ratio", "FLA (fused_recurrent / chunk_gated_delta_rule)", 3)], lambda r: r["case"],
        "kiln's Gated DeltaNet forward (THD bf16, K = V = 128, fp32 states; inputs as FlashQLA's "
        "benchmark draws them) beside FLA's Triton kernels on the same tensors (FLA_FLASH_QLA=0, its "
        "autotuning outside the timing); times are medians over interleaved rounds of CUDA-graph "
        "replays. decode: 256 sequences of one token, states from a pool updated in place (FLA: "
        "fused_recurrent_gated_delta_rule on the gathered states); % of copy = the state bytes (read "
        "and written) over the time, as a share of a torch copy of as many bytes. forward: T = 32768 "
        "in 1 or 4 sequences, q/k over v heads (FLA: chunk_gated_delta_rule). x peer = FLA's time "
        "over kiln's: > 1, kiln faster. err vs peer: the larger relative RMS difference of O and "
        "the final state against FLA's (bound 5e-3). plan: the kiln plan that ran.",
        bad=lambda r: None if r["check"] == "ok" else "O or the final state differs from FLA's")


# Causal conv1d (bench/bench_conv1d.py): kiln's conv1d beside the copy rate and FLA.
def conv1d_family():
    """conv1d.csv: forward, backward and the decode update against a same-bytes copy and FLA."""
    cols = peer_cols("max_err", "max err", True)
    return Family(
        "conv1d.csv", "Causal conv1d beside the copy rate and FLA", "bench/bench_conv1d.py", "bench-conv1d",
        "%s build tests/specs/conv1d/bench.lua --sm 90a -o conv1d.kpack && python3 bench/bench_conv1d.py "
        "--pack conv1d.kpack --out DIR" % KILN,
        ["case", "plan", "kiln_us", "peer", "peer_us", "ratio", "pct_copy", "check"], cols,
        [Ratio("ratio", "FLA (causal_conv1d, causal_conv1d_bwd, causal_conv1d_update)", 3)], lambda r: r["case"],
        "kiln's causal depthwise conv1d (width 4, bf16, D = 8192, x channel-last [B, T, D], silu, bias; "
        "tests/specs/conv1d/bench.lua) beside FLA's Triton kernels on the same tensors; times are medians "
        "over interleaved rounds of CUDA-graph replays. fwd: x read, y written; bwd: x and dout read, dx "
        "written (dweight and dbias summed per CTA, then in a fixed order); update: the decode update of "
        "256 sequences of one token (x and the conv state of 3 steps read, y and the new state written). "
        "% of copy = those bytes over kiln's time as a share of a torch copy of as many bytes timed the same "
        "way. x peer = FLA's time over kiln's: > 1, kiln faster. max err: kiln's outputs against torch's "
        "F.conv1d (autograd for the backward), max |diff| over max |ref| (bound 2e-2).",
        bad=lambda r: None if r["check"] == "ok" else "differs from torch's conv1d")



FAMILIES = [
    Family(
        "bench.csv", "Norms, softmax and pointwise beside torch", "bench/bench.py", "bench-vs-torch",
        "%s build specs/*.lua --sm 90a -o bench.kpack && %s build specs/{rmsnorm,layernorm,softmax,softmax_bwd,"
        "layernorm_bwd,rmsnorm_bwd}.lua --set H=65536 --sm 90a -o wide.kpack && python3 bench/bench.py "
        "--pack bench.kpack --wide-pack wide.kpack --out DIR" % (KILN, KILN),
        ["case", "shape", "kiln_ms", "eager_ms", "compile_ms", "kiln_tbs", "pct_of_copy", "vs_eager",
         "vs_compile", "graph_kiln_tbs", "graph_vs_eager", "graph_vs_compile", "same_copy_graph_tbs",
         "agrees", "device", "copy_tbs"],
        [("case", lambda r: code(r["case"])), ("shape", lambda r: r["shape"]),
         ("kiln ms", lambda r: fixed(r["kiln_ms"], 4)), ("kiln TB/s", lambda r: fixed(r["kiln_tbs"], 2)),
         ("% of copy", lambda r: fixed(r["pct_of_copy"], 0, "%")),
         ("eager ms", lambda r: fixed(r["eager_ms"], 4)), ("x eager", lambda r: ratio_cell(r["vs_eager"])),
         ("compile ms", lambda r: fixed(r["compile_ms"], 4)),
         ("x compile", lambda r: ratio_cell(r["vs_compile"])),
         ("graphs: kiln TB/s", lambda r: fixed(r["graph_kiln_tbs"], 2)),
         ("graphs: % of a same-bytes copy", lambda r: DASH if not num(r["same_copy_graph_tbs"]) or num(r["graph_kiln_tbs"]) is None
          else "%.0f%%" % (100 * num(r["graph_kiln_tbs"]) / num(r["same_copy_graph_tbs"]))),
         ("graphs: x eager", lambda r: ratio_cell(r["graph_vs_eager"])),
         ("graphs: x compile", lambda r: ratio_cell(r["graph_vs_compile"])),
         ("agrees", lambda r: truth(r["agrees"]))],
        [Ratio("vs_eager", "torch eager"), Ratio("vs_compile", "torch.compile"),
         Ratio("graph_vs_eager", "torch eager (graphs)"), Ratio("graph_vs_compile", "torch.compile (graphs)")],
        case_shape,
        "Each case beside torch eager and torch.compile (inductor) of the same math, in one process on "
        "the same tensors (bf16 unless the shape says otherwise; the fused fp8 RMSNorms beside the "
        "unfused torch sequence). Two timings: launched (medians of batches of back-to-back launches "
        "after warm-up, host launch cost included) and graphs (the same three replayed from CUDA "
        "graphs: kernel time, no host overhead). x = the peer's median time over kiln's: > 1, kiln "
        "faster. Bandwidth counts the minimal bytes; % of copy is kiln's launched TB/s against the "
        "1 GiB copy ceiling, the graphs' against a copy of the same bytes timed the same way. "
        "agrees: kiln's output matches torch's.",
        bad=lambda r: None if truth(r["agrees"]) != "**no**" else "disagrees with torch",
        notes=bench_notes),
    Family(
        "bench_gemm.csv", "GEMM beside cuBLAS", "bench/bench_gemm.py", "bench-gemm-vs-cublas",
        "%s build specs/*.lua --sm 90a -o bench.kpack && python3 bench/bench_gemm.py --pack bench.kpack --out DIR" % KILN,
        ["case", "shape", "kiln_ms", "peer", "peer_ms", "kiln_tflops", "peer_tflops", "vs_peer", "rel_l2",
         "peer_rel_l2", "agrees", "device"],
        gemm_cols(3), [Ratio("vs_peer", "cuBLAS (torch)")], case_shape,
        "bf16 (and fp8 e4m3 with per-tensor descales) GEMMs with their fused epilogues beside "
        "cuBLAS through torch (the peer column names the torch call), in one process on the same "
        "tensors; times are medians of batches of back-to-back launches after warm-up. TFLOP/s "
        "count 2·M·N·K. x = the peer's time over kiln's: > 1, kiln faster. rel L2: each result "
        "against the same math in fp32 (agrees: kiln's within 1e-2).",
        bad=lambda r: None if truth(r["agrees"]) != "**no**" else "wrong result"),
    Family(
        "gemm_shapes.csv", "GEMM over the shapes of real layers beside cuBLAS", "bench/bench_gemm_shapes.py",
        "bench-gemm-shapes",
        "%s build tests/specs/bench/gemm_shapes.lua --sm 90a -o shapes.kpack && python3 bench/bench_gemm_shapes.py "
        "--pack shapes.kpack --out DIR" % KILN,
        ["case", "shape", "M", "kiln_ms", "peer", "peer_ms", "kiln_tflops", "peer_tflops", "vs_peer", "rel_l2",
         "peer_rel_l2", "agrees", "plan", "device"],
        gemm_cols(4), [Ratio("vs_peer", "cuBLAS (torch)")], case_shape,
        "Linear layers of LLaMA-3 8B / Mixtral, Qwen2.5 7B and GPT-2 (with bias), fp8 e4m3 with "
        "per-tensor descales, and a batched product with fp32 out, at M = 1 to 16384 rows "
        "(tests/specs/bench/gemm_shapes.lua), beside the torch call named in the peer column; "
        "times are CUDA-graph replays (no host overhead on either side), medians of interleaved "
        "rounds. x = the peer's time over kiln's: > 1, kiln faster.",
        bad=lambda r: None if truth(r["agrees"]) != "**no**" else "wrong result",
        notes=geomean_note),
    Family(
        "axes.csv", "Reductions over axes", "bench/axes.py", "bench-axes",
        "%s build tests/specs/bench/axes.lua --sm 90a -o axes.kpack && python3 bench/axes.py --pack axes.kpack --out DIR" % KILN,
        SPEED_COLUMNS, speed_cols(),
        [Ratio("x_eager", "torch eager"), Ratio("x_compile", "torch.compile")], case_shape,
        "kiln's reductions (per-channel sums of [N, C, HW], the sum over the middle axis of [B, S, H], "
        "column sums and amax of [T, H], the row engine's sum and amax of each row; "
        "tests/specs/bench/axes.lua) beside torch eager and torch.compile of the same reduction. "
        + SPEED_TIMING % "the input read once and the output written once"),
    Family(
        "axis_ops.csv", "Ops over other axes", "bench/axis_ops.py", "bench-axis-ops",
        "%s build tests/specs/bench/axis_ops.lua --sm 90a -o axis_ops.kpack && python3 bench/axis_ops.py "
        "--pack axis_ops.kpack --out DIR" % KILN,
        SPEED_COLUMNS, speed_cols(),
        [Ratio("x_eager", "torch eager"), Ratio("x_compile", "torch.compile")], case_shape,
        "Softmax over a non-last axis, instance norm and adaptive layer norm (scale and bias per "
        "channel or per sample; tests/specs/bench/axis_ops.lua), bf16, beside torch eager and "
        "torch.compile. " + SPEED_TIMING % "x read once and y written once"),
    Family(
        "scratch.csv", "Graphs crossing kernels (scratch tensors)", "bench/scratch.py", "bench-scratch",
        "%s build tests/specs/bench/scratch.lua --sm 90a -o scratch.kpack && python3 bench/scratch.py "
        "--pack scratch.kpack --out DIR" % KILN,
        ["case", "n", "kiln_ms", "eager_ms", "compile_ms", "x_eager", "x_compile", "workspace_MB"],
        [("case", lambda r: code(r["case"])), ("shape", scratch_shape), ("kiln ms", lambda r: fixed(r["kiln_ms"], 4)),
         ("eager ms", lambda r: fixed(r["eager_ms"], 4)), ("x eager", lambda r: ratio_cell(r["x_eager"])),
         ("compile ms", lambda r: fixed(r["compile_ms"], 4)), ("x compile", lambda r: ratio_cell(r["x_compile"])),
         ("workspace MB", lambda r: fixed(r["workspace_MB"], 1))],
        [Ratio("x_eager", "torch eager"), Ratio("x_compile", "torch.compile")],
        lambda r: "%s %s" % (r["case"], scratch_shape(r)),
        "kiln plans whose virtual tensors cross kernels through the workspace (RMSNorm into a GEMM, "
        "one residual sum read by RMSNorm and softmax, batch norm in training from primitives; "
        "tests/specs/bench/scratch.lua), bf16, beside torch eager and torch.compile. Times are "
        "medians over interleaved rounds of CUDA-graph replays. x = the peer's time over kiln's: "
        "> 1, kiln faster. workspace: the plan's scratch bytes at that size."),
    Family(
        "norm_bwd.csv", "Backward of batch norm, instance norm and adaptive layer norm", "bench/norm_bwd.py",
        "bench-norm-bwd",
        "%s build tests/specs/bench/norm_bwd.lua --sm 90a -o norm_bwd.kpack && python3 bench/norm_bwd.py "
        "--pack norm_bwd.kpack --out DIR" % KILN,
        SPEED_COLUMNS, speed_cols(),
        [Ratio("x_eager", "torch eager"), Ratio("x_compile", "torch.compile")], case_shape,
        "kiln's backward kernels from the norms' decompositions (tests/specs/bench/norm_bwd.lua), bf16, "
        "beside torch eager's own backward kernels and torch.compile of the backward's math. "
        + SPEED_TIMING % "dy and x read once and dx written once"),
    Family(
        "stream_bound.csv", "Backward norms against the stream bound", "bench/stream_bound.py",
        "bench-stream-bound",
        "%s build specs/{layernorm_bwd,rmsnorm_bwd}.lua tests/specs/bench/stream.lua --sm 90a -o stream.kpack "
        "&& python3 bench/stream_bound.py --pack stream.kpack --out DIR" % KILN,
        ["shape", "case", "ms", "tbs", "pct_copy"],
        None,  # stream_cols, from the pivoted rows
        [Ratio("x_add", "torch add (kiln's stream)")],
        lambda p: p["shape"],
        "At each bf16 shape, what the backward norms' tensors alone cost (dy and x read, dx written): "
        "a copy of the same bytes, torch's add and kiln's own stream (two rows in, one out), beside "
        "kiln's layernorm_bwd and rmsnorm_bwd; CUDA-graph replays, interleaved rounds, medians. Each "
        "cell: TB/s over those bytes and % of the 1 GiB copy rate. x torch add = torch's add time "
        "over kiln's stream (> 1, kiln faster: a kiln-vs-peer ratio, a miss below 1). \"of the "
        "stream\": a backward norm's rate as a share of kiln's stream of the same tensors, the "
        "bound it is held to (100%: at the bound); not a peer ratio, so not counted as a miss.",
        pivot=stream_pivot, notes=stream_notes),
    Family(
        "sdpa.csv", "Attention beside cuDNN and FlashAttention-2", "bench/bench_sdpa.py", "bench-sdpa",
        "%s build tests/specs/bench/sdpa.lua --sm 90a -o sdpa.kpack && python3 bench/bench_sdpa.py "
        "--pack sdpa.kpack --out DIR" % KILN,
        ["case", "kiln_ms", "kiln_TFLOPs", "cudnn_ms", "cudnn_TFLOPs", "x_cudnn", "fa2_TFLOPs", "x_fa2", "check"],
        attention_cols("TFLOPs", "TFLOP/s", "max_abs_vs_cudnn", "max abs vs cuDNN"), ATTENTION_RATIOS,
        lambda r: r["case"],
        "kiln's forward attention (BHSD bf16, scale 1/sqrt(D), inference) beside torch's SDPA "
        "backends cuDNN and FlashAttention-2, in one process on the same tensors; times are medians "
        "over interleaved rounds of CUDA-graph replays. Case: full or causal, batch B, query/KV heads "
        "H, sequence S, head dim d. TFLOP/s count 4·B·H·S·S·D, halved under a causal mask. x = the "
        "peer's time over kiln's: > 1, kiln faster (a dash: FA2 does not run that case). check: "
        "kiln's O against cuDNN's (max abs difference under 3e-2).",
        bad=lambda r: None if r["check"] == "ok" else "O differs from cuDNN's"),
    Family(
        "sdpa_decode.csv", "Decode attention beside cuDNN and FlashAttention-2", "bench/bench_sdpa.py", "bench-sdpa",
        "%s build tests/specs/bench/sdpa.lua --sm 90a -o sdpa.kpack && python3 bench/bench_sdpa.py "
        "--pack sdpa.kpack --only decode --out DIR" % KILN,
        ["case", "kiln_ms", "kiln_GBs", "cudnn_ms", "cudnn_GBs", "x_cudnn", "fa2_ms", "fa2_GBs", "x_fa2", "check"],
        attention_cols("GBs", "GB/s", "max_abs_vs_fp32", "max abs vs fp32"), ATTENTION_RATIOS,
        lambda r: r["case"],
        "kiln's decode attention (1 or 4 new tokens a sequence against a cache of Skv keys, BHSD "
        "bf16, d128, no mask) beside torch's SDPA backends cuDNN and FlashAttention-2 on the same "
        "tensors; paged16 cases read the cache through page tables of 16 keys in a random order "
        "while the peers read it dense. Times are medians over interleaved rounds of CUDA-graph "
        "replays. GB/s count K and V read once. x = the peer's time over kiln's: > 1, kiln faster "
        "(a dash: the backend refuses that case). check: kiln's O against an fp32 SDPA (max abs "
        "difference under 2e-2).",
        bad=lambda r: None if r["check"] == "ok" else "O differs from the fp32 reference"),
    Family(
        "sdpa_bwd.csv", "Attention backward beside cuDNN and FlashAttention-2", "bench/bench_sdpa.py", "bench-sdpa",
        "%s build tests/specs/bench/sdpa.lua --sm 90a -o sdpa.kpack && python3 bench/bench_sdpa.py "
        "--pack sdpa.kpack --only backward --out DIR" % KILN,
        ["case", "kiln_ms", "kiln_TFLOPs", "det_ms", "cudnn_ms", "cudnn_TFLOPs", "x_cudnn", "fa2_TFLOPs", "x_fa2",
         "deterministic", "check"],
        attention_cols("TFLOPs", "TFLOP/s", "rel_err_vs_fp32", "rel err vs fp32")[:2]
        + [("deterministic ms", lambda r: fixed(r["det_ms"], 4)), ("det / default", lambda r: r["det_vs_default"])]
        + attention_cols("TFLOPs", "TFLOP/s", "rel_err_vs_fp32", "rel err vs fp32")[2:]
        + [("bitwise", lambda r: r["deterministic"])],
        ATTENTION_RATIOS, lambda r: r["case"],
        "kiln's attention backward (dQ, dK, dV from kiln's forward O and Stats and a random dO; BHSD "
        "bf16, scale 1/sqrt(D)) beside torch's SDPA backward on the cuDNN and FlashAttention-2 "
        "backends (autograd.grad of the backend's forward, CUDA-graph replays), in one process on the "
        "same tensors; times are medians over interleaved rounds. TFLOP/s count 2.5 x 4·B·H·S·S·D, "
        "halved under a causal mask. x = the peer's time over kiln's: > 1, kiln faster. deterministic: "
        "the `:det` plan's time, its ratio to the default plan's (det / default: default time over "
        "det time), and whether two of its runs gave bitwise equal gradients. check: kiln's gradients "
        "against fp32 autograd on two k/v heads (max abs difference over max abs under 2e-2).",
        bad=lambda r: None if r["check"] == "ok" else "gradients differ from fp32 autograd"),
    Family(
        "decoder.csv", "A decoder block's training step with kiln's modules", "bench/decoder_block.py", "bench-decoder",
        "python3 bench/decoder_block.py --out DIR",
        ["case", "torch_ms", "compile_ms", "kiln_ms", "kiln_compile_ms", "vs_torch", "vs_compile", "max_rel_err"],
        [("case", lambda r: r["case"]), ("torch ms", lambda r: fixed(r["torch_ms"], 3)),
         ("torch.compile ms", lambda r: fixed(r["compile_ms"], 3)), ("kiln ms", lambda r: fixed(r["kiln_ms"], 3)),
         ("kiln + compile ms", lambda r: fixed(r["kiln_compile_ms"], 3)),
         ("x torch", lambda r: ratio_cell(r["vs_torch"])), ("x torch.compile", lambda r: ratio_cell(r["vs_compile"])),
         ("max rel err", lambda r: r["max_rel_err"])],
        [Ratio("vs_torch", "torch eager"), Ratio("vs_compile", "torch.compile")],
        lambda r: r["case"],
        "A LLaMA-style block (RMSNorm, causal SDPA, SwiGLU MLP, residual adds; bf16) in plain PyTorch, "
        "one forward + backward step, beside the same block with kiln.torch.nn's RMSNorm and "
        "FusedAddRMSNorm swapped in (eager, and under torch.compile with kiln's custom ops inside). "
        "Times are medians of 20 steps after warm-up; x = the peer's time over kiln's better one. "
        "max rel err: the kiln block's output and gradients against eager torch's (max |diff| over "
        "max |ref|, bound 5e-2)."),
    gdn_family(),
    conv1d_family(),
]
KNOWN = {f.file: f for f in FAMILIES}




def fixed_e(v):
    x = num(v)
    return DASH if x is None else "%.1e" % x


# --- the run's files ---------------------------------------------------------------------

def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        rd = csv.DictReader(f)
        rows = [{k: (v if v is not None else "") for k, v in r.items() if k is not None} for r in rd]
        return list(rd.fieldnames or []), rows


def run_env(d):
    """From DIR/gpu.log (the env step's `kiln env` and nvidia-smi lines): the first GPU and versions."""
    info = {}
    path = os.path.join(d, "gpu.log")
    if not os.path.isfile(path):
        return info
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    in_env = False
    smi_head = None
    for ln in lines:
        if ln.startswith("=== "):
            if in_env:
                break
            in_env = ln.startswith("=== env:")
            continue
        if not in_env:
            continue
        m = re.match(r"gpu0: (.+?), compute capability ([^,]+), (\d+) SMs", ln)
        if m:
            info.update(name=m.group(1), cc=m.group(2), sms=m.group(3))
        m = re.match(r"(kiln_version|driver_cuda_version|nvrtc_version|cudnn_version): (\S+)$", ln)
        if m:
            info[m.group(1)] = m.group(2)
        if ln.startswith("name, clocks.sm"):
            smi_head = [c.strip() for c in ln.split(",")]
        elif smi_head and "clocks" not in info:
            vals = [c.strip() for c in ln.split(",")]
            if len(vals) == len(smi_head):
                got = dict(zip(smi_head, vals))
                info.setdefault("name", got.get("name"))
                info["clocks"] = "%s SM, %s memory, %s C, %s at the start" % (
                    got.get("clocks.sm [MHz]", "?"), got.get("clocks.mem [MHz]", "?"),
                    got.get("temperature.gpu", "?"), got.get("power.draw [W]", "?"))
    return info


def run_steps(d):
    """Step name -> ok / FAIL from DIR/summary.txt."""
    steps = {}
    path = os.path.join(d, "summary.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for ln in f:
                m = re.match(r"^(.*?)\s+(ok|FAIL)\s+\d+s$", ln.rstrip("\n"))
                if m:
                    steps.setdefault(m.group(1), m.group(2))
    return steps


def utc_date(path):
    return datetime.datetime.fromtimestamp(os.stat(path).st_mtime, datetime.timezone.utc).strftime("%Y-%m-%d")


class Source:
    """One known CSV of one DIR, read."""

    def __init__(self, fam, d, path, rows, date):
        self.fam, self.dir, self.path, self.rows, self.date = fam, d, path, rows, date
        self.device = None


def load(dirs, date):
    """The known CSVs (Sources in family order, then DIR order), the files not rendered
    (display path, why), and per DIR its env and steps."""
    sources, skipped, runs = [], [], {}
    for d in dirs:
        if not os.path.isdir(d):
            raise SystemExit("results.py: %s: not a directory" % d)
        runs[d] = (run_env(d), run_steps(d))
        for path in sorted(glob.glob(os.path.join(d, "*.csv")) + glob.glob(os.path.join(d, "*", "*.csv"))):
            rel = os.path.relpath(path, d)
            fam = KNOWN.get(rel)
            if fam is None:
                skipped.append((os.path.join(d, rel), "in a subfolder (a sweep's?)" if os.sep in rel
                                else "not a file this script knows"))
                continue
            cols, rows = read_csv(path)
            lack = [c for c in fam.columns if c not in cols]
            if lack:
                raise SystemExit("results.py: %s lacks the columns %s that %s writes and this script reads "
                                 "(has: %s)" % (path, ", ".join(lack), fam.writer, ", ".join(cols)))
            if not rows:
                skipped.append((os.path.join(d, rel), "no rows"))
                continue
            sources.append(Source(fam, d, path, rows, date or utc_date(path)))
    order = {f.file: i for i, f in enumerate(FAMILIES)}
    sources.sort(key=lambda s: order[s.fam.file])  # stable: DIR order within a family
    return sources, skipped, runs


def assign_devices(sources, runs, fallback):
    """A source's device: its CSV's device column, else the DIR's gpu.log, else another CSV of
    the same DIR, else --device."""
    for s in sources:
        names = []
        for r in s.rows:
            v = (r.get("device") or "").strip()
            if v and v not in names:
                names.append(v)
        s.device = " / ".join(names) or runs[s.dir][0].get("name")
    for s in sources:
        if not s.device:
            s.device = next((o.device for o in sources if o.dir == s.dir and o.device), None) \
                or fallback or "device not recorded"


# --- the document ------------------------------------------------------------------------

def counts(rows, ratio, name):
    """(cases, at or above the peer, worst (x, case) or None, rows without a value)."""
    have = [(num(r.get(ratio.key)), name(r)) for r in rows]
    vals = [t for t in have if t[0] is not None]
    worst = min(vals, key=lambda t: t[0]) if vals else None
    return len(vals), sum(1 for x, _ in vals if x >= 1), worst, len(have) - len(vals)


def counts_line(rows, ratio, name):
    n, m, worst, missing = counts(rows, ratio, name)
    s = "vs %s: %d case%s, %d at or above the peer" % (ratio.peer, n, "" if n == 1 else "s", m)
    if worst:
        s += ", worst ratio %s (%s)" % (ratio_cell(worst[0], ratio.digits), worst[1])
    if missing:
        s += "; %d without a value" % missing
    return s + "."


def render_source(s, multi, args, runs):
    fam, rows = s.fam, s.rows
    if fam.pivot:
        rows = fam.pivot(rows)
    cols = fam.cols if fam.cols is not None else stream_cols(rows)
    env, steps = runs[s.dir]
    out = []
    if multi:
        out.append("### From `%s`\n" % s.dir)
    step = " (step `%s`: %s)" % (fam.step, steps[fam.step]) if fam.step in steps else ""
    out.append("Device %s · commit %s · %s · `%s`%s · `%s`." % (
        s.device, code(args.commit) if args.commit else "not given", s.date, args.command, step, fam.file))
    lines = [counts_line(rows, r, fam.name) for r in fam.ratios]
    if fam.bad:
        bad = [(fam.name(r), fam.bad(r)) for r in rows if fam.bad(r)]
        if bad:
            lines.append("**%d case%s failed the check**: %s." % (
                len(bad), "" if len(bad) == 1 else "s", "; ".join("%s (%s)" % b for b in bad)))
    if fam.notes:
        lines += fam.notes(rows)
    out.append("\n".join("- " + ln for ln in lines))
    header = [c[0] for c in cols] + ["miss"]
    body = []
    for r in rows:
        miss = [ra.peer for ra in fam.ratios if num(r.get(ra.key)) is not None and num(r.get(ra.key)) < 1]
        body.append([fn(r) for _, fn in cols] + ["**miss**: " + ", ".join(miss) if miss else ""])
    out.append(table(header, body))
    return "\n\n".join(out)


def regen_command(args):
    cmd = ["python3", "bench/results.py"] + list(args.dirs)
    for opt, v in (("--commit", args.commit), ("--command", args.command), ("--date", args.date),
                   ("--device", args.device), ("--keep", args.keep)):
        if v:
            cmd += [opt, v]
    return " ".join(shlex.quote(c) for c in cmd)


def device_line(d, env, devices):
    parts = []
    if env.get("cc"):
        parts.append("compute capability %s, %s SMs" % (env["cc"], env["sms"]))
    for k, label in (("driver_cuda_version", "driver CUDA"), ("nvrtc_version", "NVRTC"),
                     ("cudnn_version", "cuDNN"), ("kiln_version", "kiln")):
        if env.get(k):
            parts.append("%s %s" % (label, env[k]))
    if env.get("clocks"):
        parts.append(env["clocks"])
    name = " / ".join(devices) or env.get("name") or "device not recorded"
    return name + (" (%s)" % "; ".join(parts) if parts else "")


def kept_sections(path, measured):
    """From an earlier RESULTS.md: the sections of the families this run did not measure (each
    keeps its own device, commit and date line) and their summary rows, by family title."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return {}, []
    sections = {}
    for part in re.split(r"(?m)^## ", text)[1:]:
        title = part.partition("\n")[0].strip()
        sections[title] = "## " + part.rstrip("\n")
    keep = {f.title: sections[f.title] for f in FAMILIES if f.title in sections and f.file not in measured}
    rows = [line for line in sections.get("Summary", "").splitlines()
            if line.startswith("| ") and line[2:].split(" |")[0].split(" (`")[0] in keep]
    return keep, rows


def render(args, sources, skipped, runs):
    out = ["# kiln — measured results", "",
           "<!-- Generated by bench/results.py from the CSV files of a tests/gpu/run device run; "
           "edit the script, not this file. -->", "",
           prose("Every number in a table comes from one device run: kiln beside its peer in the same process on "
           "the same tensors (random data, never zeros), timed in turn after warm-up. A time is a "
           "median; a ratio is the peer's median time over kiln's, so **x > 1: kiln faster**. A ratio "
           "below 1 (kiln slower) is a miss: in bold, and named in the table's miss column. Bandwidth "
           "(TB/s) counts the minimal bytes (each input read once, each output written once); TFLOP/s "
           "count 2·M·N·K for a GEMM, 4·B·H·S·S·D for attention (halved under a causal mask). Each "
           "section says what its peers are and how it was timed."), ""]
    for d in args.dirs:
        devs = []
        for s in sources:
            if s.dir == d and s.device not in devs:
                devs.append(s.device)
        if len(args.dirs) > 1:
            out.append("Run `%s`:\n" % d)
        ds = sorted({s.date for s in sources if s.dir == d})
        out += ["- Device: %s" % device_line(d, runs[d][0], devs),
                "- Commit: %s" % (code(args.commit) if args.commit else "not given"),
                "- Date: %s (%s)" % (", ".join(ds) or DASH, "given" if args.date else "the CSV files' time, UTC"),
                ""]
    out += [prose("Measured by `%s` on the GPU machine, which writes the CSV files under its `$OUT` "
                  "(default build/gpu-out). Regenerate this file from them with:" % args.command), "",
            "    " + regen_command(args), ""]
    kept, kept_rows = kept_sections(args.keep, {s.fam.file for s in sources}) if args.keep else ({}, [])
    if kept:
        out += [prose("Kept from the previous `%s` (not measured by this run; each section names its own "
                      "device, commit and date): %s." % (os.path.basename(args.keep), "; ".join(kept))), ""]
    if sources:
        out += ["## Summary", ""]
        body = []
        for s in sources:
            rows = s.fam.pivot(s.rows) if s.fam.pivot else s.rows
            for ra in s.fam.ratios:
                n, m, worst, _ = counts(rows, ra, s.fam.name)
                if not n:
                    continue
                title = s.fam.title + (" (`%s`)" % s.dir if len(args.dirs) > 1 else "")
                body.append([title, ra.peer, str(n), str(m),
                             "%s (%s)" % (ratio_cell(worst[0], ra.digits), worst[1]) if worst else DASH])
        out += [table(["family", "peer", "cases", "at or above the peer", "worst ratio"], body)] + kept_rows + [""]
    else:
        out += ["No known CSV file was found.", ""]
    missing = [f for f in FAMILIES if not any(s.fam is f for s in sources) and f.title not in kept]
    if missing:
        out += [prose("Not measured by this run (no CSV file; `tests/gpu/run` with its `bench` step writes them): "
                      + "; ".join("%s (`%s`)" % (f.title, f.file) for f in missing) + "."), ""]
    done = set()
    for s in sources:
        if s.fam.file not in done:
            done.add(s.fam.file)
            out += ["## %s" % s.fam.title, "", prose(s.fam.intro), "",
                    "Alone: `%s`." % s.fam.alone, ""]
            multi = sum(1 for o in sources if o.fam is s.fam) > 1
            for o in sources:
                if o.fam is s.fam:
                    out += [render_source(o, multi, args, runs), ""]
    for f in FAMILIES:
        if f.title in kept:
            out += [kept[f.title], ""]
    if skipped:
        out += ["## Files not rendered", ""]
        out += ["- `%s`: %s" % (p, why) for p, why in skipped]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def list_columns():
    """FILE WRITER[,WRITER] COLUMN...: bench.speed_row writes the columns of the files whose
    writer calls it."""
    for f in FAMILIES:
        writers = [f.writer] + (["bench/bench.py"] if f.columns is SPEED_COLUMNS else [])
        print("%s %s %s" % (f.file, ",".join(writers), " ".join(f.columns)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", metavar="DIR", help="output folders of tests/gpu/run ($OUT)")
    ap.add_argument("--commit", default=None, help="the commit the run measured")
    ap.add_argument("--command", default="tests/gpu/run", help="the command of the device run (default: %(default)s)")
    ap.add_argument("--date", default=None, help="YYYY-MM-DD (default: each CSV file's modification date, UTC)")
    ap.add_argument("--device", default=None, help="the device where the run records none")
    ap.add_argument("-o", "--output", default=DEFAULT_OUT, help="the file to write, - for stdout (default: bench/RESULTS.md)")
    ap.add_argument("--keep", default=None, metavar="FILE",
                    help="an earlier RESULTS.md whose sections of families this run did not measure are kept")
    ap.add_argument("--list-columns", action="store_true", help="print each known file, its writer and the columns read")
    args = ap.parse_args(argv)
    if args.list_columns:
        list_columns()
        return 0
    if not args.dirs:
        ap.error("no DIR given")
    if args.date and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
        ap.error("--date wants YYYY-MM-DD")
    sources, skipped, runs = load(args.dirs, args.date)
    assign_devices(sources, runs, args.device)
    text = render(args, sources, skipped, runs)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        tmp = args.output + ".tmp"
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, args.output)
    for p, why in skipped:
        print("results.py: not rendered: %s (%s)" % (p, why), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
