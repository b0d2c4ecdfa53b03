"""Each launch of a filtered Triton call, timed alone: pass 1, the cut's stages, pass 2 (issue 29's probe).

    python ci/filter_stages.py [--B 128] [--V 151936] [--programs 2048,4096]
                               [--whole [--profile] | --trace | --ncu | --latency VARIANT ... [--rounds 3]
                                | --stamps [VARIANT ...]]
                               [--set NAME=VALUE ...] [--settings 'none;top_p=0.9'] [--all-tensors]

Inputs as ``bench_gpu.py --filters`` builds them (every request filtered, float32, k = 4); CUDA events
around each launch, median of 35 calls after 5 warm-up calls. ``--programs`` sets
``triton_filter.READ_PROGRAMS`` (stage 1's split target) for each row of output. ``--whole`` times the
whole filtered call instead, three ways: eager (CUDA events around each call), the host's wall clock per
call with nothing synchronised, and replayed from a CUDA graph (the GPU's work alone); ``--profile`` adds
the host's heaviest functions. ``--trace`` gives each launch's GPU time alone, from the profiler's kernel
records of 40 whole calls (no event around a launch: at B = 1 those cost more than the launches). ``--ncu``
runs one call of each setting, after three to compile and warm, between cudaProfilerStart and Stop, for
Nsight Compute to profile those alone: ``ncu --profile-from-start off --clock-control none --set full
python ci/filter_stages.py --ncu ...`` (docs/nightly/2026-11-27-h100-filters5/1-*). ``--latency V1 V2 ...``
prints a table of each setting's latency in turn against the unfiltered call (``bench_gpu.time_paired``: each call
synchronised before and after, the two in turn, so that both see the same host) under each variant of the
settings, the variants in turn ``--rounds`` times, and whether every variant leaves the first one's outputs and
records (``--latency ONE_LAUNCH_SHARED=0 default``: the A/B of a setting in one process). ``--stamps [V1 ...]`` prints
when row 0's splits end each phase of the one launch of a few rows (B <= 4 at k = 4), from the GPU clock stamps
that ONE_LAUNCH_STAMPS has each split store (``triton_cut.stamp``), and then when the split that writes row 0's
record ends each phase of it (its sums, the row's tallies, each crossing's search, the top-p tie group, the whole
record found, and stored; "-" where the row's filters take none), and when its latest split has its own pass-1
partials and its share of each round of the sample bracket's tally, and has every split's, median of 50 calls
(the waits: the splits' spread); with variants, a row each, in turn in one process. ``--set`` overrides a
``triton_filter`` constant (NS=1024, ONE_LAUNCH_ROWS=0) for the run. Only the filters that are on
are passed, unless ``--all-tensors``: then all three are (0 and 1 where off), as ``bench_gpu.py --filters``
passes them and as a server does once any request sets each, which compiles every filter's code into each
launch. Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import bench_gpu  # noqa: E402
from filter_knobs import add_set_option, apply_sets  # noqa: E402
from specverify.kernels import triton_filter  # noqa: E402
from specverify.kernels.triton_chain import with_cut  # noqa: E402
from specverify.kernels.triton_cut import SM_SLOT, STAMPS_N  # noqa: E402
from specverify.kernels.triton_kernels import launches  # noqa: E402
from specverify.kernels.triton_launch import launch  # noqa: E402
from specverify.kernels.triton_filter import cut_splits  # noqa: E402


def stage_times(sets, filters, calls: int = 40, warm: int = 5) -> tuple[dict, int]:
    """({launch label: median us}, slow-path rows of the last call)."""
    times: dict = {}
    for i in range(calls):
        s = sets[i % len(sets)]
        steps = launches(s.token_ids, s.num_accepted, s.num_draft, s.drafts, s.logits, s.q, s.temperature,
                         uniform=s.uniform, exponential=s.exponential,
                         splits=cut_splits(filters[0], s.token_ids, s.logits))
        cut, record = triton_filter.cut_launches(steps[0], *filters, steps[-1])
        plan = [(f"stage {st[3]['STAGE']} grid {st[1]}" if "STAGE" in st[3] else f"pass 1 grid {st[1]}", st)
                for st in cut] + [("pass 2", with_cut(steps[-1], record))]
        for label, step in plan:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            launch(*step)
            end.record()
            torch.cuda.synchronize()
            if i >= warm:
                times.setdefault(label, []).append(start.elapsed_time(end) * 1000)
    return {k: statistics.median(v) for k, v in times.items()}, int((record.view(6, -1)[5] == 2).sum())


def kernel_trace(sets, filters, calls: int = 40, warm: int = 5) -> str:
    """Each launch of a whole call, in launch order, as 'kernel: median us on the GPU' over ``calls`` calls."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    call = _caller(sets, filters)
    for i in range(warm):
        call(sets[i % len(sets)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            call(sets[i % len(sets)])
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    per_call = len(kernels) // calls
    out = []
    for at in range(per_call):
        times = [kernels[c * per_call + at].time_range.elapsed_us() for c in range(calls)]
        out.append(f"{kernels[at].name.split('(')[0][:24]} {statistics.median(times):.1f}")
    return ", ".join(out) + f" (us; {per_call} launches a call)"


def profiled_call(sets, filters, warm: int = 3) -> None:
    """One call on ``sets[0]`` between cudaProfilerStart and cudaProfilerStop, after ``warm`` calls."""
    call = _caller(sets, filters)
    for i in range(warm):
        call(sets[i % len(sets)])
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call(sets[0])
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def _caller(sets, filters):
    """call(s): the filtered call on input set s, or the unfiltered one where ``filters`` is None."""
    from reference import SpecBatch  # noqa: PLC0415
    from specverify.kernels.triton_sampler import filtered_sample_into  # noqa: PLC0415

    batches = {id(s): SpecBatch(s.num_draft, s.drafts, s.logits, s.q, s.temperature, *(filters or (None,) * 3))
               for s in sets}

    def call(s):
        if filters is None:
            s.fused()
            return
        filtered_sample_into(s.token_ids, s.num_accepted, batches[id(s)], uniform=s.uniform,
                             exponential=s.exponential)
    return call


def host_profile(call, sets, calls: int = 400) -> None:
    """Prints the host's heaviest functions over ``calls`` calls (cProfile, by own time)."""
    profile = cProfile.Profile()
    torch.cuda.synchronize()
    profile.enable()
    for i in range(calls):
        call(sets[i % len(sets)])
    profile.disable()
    torch.cuda.synchronize()
    pstats.Stats(profile).sort_stats("tottime").print_stats(14)


def whole_call(sets, filters, calls: int = 200, profile: bool = False) -> dict:
    """{eager, host, graph: median (graph: mean) us per call} on ``sets``: filtered, or the unfiltered call
    where ``filters`` is None."""
    call = _caller(sets, filters)
    out = dict(eager=bench_gpu.time_calls(call, sets) * 1e6)
    if profile:
        host_profile(call, sets)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(calls):
        call(sets[i % len(sets)])
    out["host"] = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call(sets[0])       # the work space is allocated outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        call(sets[0])
    for _ in range(5):
        graph.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        graph.replay()
    b.record()
    b.synchronize()
    out["graph"] = a.elapsed_time(b) * 1000 / calls
    return out


def _variant_setter(variants: list[str], option: str):
    """apply(variant): ``triton_filter``'s settings as they stand, then those a variant ('NAME=V,NAME=V', or
    'default' for none) sets; apply('default') restores them. Refuses, naming them, settings the module lacks (a
    misspelt one would time the defaults twice and show a difference of none)."""
    names = {item.split("=")[0] for v in variants if v != "default" for item in v.split(",")}
    unknown = sorted(n for n in names if not hasattr(triton_filter, n))
    if unknown:
        raise ValueError(f"{option}: triton_filter has no {', '.join(unknown)}")
    defaults = {name: getattr(triton_filter, name) for name in names}

    def apply(variant: str) -> None:
        for name, value in defaults.items():
            setattr(triton_filter, name, value)
        if variant != "default":
            apply_sets(triton_filter, variant.split(","))
    return apply


def stamp_rows(sets, filters, variants: list[str], calls: int = 50, warm: int = 5):
    """An iterator of (variant, ``phase_stamps``) under each variant of ``triton_filter``'s settings in turn, in one
    process and on the same inputs (``--stamps V1 V2 ...``), each as soon as it is measured, so that a run cut off by
    a time limit keeps the variants it reached; the settings are restored after."""
    apply = _variant_setter(variants, "--stamps")      # here, so that a bad variant is refused before any is run

    def rows():
        for v in variants:
            try:
                apply(v)
                ends = phase_stamps(sets, filters, calls, warm)
            finally:
                apply("default")
            yield v, ends
    return rows()


def latency_rows(sets, filters, variants: list[str], rounds: int) -> list[dict]:
    """Latency in turn (``bench_gpu.time_paired``) of the filtered call on ``sets`` against the unfiltered call,
    under each variant of ``triton_filter``'s settings ('NAME=V,NAME=V', or 'default' for the settings as they
    stand), the variants in turn ``rounds`` times: a row a variant {variant, ratio: the median of the rounds'
    filtered / unfiltered, ratios, filtered_us, unfiltered_us (medians), same: whether its outputs and records on
    sets[0] are the first variant's}. The settings are restored after."""
    apply = _variant_setter(variants, "--latency")
    call, plain = _caller(sets, filters), _caller(sets, None)
    rows_of = sets[0].token_ids.numel()
    try:
        outs = {}
        for v in variants:
            apply(v)
            call(sets[0])
            outs[v] = (sets[0].token_ids.cpu().clone(), sets[0].num_accepted.cpu().clone(),
                       bench_gpu.last_records(rows_of).clone())
        times: dict = {v: [] for v in variants}
        for _ in range(rounds):
            for v in variants:
                apply(v)
                times[v].append(bench_gpu.time_paired(plain, sets, call, sets))
    finally:
        apply("default")
    rows = []
    for v in variants:
        ratios = [f / p for p, f in times[v]]
        rows.append(dict(variant=v, ratio=statistics.median(ratios), ratios=ratios,
                         filtered_us=statistics.median(f for _, f in times[v]) * 1e6,
                         unfiltered_us=statistics.median(p for p, _ in times[v]) * 1e6,
                         same=all(torch.equal(a, b) for a, b in zip(outs[variants[0]], outs[v]))))
    return rows


# what each of the one launch's stamps ends (``triton_cut.stamp``: stamp 0 is a split's start), then what each of the
# record's ends, which the split that writes it stamps (``triton_record.write_record``, ``triton_search.resolve``)
STAMP_PHASES = ("pass 1 and its handoff", "norms", "bracket", "read", "pack", "ticket", "record")
RECORD_PHASES = ("sums", "tallies", "top-k crossing", "top-p crossing", "tie group", "resolved", "stored")
# and, within the record, the steps of its last key search (top-p's where it is on; ``triton_search._find``)
SEARCH_PHASES = ("last search: entered", "first copy", "copied", "ranked")
# their stamp slots (the first copy's, made where the interval starts narrow, was added last)
SEARCH_SLOTS = (21, 24, 22, 23)
# and when the splits reach what they wait on: their own pass-1 partials, then each round of the sample bracket's
# shared tally, their own share and every split's (``triton_handoff``, ``triton_bracket``)
WAIT_PHASES = ("own pass-1 partials", "round 1 own share", "round 1 all", "round 2 own share", "round 2 all")
# and, last, the most programs of the launch that ran on one SM (``triton_cut.place``): the launch plans one an SM
PLACE_COLUMN = "most programs on one SM"


def last_stamps() -> torch.Tensor:
    """[R, SF, STAMPS_N] int64 the stamps that the last call of the one launch with ONE_LAUNCH_STAMPS left in this
    thread's work space (0 where a split did not reach a phase), on the CPU."""
    stamps, rows, sf = _stamps_region()
    return stamps.view(rows, sf, STAMPS_N.value).cpu()


def _stamps_region() -> tuple:
    """(the stamps' words in this thread's work space, R, SF) of the one stamped one-launch plan cached
    (``triton_filter._plans``): the plan's last R SF STAMPS_N words (``triton_filter_plan._recipe``)."""
    found = [(plan[6], stage[1]) for plan in triton_filter._plans.values() for stage in plan[7]
             if stage[0] == 3 and stage[2].get("STAMPS")]
    if len(found) != 1:
        raise RuntimeError(f"--stamps: {len(found)} stamped one-launch plans cached, where one was expected (a few "
                           "rows, ONE_LAUNCH_STAMPS=1)")
    words, grid = found[0]
    rows, sf = grid[0] * grid[1], grid[2]
    return bench_gpu.work_space()[0][words - rows * sf * STAMPS_N.value:words], rows, sf


def phase_stamps(sets, filters, calls: int = 50, warm: int = 5) -> list[float]:
    """The one launch's phases (``STAMP_PHASES``) on ``sets``: for each, the median over ``calls`` calls of when row
    0's latest split ended it, in us from the launch's first stamp, then the launch's last split's end, then the
    record's phases (``RECORD_PHASES``) and its last key search's (``SEARCH_PHASES``), then the waits'
    (``WAIT_PHASES``, row 0's latest split), each the median of the calls that reached it (nan where none did),
    then the most programs on one SM (``PLACE_COLUMN``), the largest of any call. The one launch with
    ONE_LAUNCH_STAMPS (restored after); each call's stamps are zeroed before it."""
    saved = triton_filter.ONE_LAUNCH_STAMPS
    call = _caller(sets, filters)
    try:
        triton_filter.ONE_LAUNCH_STAMPS = 1
        call(sets[0])       # the plan, then its work space
        stamps = _stamps_region()[0]
        ends: list = []
        for i in range(warm + calls):
            stamps.zero_()
            call(sets[i % len(sets)])
            if stamps.is_cuda:
                torch.cuda.synchronize()
            if i >= warm:
                ends.append(_phase_ends(last_stamps()))
    finally:
        triton_filter.ONE_LAUNCH_STAMPS = saved
    columns = [[t for t in column if not math.isnan(t)] for column in zip(*ends)]
    return [statistics.median(column) if column else math.nan for column in columns[:-1]] + [max(columns[-1])]


def _phase_ends(stamps: torch.Tensor) -> list[float]:
    """Row 0's phase ends (its latest split's stamp of each phase; a phase no split stamped ends with the one
    before it), the launch's last split's end, the record's phase ends and its last search's (the stamps of the
    split that wrote row 0's record) and the waits' (row 0's latest split's), nan where none was reached, in us
    from the first start, of one call's [R, SF, STAMPS_N] stamps; then the most of the launch's splits that
    stamped one SM."""
    splits = stamps[:, :, :len(STAMP_PHASES) + 1]
    start = int(splits[:, :, 0][splits[:, :, 0] > 0].min())
    ends, last = [], start
    for phase in range(1, len(STAMP_PHASES) + 1):
        latest = int(splits[0, :, phase].max())
        last = latest if latest > 0 else last
        ends.append((last - start) / 1000)
    ends.append((int(splits.max()) - start) / 1000)
    first = len(STAMP_PHASES) + 1
    writer = stamps[0, :, first].argmax()
    record = stamps[0, writer, first:first + len(RECORD_PHASES)].tolist() \
        + stamps[0, writer, list(SEARCH_SLOTS)].tolist()
    first += len(RECORD_PHASES)
    waits = stamps[0, :, first:first + len(WAIT_PHASES)].max(dim=0).values.tolist()
    sms = stamps[:, :, SM_SLOT.value].flatten()
    most = int(torch.unique(sms[sms > 0], return_counts=True)[1].max())
    return ends + [(t - start) / 1000 if t > 0 else math.nan for t in record + waits] + [most]


def _filters(args, setting: tuple) -> tuple:
    """The (top_k, top_p, min_p) tensors of a bench_gpu.FILTER_SETTINGS entry: those on, or all three with
    ``--all-tensors``."""
    on = (True,) * 3 if args.all_tensors else (setting[0] > 0, setting[1] < 1, setting[2] > 0)
    return tuple(torch.full((args.B,), v, device=bench_gpu.DEVICE, dtype=dt) if o else None
                 for v, dt, o in zip(setting, (torch.int64, torch.float32, torch.float32), on))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=128)
    ap.add_argument("--V", type=int, default=151_936)
    ap.add_argument("--programs", default=str(triton_filter.READ_PROGRAMS))
    ap.add_argument("--whole", action="store_true", help="the whole call: eager, host, graph replay")
    ap.add_argument("--profile", action="store_true", help="with --whole: the host's heaviest functions")
    ap.add_argument("--trace", action="store_true", help="each launch's GPU time, from the profiler")
    ap.add_argument("--ncu", action="store_true", help="one call a setting in a profiler range, for ncu")
    ap.add_argument("--latency", nargs="+", metavar="VARIANT",
                    help="latency in turn against the unfiltered call under each variant of the settings "
                         "('NAME=V,NAME=V' or 'default'), in --rounds rounds: a table")
    ap.add_argument("--rounds", type=int, default=3, help="with --latency: rounds of the variants in turn")
    ap.add_argument("--stamps", nargs="*", metavar="VARIANT", default=None,
                    help="the one launch's phases, from its splits' clock stamps (ONE_LAUNCH_STAMPS): a table; "
                         "with variants ('NAME=V,NAME=V' or 'default'), a row each, in one process")
    add_set_option(ap)
    ap.add_argument("--all-tensors", action="store_true",
                    help="pass all three filter tensors (off: 0 or 1), as the benchmark does")
    ap.add_argument("--settings", default=None,
                    help="which of bench_gpu.FILTER_SETTINGS to run, ';'-separated (default: all)")
    args = ap.parse_args()
    apply_sets(triton_filter, args.set)
    sets = bench_gpu.make_sets(args.B, args.V, torch.float32, 50 << 20)
    headed = False      # --latency's table header, once
    for programs in map(int, args.programs.split(",")):
        triton_filter.READ_PROGRAMS = programs
        print(f"programs {programs}", flush=True)
        for name, setting in bench_gpu.FILTER_SETTINGS.items():
            if args.settings is not None and name not in args.settings.split(";"):
                continue
            if args.ncu:
                profiled_call(sets, None if setting is None else _filters(args, setting))
                print(f"ncu range B={args.B} {name}", flush=True)
                continue
            if setting is None:
                if args.trace:
                    print(f"trace B={args.B} {name:20s} {kernel_trace(sets, None)}", flush=True)
                if args.whole:
                    times = whole_call(sets, None, profile=args.profile)
                    shown = ", ".join(f"{k} {v:.1f}" for k, v in times.items())
                    print(f"whole B={args.B} {name:20s} {shown} (us)", flush=True)
                continue
            filters = _filters(args, setting)
            if args.stamps is not None:
                if not headed:
                    print("| filter | " + " | ".join(STAMP_PHASES) + " | launch end | record: "
                          + " | ".join(RECORD_PHASES + SEARCH_PHASES) + " | waits: " + " | ".join(WAIT_PHASES)
                          + f" | {PLACE_COLUMN} |")
                    print("| --- |" + " ---: |" * (len(STAMP_PHASES) + len(RECORD_PHASES) + len(SEARCH_PHASES)
                                                   + len(WAIT_PHASES) + 2))
                    headed = True
                for variant, ends in stamp_rows(sets, filters, args.stamps or ["default"]):
                    label = name if not args.stamps else f"{name} / {variant}"
                    print(f"| {label} | " + " | ".join("-" if math.isnan(t) else f"{t:.1f}" for t in ends[:-1])
                          + f" | {ends[-1]} |", flush=True)
                continue
            if args.latency:
                if not headed:
                    print("| filter | variant | latency ratio (median) | rounds | filtered (us) | unfiltered (us) "
                          "| outputs and records as the first variant's |")
                    print("| --- | --- | ---: | --- | ---: | ---: | --- |")
                    headed = True
                for row in latency_rows(sets, filters, args.latency, args.rounds):
                    print(f"| {name} | {row['variant']} | {row['ratio']:.2f} | "
                          f"{', '.join(f'{r:.2f}' for r in row['ratios'])} | {row['filtered_us']:.1f} | "
                          f"{row['unfiltered_us']:.1f} | {row['same']} |", flush=True)
                continue
            if args.trace:
                print(f"trace B={args.B} {name:20s} {kernel_trace(sets, filters)}", flush=True)
                continue
            if args.whole:
                times = whole_call(sets, filters, profile=args.profile)
                shown = ", ".join(f"{k} {v:.1f}" for k, v in times.items())
                print(f"whole B={args.B} {name:20s} {shown} (us)", flush=True)
                continue
            times, slow = stage_times(sets, filters)
            shown = ", ".join(f"{k} {v:.1f}" for k, v in times.items())
            print(f"stages B={args.B} {name:20s} slow rows {slow}: {shown} (us)", flush=True)


if __name__ == "__main__":
    main()
