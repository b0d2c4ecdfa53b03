"""Device placement (SPEC 7): a sampler works where its caller put the batch. CUDA only.

Why: in a tensor-parallel server the sampler runs on every rank's own GPU, each with its own streams,
while the process's current device may be another one. vLLM's own sampler tests once failed on every
host with more than one GPU, because the sampler was built for GPU 0 (vllm-project/vllm #7183). The
bug class: outputs allocated on "cuda" (whichever device is current), a Triton launch without a device
guard (Triton launches on the current device and its current stream, wherever the tensors live), work
queued on the default stream while the caller's stream is current.

stream        one GPU, the batch on the current device d: the call made with a new stream S current
              queues all its GPU work on S and equals the same call made plainly on d's default stream.
other_device  two GPUs, cuda:0 current, the batch on cuda:1: all GPU work on cuda:1's current stream,
              outputs on cuda:1 (the guard validates the device of every output), equal to the same call
              on cuda:0, nothing allocated on cuda:0. n/a, with the reason, where this process sees
              fewer than two GPUs.

First line, where the call's work ran (specverify.checks.streams): one call, the real inputs already in
place and both queues drained, is made under the PyTorch profiler between marker kernels queued on the
caller's stream and on the queue the call must not use. Every kernel, copy and memset of the call (the
guard's included) must be on the caller's stream of the batch's device, as the trace's device and stream
ids say; one elsewhere fails, naming the lanes and the first such event, whatever the backend syncs on
the host. Its outputs must equal the plain call's. Where the profiler records no CUDA activity (no
CUPTI: the markers are missing from the trace), the message says that kernel streams were not observed
and the rounds below decide alone. The trace cannot see a copy made by the host alone, nor work queued by
another process; work another thread of this process queued during the call would count as the call's.

Second line, the race rounds: a misplaced call is made to show in the outputs. Let C be the caller's
stream (S; cuda:1's current stream) and O the queue the call must not use (d's default stream; cuda:0's
current stream). The call's tensors (batch, seeds or noise) are device buffers holding a stale call first: the same layout,
other logits, drafts, temperatures, seeds and noise, so that reading it gives other tokens. Each round
makes a warm-up call on the stale buffers, then queues on C a sleep (SLEEP_CYCLES, ~50 ms) and the real
inputs copied device to device into the buffers (a copy from the host would wait for the sleep), calls
the backend at once and synchronises C alone (never the device) before reading the outputs on C.

- round "idle": O is idle. Work queued on O runs at once, before the copy: it reads the stale call.
- round "held": O sleeps first, longer (HOLD_CYCLES). Work queued on O runs after the outputs were read.
  The idle round alone misses a backend that waits for C on the host (to read its seeds, say) before
  queuing on O; the held round alone misses one that waits for O. Both can miss one whose host syncs
  wait out C's sleep and O's hold before its last launches (the input validation, on C, and the Triton
  sampler's own syncs do): the trace above sees it.

The guard (runner.GuardedBackend) hands the backend private copies of the buffers, made on C behind the
sleep; a backend working on O reads their memory before they are written. That memory holds the
warm-up's private copies of the stale call: the caching allocator gives the same sequence of small
allocations on one stream the same blocks of its segment. Every output stays alive until the case
ends, so that a late output never lands in memory holding the answer.

other_device also reads torch.cuda.memory_stats(0) before and after each racy call (cuda:0's caching
allocator warmed by the call on cuda:0): the count of allocations made, memory_allocated and
memory_reserved. It sees every allocation through PyTorch's allocator on cuda:0, even one freed before
the call returns. It cannot see memory taken outside that allocator (a library's own cudaMalloc,
Triton's loaded modules, a CUDA context) nor a launch on cuda:0 that allocates nothing: the trace sees
such a launch (where observed), the rounds when the outputs depend on it. Peer
access between the two GPUs is enabled where the host allows it, so that a kernel on the wrong GPU reads
and writes across instead of faulting: a fault still fails the check, but leaves this process's CUDA
context unusable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Callable

import torch

from reference import Noise, SpecBatch, SpecOutput
from reference.batch import FIELDS
from specverify.checks.runner import CheckFailure, Context, Needs, NotApplicable
from specverify.checks.streams import observe
from specverify.checks.structural import layout_batch
from specverify.strategies import Profile

PLACEMENT_CASES = ("stream", "other_device")
PLACEMENT_NEEDS = Needs(method="standard", noise="any")

SLEEP_CYCLES = 100_000_000        # GPU clock cycles on the caller's stream: ~50 ms at 2 GHz, ~70 ms at 1.4 GHz
HOLD_CYCLES = 4 * SLEEP_CYCLES    # the other queue, held well past the caller's read
LAYOUT = (3, 0, 4, 1, 2, 4)       # drafts per request, a zero-draft request among them
TEMPERATURES = (0.0, 0.8, 1.0, 0.0, 1.3, 0.6)   # greedy and random requests
VOCAB = 1_000                     # every tensor far below a segment: the warm-up's blocks are reused in order


@dataclass(frozen=True)
class CallInputs:
    """One call's inputs: the batch and its injected noise, or its [B] int64 request seeds."""

    batch: SpecBatch
    noise: Noise | None = None
    seeds: torch.Tensor | None = None

    def to(self, device) -> "CallInputs":
        """A copy on ``device`` (new tensors: the inputs are built on the CPU)."""
        return CallInputs(self.batch.to(device), None if self.noise is None else self.noise.to(device),
                          None if self.seeds is None else self.seeds.to(device))

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor of the call, in one order for all calls of a layout (buffers pair with sources)."""
        noise = [] if self.noise is None else [self.noise.uniform, self.noise.exponential]
        return [t for t in [getattr(self.batch, f) for f in FIELDS] + noise + [self.seeds] if t is not None]

    def call(self, backend) -> SpecOutput:
        if self.noise is not None:
            return backend(self.batch, noise=self.noise, method="standard")
        return backend(self.batch, seed=self.seeds, method="standard")


def placement_inputs(profile: Profile, caps, path: str, stale: bool = False) -> CallInputs:
    """The case's call on the CPU: LAYOUT (within the declared max drafts), V = 1,000 (or the declared
    maximum), the profile's first logit dtype (the backend's, once narrowed), drafts from a dense q,
    passed one-hot where the backend takes none; seeds for ``path`` "seeded", injected noise otherwise.
    ``stale``: the same layout with other contents, whose tokens differ from the real call's."""
    g = torch.Generator().manual_seed(7183 + int(stale))
    counts = [min(k, profile.max_draft) for k in LAYOUT]
    V = min(VOCAB, caps.max_vocab or VOCAB)
    base = layout_batch(counts, V, g, greedy=False, dense=profile.dense_drafts)
    batch = replace(base, target_logits=(base.target_logits * 3).to(profile.logit_dtypes[0]),
                    temperature=torch.tensor(TEMPERATURES[:len(counts)], dtype=torch.float32))
    if path == "seeded":
        return CallInputs(batch, seeds=torch.randint(0, 2 ** 62, (len(counts),), generator=g))
    return CallInputs(batch, noise=Noise.draw(batch, g))


