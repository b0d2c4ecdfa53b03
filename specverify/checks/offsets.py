"""SPEC 4.12: a batch whose logits hold more than 2^31 (or 2^32) elements, on a CUDA device.

    rows_past_2_31   1,800 requests of five drafts at V = 262,144: 10,800 rows of float32 logits (11.3 GB), the
                     rows from the 8,193rd (request 1,366) on past 2^31 elements, and the 9,000 draft rows
                     alone past it from request 1,639 (a kernel that holds the draft rows apart, as vLLM's
                     target_probs, crosses it there). Each request's logits are -inf but at four ids of its
                     own, its drafts among them or (every third request's last draft) outside, a third of
                     the requests greedy and, where the backend declares filters, every other one filtered.
    rows_past_2_32   the same at 3,440 requests: 20,640 rows (21.6 GB), past 2^32 elements from request 2,731
                     and in the 17,200 draft rows alone from request 3,277, where an unsigned 32-bit offset
                     (uint32_t row * d, the CUDA kernels' habit) wraps; its control lies past 2^31.

Every request must emit tokens of its own support: a row read at an offset that wrapped in 32 bits gives another
request's ids (or an illegal address). The first requests, the first ones past 2^31 elements in either layout and
the last ones are compared with the reference under shared noise where the path shares it (injected, the reference's
Philox stream), and with their supports otherwise. Each declared rule runs (standard, block, and tree with every
request a chain).

The first call is a control: the batch's first requests whose rows lie under the case's limit (1,365 and 2,730),
by the first rule and path. A backend that fails there fails for another reason than its offsets, and the message says so; one that passes
there and fails (or raises) on the whole batch is told that the size decides.
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput, select_requests
from specverify.checks.common import paths
from specverify.checks.runner import CheckFailure, Context, Needs, NotApplicable
from specverify.checks.structural import support_problems
from specverify.checks.tree_cases import chains_as_trees

OFFSET_CASES = ("rows_past_2_31", "rows_past_2_32")
OFFSET_NEEDS = Needs(noise="any")
VOCAB = 262_144
DRAFTS = 5
SUPPORT = 4                       # ids of each request's own support
# each case's limit in elements (the first row past 2^31 is row 8,192, past 2^32 row 16,384) and its requests:
# about 160 past the limit in the draft rows alone
PAST = {"rows_past_2_31": 2 ** 31, "rows_past_2_32": 2 ** 32}
REQUESTS = {"rows_past_2_31": 1_800, "rows_past_2_32": 3_440}
DEVICE = "cuda"                   # where the batch is built (a test builds a small one on the CPU)
FIRST = 8                         # the first requests, compared too, and as many just past 2^31 elements
LAST = 32                         # the last requests, compared


def needed_bytes(requests: int) -> int:
    """Bytes a batch of ``requests`` needs free: the logits twice (the caller's and the guard's private copy) and as
    much again for a backend's own copies of the rows, the injected exponentials twice."""
    return 4 * (requests * (DRAFTS + 1) * VOCAB * 4) + 2 * (requests * VOCAB * 4)


def offsets_batch(device: str, filters: bool, requests: int, seed: int = 0) -> tuple[SpecBatch, torch.Tensor]:
    """(the batch, [B, SUPPORT] int64 each request's support ids), built on ``device``."""
    g = torch.Generator().manual_seed(seed)
    B, R = requests, requests * (DRAFTS + 1)
    k = torch.full((B,), DRAFTS, dtype=torch.int64)
    # each request's ids: SUPPORT consecutive ids at its own place in the vocabulary, no two requests sharing one
    start = (torch.arange(B, dtype=torch.int64) * 145) % (VOCAB - SUPPORT)
    support = start[:, None] + torch.arange(SUPPORT)
    request_of_row = torch.arange(B).repeat_interleave(DRAFTS + 1)
    logits = torch.full((R, VOCAB), float("-inf"), dtype=torch.float32, device=device)
    values = torch.randn(R, SUPPORT, generator=g) * 2
    logits.scatter_(1, support[request_of_row].to(device), values.to(device))
    pick = torch.randint(0, SUPPORT, (B, DRAFTS), generator=g)
    drafts = support.gather(1, pick)
    outside = torch.arange(B) % 3 == 0          # a draft of probability 0: rejected, the residual then sampled
    drafts[outside, -1] = (support[outside, -1] + 1) % VOCAB
    temperature = torch.where(torch.arange(B) % 3 == 1, 0.0, 1.0)
    top_k = top_p = None
    if filters:
        on = torch.arange(B) % 2 == 0
        top_k = torch.where(on, 3, 0).to(device)
        top_p = torch.where(on, 0.9, 1.0).to(device)
    batch = SpecBatch(k.to(device), drafts.flatten().to(device), logits, None, temperature.to(device),
                      top_k=top_k, top_p=top_p)
    return batch, support


