"""The cut's launches compiled for the H100 without one: registers, spills and SASS size of each stage.

    python ci/cut_sass.py [--stages 0,1,2,3,4,p1,p0] [--flags 1,1,1] [--B 128] [--V 151936] [--sass DIR]
                          [--loops] [--lazy] [--set NAME=VALUE]

Compiles ``triton_cut_kernel._cut_kernel`` for sm_90a with this checkout's Triton, at the plan ``cut_launches``
picks for B requests of 4 drafts at V (float32 logits, pass 1's 1024-entry tiles, 8 warps, and its splits as a
filtered call plans them: 4 a row at B = 128, the one launch's where it is pass 1 too), with the filters of
``--flags`` (top_k, top_p, min_p tensors passed: 1, or None: 0); ``p1`` is pass 1
gathering for the cut (``triton_chain._row_stats_cut_kernel``, with top-k passed; ``4`` and the PRE
variants of stages 0 to 2 come with it, and ``--set GATHER_IN_PASS1=0`` compiles the plan without them),
``p0`` pass 1 alone. ``ptxas -v`` (Triton's bundled one for the PTX version it emits) gives registers and
spills (of this Triton's code: to see the device's, install its version apart, ``pip install --target DIR
triton==X``, and run this with ``PYTHONPATH=DIR``); ``nvdisasm`` the SASS, counted by line and by a few
instruction classes, and written to DIR with ``--sass``. Compare two commits by running this from each one's checkout: the GPU is not needed, and so
neither is a device run. ``--lines DIR`` writes the SASS of Triton's own cubin with each instruction's source line,
for ``ci/ncu_sass.py``. ``--loops`` adds each loop of the SASS (a label and the branch back to it): its
instructions, which divided by the tokens a thread handles a trip give the instructions a token, and how
many of them are a few telling kinds. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from filter_knobs import add_set_option, apply_sets  # noqa: E402
from specverify.kernels import triton_chain, triton_filter  # noqa: E402

POINTERS = {"logits_ptr": "*fp32", "temperature_ptr": "*fp32", "num_draft_ptr": "*i64", "scratch_ptr": "*i64",
            "top_k_ptr": "*i64", "top_p_ptr": "*fp32", "min_p_ptr": "*fp32", "work_ptr": "*i64",
            "record_ptr": "*fp32", "tickets_ptr": "*i32", "draft_ids_ptr": "*i64", "q_ptr": "*fp32",
            "uniform_ptr": "*fp32", "seeds_ptr": "*i64"}
BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")


def stage_metas(B: int, V: int, flags: tuple, lazy: tuple | None = None) -> dict:
    """{STAGE: meta} of the cut's launches at B requests of 4 drafts, and of the one-launch plan (STAGE 3) where
    this checkout has one; lazy: (HAS_Q, SEEDED) of a lazy cut (``triton_lazy``), or None. Earlier checkouts'
    ``_recipe`` takes fewer knobs and returns one meta: what it takes is passed, so that two commits compare."""
    import inspect  # noqa: PLC0415

    dtypes = tuple(dt for dt, on in zip(("torch.int64", "torch.float32", "torch.float32"), flags) if on)
    known = dict(B=B, K1=5, V=V, S1=4, block_v=1024, block_b=128, warps=8, flags=flags, dtypes=dtypes,
                 chunk1=triton.cdiv(triton.cdiv(V, 1024), 4) * 1024, gather_in_pass1=triton_filter.GATHER_IN_PASS1,
                 cap=triton_filter.CAP, ns=triton_filter.NS, ch=triton_filter.CH, programs=triton_filter.READ_PROGRAMS,
                 rank_n=getattr(triton_filter, "RANK_N", 0), scratch_share=getattr(triton_filter, "SCRATCH_SHARE", 0),
                 finish_n=getattr(triton_filter, "FINISH_N", 0), lazy=lazy,
                 max_splits=getattr(triton_filter, "MAX_SPLITS", 16), sms=132,
                 shapes=triton_filter._shapes() if hasattr(triton_filter, "_shapes") else None)
    takes = inspect.signature(triton_filter._recipe.__wrapped__).parameters
    metas = {}
    for rows in (0, 10 ** 9):       # the three launches' plan, then the one launch's, whatever B is
        saved, triton_filter.ONE_LAUNCH_ROWS = triton_filter.ONE_LAUNCH_ROWS, rows
        try:
            if "settings" in takes:     # the plan's settings in one tuple, ONE_LAUNCH_ROWS among them
                known["settings"] = triton_filter._settings()
            if hasattr(triton_filter, "pass1_splits"):
                # pass 1 planned as a filtered call plans it, so that the one launch is pass 1 too where it is
                tiles = triton.cdiv(V, 1024)
                known["chunk1"] = triton.cdiv(tiles, min(triton_filter.pass1_splits(B * 5, V, 4, flags[0], 132),
                                                         tiles)) * 1024
                known["S1"] = triton.cdiv(V, known["chunk1"])
        finally:
            triton_filter.ONE_LAUNCH_ROWS = saved
        planned = triton_filter._recipe(*(known.get(name, rows) for name in takes))[5]
        if isinstance(planned, dict):       # one meta for the three stages; the read at READ_WARPS
            read = dict(planned, num_warps=min(planned["num_warps"], triton_filter.READ_WARPS))
            return {0: dict(planned, STAGE=0), 1: dict(read, STAGE=1), 2: dict(planned, STAGE=2)}
        metas.update({"p1" if stage is None else stage: meta for stage, _, meta in planned})
    metas["p0"] = dict(BLOCK_V=1024, BLOCK_B=128, num_warps=8)
    return metas


def compile_stage(meta: dict, kernel=None, lines: bool = False) -> tuple[str, str, str]:
    """(ptxas -v's report, SASS, listing) of one stage's meta (of ``kernel``, the cut's by default); the listing,
    with ``lines``: the SASS of Triton's own cubin, as its launcher builds it (with line info), each instruction with
    its source line, else empty. A launch's build specialises its integer arguments and pointers too, so its SASS
    may differ from this one in registers and a few instructions."""
    kernel = kernel or triton_filter._cut_kernel
    meta = dict(meta)
    options = {"num_warps": meta.pop("num_warps")}
    if "maxnreg" in meta:
        options["maxnreg"] = meta.pop("maxnreg")
    signature, constexprs = {}, {}
    for name in kernel.arg_names:
        if name in meta:
            signature[name], constexprs[name] = "constexpr", meta[name]
        else:
            signature[name] = POINTERS.get(name, "i32")
    kernel = triton.compile(ASTSource(kernel, signature, constexprs),
                            target=GPUTarget("cuda", 90, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = os.path.join(tmp, "cut.ptx"), os.path.join(tmp, "cut.cubin")
        with open(ptx, "w") as f:
            f.write(kernel.asm["ptx"])
        # the plain ptxas may be older than the PTX this Triton emits; the Blackwell one reads newer PTX
        for name in ("ptxas-blackwell", "ptxas"):
            run = subprocess.run([os.path.join(BIN, name), "-arch=sm_90a", "-v", ptx, "-o", cubin],
                                 capture_output=True, text=True)
            if run.returncode == 0:
                break
        else:
            sys.exit(f"ptxas failed: {run.stderr[-400:]}")
        sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", cubin], capture_output=True, text=True).stdout
        listing = ""
        if lines:
            with open(cubin, "wb") as f:
                f.write(kernel.asm["cubin"])
            listing = subprocess.run([os.path.join(BIN, "nvdisasm"), "-g", "-c", cubin], capture_output=True,
                                     text=True).stdout
    return run.stderr + run.stdout, sass, listing


LOOP_KINDS = ("MUFU", "F2I", "ATOMG", "LDG", "STG", "LDS", "SHFL", "LDL", "STL", "BAR")


def loops(sass: str) -> list[tuple[str, int, dict]]:
    """[(label, instructions, {kind: count})] of each loop in ``sass`` (nvdisasm's text): the instructions
    from a label to a later branch back to it, counted by LOOP_KINDS (those present)."""
    body: list = []         # instructions and labels, in order
    for line in sass.splitlines():
        label = re.match(r"\s*(\.L_x_\d+):", line)
        inst = re.search(r"/\*[0-9a-f]{4,}\*/\s+([^;]+);", line)
        if label:
            body.append(("label", label.group(1)))
        elif inst:
            body.append(("inst", inst.group(1).strip()))
    at = {text: i for i, (kind, text) in enumerate(body) if kind == "label"}
    found = []
    for i, (kind, text) in enumerate(body):
        target = re.search(r"BRA\s+`?\((\.L_x_\d+)\)", text) if kind == "inst" else None
        if target and at.get(target.group(1), i) < i:
            insts = [t for k, t in body[at[target.group(1)]:i + 1] if k == "inst"]
            kinds = {name: sum(name in t for t in insts) for name in LOOP_KINDS}
            found.append((target.group(1), len(insts), {k: n for k, n in kinds.items() if n}))
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", default="0,1,2,3,4,p1,p0")
    ap.add_argument("--flags", default="1,1,1", help="top_k,top_p,min_p tensors passed (1) or None (0)")
    ap.add_argument("--B", type=int, default=128)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--sass", default=None, help="write each stage's SASS to this folder")
    ap.add_argument("--loops", action="store_true", help="each loop's instructions, by a few kinds")
    ap.add_argument("--lazy", action="store_true", help="the lazy cut's plan (draft probs, injected noise)")
    ap.add_argument("--lines", default=None, help="write each stage's SASS with source lines to this folder "
                    "(Triton's own cubin; for ci/ncu_sass.py --lines)")
    add_set_option(ap)
    args = ap.parse_args()
    apply_sets(triton_filter, args.set)
    flags = tuple(bool(int(x)) for x in args.flags.split(","))
    metas = stage_metas(args.B, args.V, flags, (True, False) if args.lazy else None)
    print(f"triton {triton.__version__}, sm_90a, B={args.B} V={args.V} filters passed {args.flags}")
    passes = dict(p1=getattr(triton_chain, "_row_stats_cut_kernel", None) or triton_chain._row_stats_gather_kernel,
                  p0=triton_chain._row_stats_kernel)
    for stage in (int(s) if s.isdigit() else s for s in args.stages.split(",")):
        if stage not in metas:
            print(f"stage {stage}: not in this plan")
            continue
        report, sass, listing = compile_stage(metas[stage], passes.get(stage), bool(args.lines))
        lines = [line.strip() for line in report.splitlines() if "registers" in line or "spill" in line]
        counts = {op: sass.count(op) for op in ("MUFU", "LDG", "STG", "ATOM", "BRA", "BAR")}
        print(f"stage {stage}: {'; '.join(lines)}; SASS {len(sass.splitlines())} lines, {counts}", flush=True)
        if args.loops:
            for label, n, kinds in loops(sass):
                print(f"  loop {label}: {n} instructions, {kinds}")
        if args.sass:
            os.makedirs(args.sass, exist_ok=True)
            with open(os.path.join(args.sass, f"stage{stage}.sass"), "w") as f:
                f.write(sass)
        if args.lines:
            os.makedirs(args.lines, exist_ok=True)
            with open(os.path.join(args.lines, f"stage{stage}.lines.sass"), "w") as f:
                f.write(listing)


if __name__ == "__main__":
    main()
