"""ci/ncu_sass.py, the reader of Nsight Compute's source page that places a launch's warp-state samples: on a small
page of ncu's layout (two kernels, a header of its columns, blank counts) and a ``nvdisasm -g`` listing of its own
(other registers, one instruction more), what it must get right is which instructions run one after another, how
many samples each run and each source line holds, and which line an instruction comes from."""

from __future__ import annotations

import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ci"))
import ncu_sass  # noqa: E402

HEADER = ["Address", "Source", ncu_sass.SAMPLES, "Warp Stall Sampling (Not-issued Samples)", ncu_sass.EXECUTED,
          "stall_long_sb", "stall_no_inst", "stall_wait", "stall_no_inst (Not Issued)"]
# (SASS, samples, executed, long_sb, no_inst, wait) of each instruction; the second kernel's jumps over two
FIRST = [("LDC R1, c[0x0][0x28]", 3, 8, 0, 3, 0), ("@P0 LDG.E R2, desc[UR4][R4.64]", 5, 8, 5, 0, 0),
         ("FADD R3, R2, R2", 1, 8, 0, 0, 1)]
SECOND = [("LDC R1, c[0x0][0x28]", 2, 8, 0, 2, 0), ("@!P1 BRA 0x7f0040", 1, 8, 0, 0, 1), ("IMAD R5, R6, R7, RZ", 0, 0,
          0, 0, 0), ("IMAD R5, R6, R7, RZ", 0, 0, 0, 0, 0), ("FMUL R8, R9, R9", 7, 8, 0, 6, 1),
          ("EXIT", "", 8, "", "", "")]
LISTING = """
        //## File "/x/specverify/kernels/triton_cut.py", line 90
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        //## File "/x/specverify/kernels/triton_gather.py", line 182
        /*0010*/              @!P2 BRA `(.L_x_1) ;
        /*0020*/                   IMAD R9, R3, R4, RZ ;
        /*0030*/                   IMAD R9, R3, R4, RZ ;
        /*0040*/                   NOP ;
        //## File "/x/specverify/kernels/triton_record.py", line 29
        /*0050*/                   FMUL R1, R2, R2 ;
        /*0060*/                   EXIT ;
"""


def _page(tmp_path) -> str:
    """The two kernels' source page, gzipped, as `ncu --page source --print-source sass --csv` writes it."""
    rows = []
    for name, kernel in (("_row_stats_kernel", FIRST), ("_cut_kernel", SECOND)):
        rows += [f'"Kernel Name","{name}",', ",".join(f'"{h}"' for h in HEADER)]
        for i, (sass, s, e, lsb, ni, w) in enumerate(kernel):
            rows.append(",".join(f'"{v}"' for v in (f"0x7f00{16 * i:02x}", f"      {sass}", s, s, e, lsb, ni, w, ni)))
    path = str(tmp_path / "source.csv.gz")
    with gzip.open(path, "wt") as f:
        f.write("\n".join(rows) + "\n")
    return path


def test_segments_are_the_runs_of_instructions_executed_one_after_another(tmp_path):
    """A jump over code that does not run splits the run of executed instructions in two: the second kernel's
    branch skips two instructions, so its six are two segments, and each segment's samples and instruction-fetch
    stalls are its instructions' (a blank count read as 0). The first kernel's three run as one."""
    first, second = ncu_sass.read_kernels(_page(tmp_path))
    assert (first["name"], second["name"]) == ("_row_stats_kernel", "_cut_kernel")
    assert ncu_sass.segments(ncu_sass.column(first, ncu_sass.EXECUTED)) == [(0, 3)]
    assert ncu_sass.segments(ncu_sass.column(second, ncu_sass.EXECUTED)) == [(0, 2), (4, 6)]
    assert ncu_sass.stall_shares(second) == {"long_sb": 0, "no_inst": 8, "wait": 2}
    rows = [line for line in ncu_sass.report(second, None, 0) if line.startswith("| [")]
    assert rows == ["| [0, 2) | 2 | 8 | 16 | 50.0% | 3 | 2 | - |", "| [4, 6) | 2 | 8 | 16 | 50.0% | 7 | 6 | - |"]


def test_each_instruction_takes_the_source_line_of_its_match_in_the_listing(tmp_path):
    """The listing is another build of the kernel: its registers differ and it holds a NOP the profiled one does
    not, so the two are matched by opcode, predicate dropped; every profiled instruction has its match's line,
    and the lines' samples add up to the kernel's."""
    second = ncu_sass.read_kernels(_page(tmp_path))[1]
    listing = ncu_sass.read_listing(_write(tmp_path, LISTING))
    assert [op for op, _ in listing] == ["LDC", "BRA", "IMAD", "IMAD", "NOP", "FMUL", "EXIT"]
    lines = ncu_sass.source_lines(second, listing)
    assert lines == [("triton_cut.py", 90)] + [("triton_gather.py", 182)] * 3 + [("triton_record.py", 29)] * 2
    table = ncu_sass.report(second, lines, 5)
    assert "| triton_record.py:29 | 7 | 70.0% | 6 |" in table and "| triton_cut.py:90 | 2 | 20.0% | 2 |" in table
    segment = next(line for line in table if line.startswith("| [4, 6)"))
    assert segment.endswith("| triton_record.py 2 |"), segment


def test_an_instruction_without_a_match_takes_its_nearest_matched_neighbours_line(tmp_path):
    """A profiled instruction the listing lacks (here an opcode the listing never has) is placed by the nearest
    instruction that matched, so that a build's few extra instructions do not drop their samples: the FFMA in
    place of the FMUL lies between an IMAD and the EXIT, one away from each, and takes the one before's line."""
    second = ncu_sass.read_kernels(_page(tmp_path))[1]
    second["rows"][4][1] = "      FFMA R8, R9, R9, R1"
    lines = ncu_sass.source_lines(second, ncu_sass.read_listing(_write(tmp_path, LISTING)))
    assert lines[3:] == [("triton_gather.py", 182)] * 2 + [("triton_record.py", 29)], lines


def _write(tmp_path, text: str) -> str:
    path = str(tmp_path / "listing.sass")
    with open(path, "w") as f:
        f.write(text)
    return path


def test_code_that_few_warps_ran_has_its_own_stall_shares_and_lines(tmp_path):
    """The one launch's record runs in one program a row after the others have left, so the kernel-wide shares
    drown it: ``--warps N`` keeps the instructions that between 1 and N warps ran. Here the second kernel's last
    two ran in 2 warps (its FMUL's 7 samples, 6 of them no_inst, and the EXIT's none), the others in 8 and the
    jumped-over two in none: the shares, the count and the lines must be those two's alone."""
    second = ncu_sass.read_kernels(_page(tmp_path))[1]
    at = second["header"].index(ncu_sass.EXECUTED)
    for row in second["rows"][4:]:
        row[at] = "2"
    lines = ncu_sass.source_lines(second, ncu_sass.read_listing(_write(tmp_path, LISTING)))
    table = ncu_sass.few_warps(second, lines, 2, 5)
    assert table[0] == "run by at most 2 warps: 2 instructions, 4 warp instructions, 7 samples", table
    assert table[1] == "stalls: no_inst 85.7%, wait 14.3%", table
    assert table[-1] == "| triton_record.py:29 | 2 |" and len([t for t in table if t.startswith("| triton")]) == 1
    assert ncu_sass.few_warps(second, lines, 8, 5)[0].startswith("run by at most 8 warps: 4 instructions, 20 warp")
