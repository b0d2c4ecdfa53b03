"""Where a kernel's warps wait, by SASS instruction, from Nsight Compute's source page (issue 29's probe).

    ncu --profile-from-start off --clock-control none [--cache-control none] -k regex:_cut_kernel \\
        --section SourceCounters --section WarpStateStats -o OUT python ci/filter_stages.py ... --ncu
    ncu -i OUT.ncu-rep --page source --print-source sass --csv | gzip > source.csv.gz
    python ci/ncu_sass.py source.csv.gz [--lines LISTING] [--kernel N] [--top N] [--warps N]

For each kernel profiled in ncu's source page (its CSV, gzipped or not): the warp-state samples by stall reason,
then each run of instructions executed one after another in the code (a segment: what a program runs between two
jumps over code it does not run), with the warps that entered it (its first instruction's executions), the warp
instructions it ran and their share of the kernel's, its samples and how many of them wait on an instruction fetch
(``no_inst``). A jump lands on code that the SM's instruction cache has not held yet, and straight-line code that a
program runs once is fetched as it runs. With ``--lines``, a ``nvdisasm -g`` listing of the same kernel compiled here
(``ci/cut_sass.py --lines DIR``) names the source lines: the two SASS are aligned by opcode, since the GPU's build
may differ in its registers and a few instructions, and an instruction left unmatched takes its nearest matched
neighbour's line; ``--top`` then lists the lines with the most samples. ncu flushes the GPU's caches before each
pass unless given ``--cache-control none``, so that the code itself comes from memory: read ``no_inst`` with the
flag the run was given. With ``--warps N``, the same shares for the code that at most N warps ran (the one
launch's record, which one program a row runs alone at the end). Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import csv
import difflib
import gzip
import re

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def read_kernels(path: str) -> list[dict]:
    """[{name, header, rows}] of each kernel in ncu's source-page CSV at path (.gz read as gzip): rows as ncu
    wrote them, one an instruction in the kernel's address order."""
    opener = gzip.open if path.endswith(".gz") else open
    kernels: list[dict] = []
    with opener(path, "rt", newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                kernels.append(dict(name=row[1], header=None, rows=[]))
            elif row[0] == "Address" and kernels:
                kernels[-1]["header"] = row
            elif row[0].startswith("0x") and kernels and kernels[-1]["header"]:
                kernels[-1]["rows"].append(row)
    return kernels


def column(kernel: dict, name: str) -> list[int]:
    """The integer column ``name`` of every instruction of the kernel (0 where blank)."""
    at = kernel["header"].index(name)
    return [int(row[at] or 0) for row in kernel["rows"]]


def stall_shares(kernel: dict, keep: set | None = None) -> collections.Counter:
    """{reason: samples} of the kernel's warp-state samples (the stall_* columns, issued or not), of the
    instructions at the indices in ``keep`` where given."""
    shares: collections.Counter = collections.Counter()
    for name in kernel["header"]:
        if name.startswith("stall_") and not name.endswith("(Not Issued)"):
            shares[name[len("stall_"):]] = sum(n for i, n in enumerate(column(kernel, name))
                                               if keep is None or i in keep)
    return shares


def stall_line(shares: collections.Counter) -> str:
    """The printed line of ``stall_shares``' reasons, each as its share of their samples, most first."""
    total = sum(shares.values()) or 1
    return "stalls: " + ", ".join(f"{k} {100 * v / total:.1f}%" for k, v in shares.most_common() if v)


def segments(executed: list[int]) -> list[tuple[int, int]]:
    """[(first, end)) of each run of consecutive instructions executed at least once."""
    runs, start = [], None
    for i, n in enumerate(executed + [0]):
        if n and start is None:
            start = i
        elif not n and start is not None:
            runs.append((start, i))
            start = None
    return runs


def opcode(sass: str) -> str:
    """An instruction's opcode with its modifiers (``LDG.E.64``), its predicate dropped."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].rstrip(";") if words else ""


def read_listing(path: str) -> list[tuple[str, tuple[str, int] | None]]:
    """[(opcode, (file, line) or None)] of each instruction of a ``nvdisasm -g`` listing, in address order: the line
    is the last ``//## File`` comment above it, the file by its base name."""
    out, at = [], None
    with open(path) as f:
        for text in f:
            loc = re.match(r'\s*//## File "(.*)", line (\d+)', text)
            if loc:
                at = (loc.group(1).rsplit("/", 1)[-1], int(loc.group(2)))
                continue
            ins = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", text)
            if ins:
                out.append((opcode(ins.group(1)), at))
    return out


def source_lines(kernel: dict, listing: list) -> list[tuple[str, int] | None]:
    """Each of the kernel's instructions' source line from ``listing`` (``read_listing``) by an alignment of the two
    opcode sequences; an unmatched instruction takes its nearest matched neighbour's (the one before it on a tie)."""
    ops = [opcode(row[1]) for row in kernel["rows"]]
    blocks = difflib.SequenceMatcher(None, ops, [op for op, _ in listing], autojunk=False).get_matching_blocks()
    matched = {b.a + i: listing[b.b + i][1] for b in blocks for i in range(b.size)}
    if not matched:
        return [None] * len(ops)
    keys = sorted(matched)
    lines = []
    for i in range(len(ops)):
        if i not in matched:
            j = bisect.bisect_left(keys, i)
            i = min((keys[x] for x in (j - 1, j) if 0 <= x < len(keys)), key=lambda k: abs(k - i))
        lines.append(matched[i])
    return lines


def report(kernel: dict, lines: list | None, top: int) -> list[str]:
    """The printed tables of one kernel."""
    samples, executed = column(kernel, SAMPLES), column(kernel, EXECUTED)
    fetch = column(kernel, "stall_no_inst") if "stall_no_inst" in kernel["header"] else [0] * len(samples)
    out = [f"kernel {kernel['name']}: {sum(samples)} samples, {sum(executed)} warp instructions, "
           f"{sum(1 for n in executed if n)} of {len(executed)} instructions executed",
           stall_line(stall_shares(kernel)), "",
           "| segment | instructions | entered (warps) | warp instructions run | share of those run | samples "
           "| of them no_inst | source |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    run = sum(executed) or 1
    for a, b in segments(executed):
        files = collections.Counter(lines[i][0] for i in range(a, b) if lines and lines[i]) if lines else {}
        named = ", ".join(f"{f} {n}" for f, n in files.most_common(3)) if files else "-"
        # a segment is entered at its first instruction (a loop's first trip included, where the loop starts it)
        out.append(f"| [{a}, {b}) | {b - a} | {executed[a]} | {sum(executed[a:b])} | "
                   f"{100 * sum(executed[a:b]) / run:.1f}% | {sum(samples[a:b])} | {sum(fetch[a:b])} | {named} |")
    if lines and top:
        by_line: collections.Counter = collections.Counter()
        fetch_by_line: collections.Counter = collections.Counter()
        for i, line in enumerate(lines):
            if line:
                by_line[line] += samples[i]
                fetch_by_line[line] += fetch[i]
        out += ["", "| source line | samples | share | of them no_inst |", "| --- | ---: | ---: | ---: |"]
        out += [f"| {f}:{n} | {s} | {100 * s / max(1, sum(samples)):.1f}% | {fetch_by_line[(f, n)]} |"
                for (f, n), s in by_line.most_common(top) if s]
    return out


def few_warps(kernel: dict, lines: list | None, most: int, top: int) -> list[str]:
    """The printed table of the code that at most ``most`` warps ran: the one launch's record, which one program a
    row runs after its splits have left (rows x warps a program), whose few warps the kernel-wide shares drown. Its
    instructions, the warp instructions they ran, its samples by stall reason, and with ``lines`` the source lines
    with the most of its instructions (a line's code that a warp runs once is fetched as it runs)."""
    executed = column(kernel, EXECUTED)
    keep = {i for i, n in enumerate(executed) if 0 < n <= most}
    shares = stall_shares(kernel, keep)
    out = [f"run by at most {most} warps: {len(keep)} instructions, {sum(executed[i] for i in keep)} warp "
           f"instructions, {sum(shares.values())} samples", stall_line(shares)]
    if lines and top:
        count: collections.Counter = collections.Counter(lines[i] for i in keep if lines[i])
        out += ["", "| source line | its instructions run by those warps |", "| --- | ---: |"]
        out += [f"| {f}:{n} | {c} |" for (f, n), c in count.most_common(top)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", help="ncu --page source --print-source sass --csv output (.gz: gzipped)")
    ap.add_argument("--lines", default=None, help="a nvdisasm -g listing of the kernel (ci/cut_sass.py --lines)")
    ap.add_argument("--kernel", type=int, default=None, help="only the N-th kernel profiled (from 0)")
    ap.add_argument("--top", type=int, default=30, help="source lines listed, with --lines")
    ap.add_argument("--warps", type=int, default=None,
                    help="also the code that at most N warps ran (the one launch's record: rows x 8 at B = 1, 40)")
    args = ap.parse_args()
    kernels = read_kernels(args.csv)
    if not kernels:
        raise SystemExit(f"{args.csv}: no kernel in it (ncu --page source --print-source sass --csv)")
    listing = read_listing(args.lines) if args.lines else None
    for n, kernel in enumerate(kernels):
        if args.kernel is not None and n != args.kernel:
            continue
        lines = source_lines(kernel, listing) if listing else None
        out = [f"## {n}"] + report(kernel, lines, args.top)
        if args.warps:
            out += [""] + few_warps(kernel, lines, args.warps, args.top)
        print("\n".join(out) + "\n", flush=True)


if __name__ == "__main__":
    main()