def _noise(batch: SpecBatch, seed: int) -> Noise:
    """Injected noise drawn on the batch's device (the CPU draw of [B, V] would take seconds)."""
    g = torch.Generator(device=batch.device).manual_seed(seed)
    u = torch.rand(batch.num_drafts, generator=g, device=batch.device).clamp_(min=2.0 ** -24)
    e = torch.rand(batch.num_requests, VOCAB, generator=g, device=batch.device).clamp_(min=2.0 ** -24).log_().neg_()
    return Noise(u, e)


def request_seeds(requests: int, device: str = "cpu") -> torch.Tensor:
    """[requests] int64: the seed of each request on the seeded path, one of its own."""
    return torch.arange(requests, dtype=torch.int64, device=device) * 7919 + 11


def _own_support(out: SpecOutput, support: torch.Tensor, greedy: torch.Tensor) -> list[str]:
    """Requests that emitted a token outside their own ids (an accepted draft outside is caught by the guard)."""
    ids, n = out.token_ids.cpu(), out.num_accepted.cpu()
    problems = []
    for b in range(ids.shape[0]):
        emitted = ids[b, : int(n[b]) + 1]
        if not bool(torch.isin(emitted, support[b]).all()):
            problems.append(f"request {b}{' (greedy)' if greedy[b] else ''} emitted {emitted.tolist()}, its "
                            f"support is {support[b].tolist()}")
    return problems


def check_int64_offsets(ctx: Context, case: str) -> None:
    limit, requests = PAST[case], REQUESTS[case]
    if ctx.profile.device != "cuda":
        raise NotApplicable(f"profile device is {ctx.profile.device}: {requests * (DRAFTS + 1) * VOCAB * 4 / 1e9:.1f} "
                            "GB of logits are built on a CUDA device only (the nightly GPU profile)")
    if not torch.cuda.is_available():
        raise NotApplicable("profile device is cuda but torch.cuda.is_available() is False in this process")
    free, total = torch.cuda.mem_get_info()
    if free < needed_bytes(requests):
        raise NotApplicable(f"the GPU has {free / 2 ** 30:.1f} GiB free of {total / 2 ** 30:.1f}; the case needs "
                            f"{needed_bytes(requests) / 2 ** 30:.1f} GiB")
    if not paths(ctx):
        raise NotApplicable("backend declares neither injected noise nor seeds: its calls cannot be made")
    caps = ctx.backend.capabilities
    torch.cuda.reset_peak_memory_stats()        # the message gives the peak: whether a smaller GPU holds the case
    batch, support = offsets_batch(DEVICE, caps.target_filters, requests)
    past = [b for b in range(requests) if b * (DRAFTS + 1) * VOCAB >= limit]
    past_drafts = [b for b in range(requests) if b * DRAFTS * VOCAB >= limit]
    compared = torch.tensor(sorted(set(range(FIRST)) | set(past[:FIRST]) | set(past_drafts[:FIRST])
                                   | set(past[-LAST:])), dtype=torch.int64)
    noise = _noise(batch, 1) if "injected" in caps.noise else None
    seeds = request_seeds(requests)
    methods = [m for m in ("standard", "block", "tree") if m in caps.methods]
    under = limit // ((DRAFTS + 1) * VOCAB)
    control = (f"the {methods[0]} rule on {paths(ctx)[0]} noise at requests 0-{under - 1} ({under * (DRAFTS + 1):,} "
               f"rows, every one under {limit:,} elements)")
    passed = False
    try:
        _call(ctx, *_first_requests(batch, noise, under, methods[0]), methods[0], paths(ctx)[0], seeds[:under],
              support, compared[compared < under], f"every row under {limit:,} elements")
        ctx.result.samples += under
        passed = True
        for method in methods:
            given = chains_as_trees(batch) if method == "tree" else batch
            for path in paths(ctx):
                _call(ctx, given, noise, method, path, seeds, support, compared,
                      f"requests {past[0]} on lie past {limit:,} elements")
                ctx.result.samples += requests
    except BaseException as e:
        # the calls hold 11 GB of logits: a reproducer of one would copy them to the host and save them, and no
        # sub-batch fails as the whole does (it is the size that fails). Replay re-runs the check instead.
        ctx.backend.failed_call = ctx.backend.last_call = None
        if not isinstance(e, Exception) or isinstance(e, NotApplicable):
            raise
        # torch's CUDA errors run on for lines of advice: the first says what happened, the cause keeps the rest
        what = str(e) if isinstance(e, CheckFailure) else \
            f"the call raised {type(e).__name__}: {(str(e).splitlines() or [''])[0]}"
        if passed:
            raise CheckFailure(f"{what}; the control passed first: {control}") from e
        raise CheckFailure(f"the control fails, so something other than passing {limit:,} elements does: {control}: "
                           f"{what}") from e
    ctx.result.message = (f"{len(methods)} rule(s) x {len(paths(ctx))} path(s) at {batch.target_logits.numel():,} "
                          f"logits; requests {past[0]}-{requests - 1} lie past {limit:,} elements; first the "
                          f"control: {control}; peak {torch.cuda.max_memory_allocated() / 2 ** 30:.1f} GiB allocated "
                          f"on the GPU (the case asks {needed_bytes(requests) / 2 ** 30:.1f} GiB free)")