def _host(out: SpecOutput) -> SpecOutput:
    return SpecOutput(out.token_ids.cpu(), out.num_accepted.cpu(), None)


def difference(got: SpecOutput, want: SpecOutput) -> str | None:
    """None when every request emits the same tokens (so the same num_accepted; the guard checked the
    -1 padding), else how many requests differ and the first."""
    a, b = got.emitted(), want.emitted()
    differ = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    if not differ:
        return None
    first = differ[0]
    return f"{len(differ)} of {len(b)} requests differ; first: request {first} emitted {a[first]} vs {b[first]}"


def _copy(dst: CallInputs, src: CallInputs) -> None:
    for d, s in zip(dst.tensors(), src.tensors()):
        d.copy_(s)


def _allocations(device: int) -> tuple[int, int, int]:
    """(allocations made so far, memory_allocated, memory_reserved) of PyTorch's allocator on ``device``."""
    count = torch.cuda.memory_stats(device).get("allocation.all.allocated", 0)
    return count, torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


@dataclass
class Race:
    """One case's setting: ``call`` makes the guarded call in the case's context (current device and
    stream); ``caller`` is the stream the backend must queue on, ``other`` the queue it must not use;
    nothing may be allocated on device ``watch`` (None: not watched)."""

    call: Callable[[CallInputs], SpecOutput]
    caller: torch.cuda.Stream
    other: torch.cuda.Stream
    caller_name: str
    other_name: str
    watch: int | None = None


