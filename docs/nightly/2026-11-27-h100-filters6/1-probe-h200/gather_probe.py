"""Probe: run a ci script with triton_cut.gather replaced (GATHER_VARIANT=atomic|none|ballot)."""
import os, runpy, sys
sys.path.insert(0, "ci"); sys.path.insert(0, ".")
import triton
import triton.language as tl
from specverify.kernels import triton_cut, triton_chain


@triton.jit
def gather_none(key, offs, inside, buf_ptr, region, slot_ptr, BLOCK_V: tl.constexpr):
    pass


@triton.jit
def gather_ballot(key, offs, inside, buf_ptr, region, slot_ptr, BLOCK_V: tl.constexpr):
    before, total = tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 bal, lt; setp.ne.b32 p, $2, 0; vote.sync.ballot.b32 bal, p, -1; "
        "mov.u32 lt, %lanemask_lt; and.b32 lt, lt, bal; popc.b32 $0, lt; popc.b32 $1, bal; }",
        "=r,=r,r", [inside.to(tl.int32)], dtype=(tl.int32, tl.int32), is_pure=True, pack=1)
    sub = region // (BLOCK_V // 32)
    at = ((offs % BLOCK_V) // 32) * sub + before + total * 0
    packed = (key.to(tl.int64) << 32) | (~offs).to(tl.uint32).to(tl.int64)
    tl.store(buf_ptr + at, packed, mask=inside & (before < sub))


@triton.jit
def gather_warp(key, offs, inside, buf_ptr, region, slot_ptr, BLOCK_V: tl.constexpr):
    before, total, warp = tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 bal, lt; setp.ne.b32 p, $3, 0; vote.sync.ballot.b32 bal, p, -1; "
        "mov.u32 lt, %lanemask_lt; and.b32 lt, lt, bal; popc.b32 $0, lt; popc.b32 $1, bal; "
        "mov.u32 $2, %tid.x; shr.u32 $2, $2, 5; }",
        "=r,=r,=r,r", [inside.to(tl.int32)], dtype=(tl.int32, tl.int32, tl.int32), is_pure=True, pack=1)
    sub = region >> 3
    at = warp * sub + before + total * 0
    packed = (key.to(tl.int64) << 32) | (~offs).to(tl.uint32).to(tl.int64)
    tl.store(buf_ptr + at, packed, mask=inside & (before < sub))


def _ballot_asm(P):
    lines = ["{", ".reg .pred p<%d>;" % P, ".reg .b32 b<%d>, lt, t, run;" % P]
    for j in range(P):
        lines.append(f"setp.ne.b32 p{j}, ${3 * P + j}, 0;")
        lines.append(f"vote.sync.ballot.b32 b{j}, p{j}, -1;")
    lines.append("mov.u32 lt, %lanemask_lt;")
    lines.append("mov.u32 run, 0;")
    for j in range(P):
        lines.append(f"and.b32 t, b{j}, lt; popc.b32 t, t; add.s32 ${j}, run, t; popc.b32 t, b{j}; add.s32 run, run, t;")
    for j in range(P):
        lines.append(f"mov.u32 ${P + j}, run;")
    lines.append("mov.u32 t, %tid.x; shr.u32 t, t, 5;")
    for j in range(P):
        lines.append(f"mov.u32 ${2 * P + j}, t;")
    lines.append("}")
    return " ".join(lines)


BALLOT4 = tl.constexpr(_ballot_asm(4))
CONS4 = tl.constexpr(",".join(["=r"] * 12 + ["r"] * 4))


@triton.jit
def gather_warp4(key, offs, inside, buf_ptr, region, slot_ptr, BLOCK_V: tl.constexpr):
    before, total, warp = tl.inline_asm_elementwise(BALLOT4, CONS4, [inside.to(tl.int32)],
                                                    dtype=(tl.int32, tl.int32, tl.int32), is_pure=True, pack=4)
    sub = region >> 3
    at = warp * sub + before + total * 0
    packed = (key.to(tl.int64) << 32) | (~offs).to(tl.uint32).to(tl.int64)
    tl.store(buf_ptr + at, packed, mask=inside & (before < sub))


v = os.environ.get("GATHER_VARIANT", "atomic")
if v != "atomic":
    fn = {"none": gather_none, "ballot": gather_ballot, "warp": gather_warp, "warp4": gather_warp4}[v]
    triton_cut.gather = fn
    triton_chain.gather = fn
script = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