def _first_requests(batch: SpecBatch, noise: Noise | None, n: int, method: str) -> tuple[SpecBatch, Noise | None]:
    """The batch's first ``n`` requests and their noise, as views of its tensors: no copy of the logits."""
    first = lambda t: None if t is None else t[:n]
    sub = SpecBatch(batch.num_draft_tokens[:n], batch.draft_token_ids[:n * DRAFTS],
                    batch.target_logits[:n * (DRAFTS + 1)], None, batch.temperature[:n],
                    top_k=first(batch.top_k), top_p=first(batch.top_p))
    shared = None if noise is None else Noise(noise.uniform[:n * DRAFTS], noise.exponential[:n])
    return (chains_as_trees(sub) if method == "tree" else sub), shared


def _call(ctx: Context, given: SpecBatch, noise: Noise | None, method: str, path: str, seeds: torch.Tensor,
          support: torch.Tensor, compared: torch.Tensor, where_past: str) -> None:
    """One call of ``given``: every request's own ids, then the ``compared`` requests against the reference under
    the path's shared noise (their supports where it shares none). ``where_past`` says where the limit lies."""
    seeded = path == "seeded"
    where = f"{path} noise, {method}, V = {VOCAB}, {given.target_logits.shape[0]:,} rows"
    out = ctx.backend(given, seed=seeds.to(DEVICE), method=method) if seeded else \
        ctx.backend(given, noise=noise, method=method)
    problems = _own_support(out, support, (given.temperature == 0).cpu())
    if problems:
        raise CheckFailure(f"{where}: {len(problems)} request(s) emitted ids of another request's rows "
                           f"({where_past}); first: {problems[0]}")
    sub = select_requests(given, compared.to(DEVICE)).to("cpu")
    shared = None
    if not seeded:
        shared = noise.select(given, compared.to(DEVICE)).to("cpu")
    elif ctx.backend.capabilities.seeded_stream == "philox":
        shared = Noise.from_seeds(seeds[compared], sub.num_draft_tokens, VOCAB)
    got = _rows(out, compared)
    if shared is not None:
        ctx.agree(sub, got, shared, where=f"{where}, requests {_spans(compared)} ({where_past})", method=method)
        return
    problems = support_problems(sub, got, method)
    if problems:
        raise CheckFailure(f"{where}: " + "; ".join(problems[:3]))


def _spans(requests: torch.Tensor) -> str:
    """Sorted request indices as runs: "0-7, 1366-1373"."""
    runs: list[list[int]] = []
    for b in requests.tolist():
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _rows(out: SpecOutput, requests: torch.Tensor) -> SpecOutput:
    idx = requests.to(out.token_ids.device)
    nodes = None if out.accepted_nodes is None else out.accepted_nodes[idx].cpu()
    return SpecOutput(out.token_ids[idx].cpu(), out.num_accepted[idx].cpu(), nodes)