def _round(race: Race, bufs: CallInputs, real: CallInputs, stale: CallInputs, hold: bool, keep: list,
           where: str) -> SpecOutput:
    """One round (module docstring) on ``bufs``: refilled with ``stale`` and warmed up, then the real
    inputs ``real`` copied in on the caller's stream behind a sleep, with ``other`` held (``hold``) or
    idle. Returns the outputs read after synchronising the caller's stream alone."""
    with torch.cuda.stream(race.caller):
        _copy(bufs, stale)
    race.caller.synchronize()
    try:
        keep.append(race.call(bufs))
    except CheckFailure as exc:
        raise CheckFailure(f"{where}: warm-up call on the stale inputs: {exc}") from None
    finally:        # the round starts with both queues drained, whatever the warm-up queued where
        race.caller.synchronize()
        race.other.synchronize()
    if hold:
        with torch.cuda.stream(race.other):
            torch.cuda._sleep(HOLD_CYCLES)
    with torch.cuda.stream(race.caller):
        torch.cuda._sleep(SLEEP_CYCLES)
        _copy(bufs, real)
    before = None if race.watch is None else _allocations(race.watch)
    try:
        out = race.call(bufs)
        keep.append(out)
        race.caller.synchronize()
        with torch.cuda.stream(race.caller):
            got = _host(out)
    except CheckFailure as exc:
        raise CheckFailure(f"{where}: {exc}") from None
    finally:
        race.other.synchronize()    # a misplaced call's late work ends before anything of the case is freed
    if before is not None:
        after = _allocations(race.watch)
        if after != before:
            raise CheckFailure(f"{where}: the call allocated on cuda:{race.watch}, a device it was not handed: "
                               f"{after[0] - before[0]} allocation(s), memory_allocated {before[1]} -> {after[1]} "
                               f"B, memory_reserved {before[2]} -> {after[2]} B")
    return got


def _observed(race: Race, inputs: CallInputs, want: SpecOutput, where: str, keep: list) -> str:
    """The call on ``inputs`` (on the case's device) under the profiler (streams.observe): every GPU event
    of the call on the caller's stream, outputs equal to the plain call's. Returns what was observed."""
    label = f"{where}, observed call"
    try:
        out, seen = observe(lambda: race.call(inputs), race.caller, race.other)
    except CheckFailure as exc:
        raise CheckFailure(f"{label}: {exc}") from None
    keep.append(out)
    failure = seen.failure(race.caller_name, race.other_name)
    if failure:
        raise CheckFailure(f"{label}: {failure}")
    with torch.cuda.stream(race.caller):
        why = difference(_host(out), want)
    if why:
        raise CheckFailure(f"{label}: the outputs (both queues drained) differ from the plain call: {why}")
    return seen.summary(race.caller_name)


def _rounds(race: Race, device: torch.device, real: CallInputs, stale: CallInputs, want: SpecOutput,
            where: str, keep: list) -> str:
    """The observed call, then both rounds on ``device``; each must give ``want`` (the plain call's
    outputs, on the host). Returns what the observed call saw."""
    seen = _observed(race, real.to(device), want, where, keep)
    bufs, stale_src, real_src = stale.to(device), stale.to(device), real.to(device)
    hints = {False: f"it read its inputs before {race.caller_name} had written them: work not queued on "
                    f"{race.caller_name}?",
             True: f"it was read before it finished: work queued on {race.other_name}?"}
    for hold in (False, True):
        label = f"{where}, round {'held' if hold else 'idle'} ({race.other_name} {'held' if hold else 'idle'})"
        got = _round(race, bufs, real_src, stale_src, hold, keep, label)
        why = difference(got, want)
        if why:
            raise CheckFailure(f"{label}: the outputs read after synchronising {race.caller_name} alone differ "
                               f"from the plain call: {why} ({hints[hold]})")
    return seen


def _stream_case(ctx: Context, real: CallInputs, stale: CallInputs, where: str) -> str:
    device = torch.device("cuda", torch.cuda.current_device())
    default = torch.cuda.default_stream(device)
    keep = []
    with torch.cuda.stream(default):
        keep.append(real.to(device).call(ctx.backend))   # plainly, on the default stream
        want = _host(keep[-1])
    side = torch.cuda.Stream(device)

    def call(inputs: CallInputs) -> SpecOutput:
        with torch.cuda.stream(side):
            return inputs.call(ctx.backend)

    race = Race(call, side, default, f"the caller's stream on {device}", f"the default stream of {device}")
    seen = _rounds(race, device, real, stale, want, where, keep)
    return (f"on a non-default stream of {device}: {seen}; equal to the default-stream call in both rounds "
            f"(default stream idle, then held), the inputs copied in on the caller's stream behind a sleep")


def _too_few_gpus(n: int) -> str:
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"this process sees {n} (CUDA_VISIBLE_DEVICES={pinned})" if pinned is not None else f"this host has {n}"
    return f"needs 2 GPUs; {seen}: the batch cannot be put on cuda:1 while cuda:0 is current"


def _enable_peer_access(a: int, b: int) -> None:
    """Kernels on either GPU may read and write the other's memory, where the host allows it. PyTorch
    enables access from a copy's source device to its destination on their first device-to-device copy:
    a one-element copy each way does it."""
    for src, dst in ((a, b), (b, a)):
        if torch.cuda.can_device_access_peer(src, dst):
            torch.zeros(1, device=f"cuda:{dst}").copy_(torch.zeros(1, device=f"cuda:{src}"))


def _other_device_case(ctx: Context, real: CallInputs, stale: CallInputs, where: str) -> str:
    n = torch.cuda.device_count()
    if n < 2:
        raise NotApplicable(_too_few_gpus(n))
    keep = []
    with torch.cuda.device(0):
        keep.append(real.to("cuda:0").call(ctx.backend))  # the same call on cuda:0; warms cuda:0's allocator
        want = _host(keep[-1])
        _enable_peer_access(0, 1)

        def call(inputs: CallInputs) -> SpecOutput:
            return inputs.call(ctx.backend)          # cuda:0 current, the batch on cuda:1

        race = Race(call, torch.cuda.current_stream(1), torch.cuda.current_stream(0), "cuda:1's current stream",
                    "cuda:0's current stream", watch=0)
        seen = _rounds(race, torch.device("cuda:1"), real, stale, want, where, keep)
    return (f"batch on cuda:1 with cuda:0 current: {seen}; outputs on cuda:1, equal to the call on cuda:0 in both "
            "rounds (cuda:0 idle, then held), no allocation on cuda:0")


CASES = {"stream": _stream_case, "other_device": _other_device_case}


def check_device_placement(ctx: Context, case: str) -> None:
    """Outputs on the batch's device, work on the current stream of that device, nothing on another
    device (module docstring). n/a off a CUDA profile or without CUDA, with the reason."""
    if ctx.profile.device != "cuda":
        raise NotApplicable(f"profile device is {ctx.profile.device}: placement is checked only on a CUDA device "
                            "(the nightly GPU profile)")
    if not torch.cuda.is_available():
        raise NotApplicable("profile device is cuda but torch.cuda.is_available() is False in this process")
    caps = ctx.backend.capabilities
    path = "seeded" if "seeded" in caps.noise else "injected"
    real, stale = (placement_inputs(ctx.profile, caps, path, s) for s in (False, True))
    where = f"{case}, {path} noise, B = {real.batch.num_requests}, V = {real.batch.vocab_size}"
    ctx.result.message = f"{path} noise, " + CASES[case](ctx, real, stale, where)
    ctx.result.samples = 3 * real.batch.num_requests    # requests compared: the observed call, one per round


__all__ = ["CASES", "CallInputs", "PLACEMENT_CASES", "PLACEMENT_NEEDS", "check_device_placement", "difference",
           "placement_inputs"]
