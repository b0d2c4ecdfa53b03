"""reference.sample: the acceptance rules over a ragged batch.

``decide_per_request`` is the definition, readable before fast: a Python loop over requests and
positions, probabilities in float64. ``decide_by_position``, which ``sample`` uses, applies the same
rules to every request at once, one draft position at a time; it must give the same outputs bit for
bit, and the tests hold the two equal on many random batches (``sample_per_request`` runs the
definition behind the same call). Token trees (SPEC 3.8) are decided request by request (``decide_trees``).
"""

from __future__ import annotations

import torch

from reference import block, filters, greedy, leviathan, philox, race, synthetic, tree
from reference.batch import PLACEHOLDER, Noise, SpecBatch, SpecOutput, select_requests

METHODS = ("standard", "synthetic", "block", "tree")


def target_probs(logits: torch.Tensor, temperature, dtype=torch.float64) -> torch.Tensor:
    """p = softmax(logits / temperature) for a random request, computed in ``dtype`` (float32 or wider).
    ``logits`` [V] with a float temperature, or rows [N, V] with temperatures [N, 1] of ``dtype``."""
    return torch.softmax(logits.to(dtype) / temperature, dim=-1)


def filtered_target(batch: SpecBatch, requests: torch.Tensor, logits: torch.Tensor, temperature,
                    dtype=torch.float64) -> torch.Tensor:
    """p' (SPEC 3.4): rows ``logits`` [N, V] of ``requests`` [N] at temperatures [N, 1], then the
    batch's target filters of those requests."""
    return filters.apply(target_probs(logits, temperature, dtype), *batch.filters_of(requests))


def resolve_noise(batch: SpecBatch, noise: Noise | None, seed) -> Noise:
    """The noise a call uses: injected as given, or the seeded Philox stream (SPEC section 2)."""
    if noise is not None and seed is not None:
        raise ValueError("give either noise or seed, not both")
    if noise is None:
        if seed is None:
            seed = int(torch.randint(0, 2 ** 62, (1,)))
        seeds = philox.request_seeds(seed, batch.num_requests)
        noise = Noise.from_seeds(seeds, batch.num_draft_tokens, batch.vocab_size)
    if not isinstance(noise, Noise):
        raise ValueError(f"noise must be a reference.Noise, got {type(noise).__name__}")
    noise.validate_for(batch)
    return noise


def validate_call(batch: SpecBatch, method: str, synthetic_acceptance_rate, num_speculative_steps) -> None:
    """Errors for the settings of one call, shared by every backend."""
    if not isinstance(batch, SpecBatch):
        raise ValueError(f"batch must be a reference.SpecBatch, got {type(batch).__name__}")
    batch.validate_again()   # its tensors may have been written in place since construction
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if batch.tree_parents is not None and method != "tree":
        raise ValueError(f"tree_parents is set but method is {method!r}: a batch of token trees is verified with "
                         "method='tree' (the standard, synthetic and block rules are not defined on trees)")
    if method == "synthetic":
        synthetic.validate_rate(synthetic_acceptance_rate, num_speculative_steps)
        if batch.max_draft > num_speculative_steps:
            raise ValueError(f"num_draft_tokens has a request with {batch.max_draft} drafts, more than "
                             f"num_speculative_steps = {num_speculative_steps}")
    elif synthetic_acceptance_rate is not None:
        raise ValueError(f"synthetic_acceptance_rate is set but method is {method!r}; "
                         "pass method='synthetic' or drop the rate")


def synthetic_rates_f32(rate: float, num_speculative_steps: int) -> torch.Tensor:
    """The float32 c_j every backend compares the uniform against."""
    return synthetic.conditional_rates(rate, num_speculative_steps).to(torch.float32)


def sample(batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None, seed=None,
           synthetic_acceptance_rate: float | None = None, num_speculative_steps: int | None = None,
           compute_dtype: torch.dtype = torch.float64) -> SpecOutput:
    """Verify one batch of drafts. Returns token_ids [B, K + 1] (-1 padded) and num_accepted [B].

    method: "standard" (Leviathan), "synthetic", "block" (SPEC 3.7) or "tree" (SPEC 3.8; the latter two
            decided request by request); requests with temperature 0 are greedy in each. "tree" also
            returns accepted_nodes [B, K].
    noise:  shared Noise, making the result a deterministic function of it; or
    seed:   int or [B] int64 per-request seeds of the Philox stream (reference.philox).
    """
    decide = decide_trees if method == "tree" else decide_per_request if method == "block" else decide_by_position
    return _run(decide, batch, method, noise, seed, synthetic_acceptance_rate, num_speculative_steps, compute_dtype)


def sample_per_request(batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None, seed=None,
                       synthetic_acceptance_rate: float | None = None, num_speculative_steps: int | None = None,
                       compute_dtype: torch.dtype = torch.float64) -> SpecOutput:
    """``sample``, computed one request and one position at a time: the definition ``sample`` is held to."""
    decide = decide_trees if method == "tree" else decide_per_request
    return _run(decide, batch, method, noise, seed, synthetic_acceptance_rate, num_speculative_steps, compute_dtype)


def _run(decide, batch: SpecBatch, method: str, noise: Noise | None, seed, synthetic_acceptance_rate,
         num_speculative_steps, compute_dtype: torch.dtype) -> SpecOutput:
    """Validate the call, resolve the noise on the CPU, decide there, return on the batch's device."""
    validate_call(batch, method, synthetic_acceptance_rate, num_speculative_steps)
    cpu = batch.to("cpu")
    noise = resolve_noise(cpu, None if noise is None else Noise(noise.uniform.cpu(), noise.exponential.cpu()), seed)
    rates = (synthetic_rates_f32(synthetic_acceptance_rate, num_speculative_steps).to(torch.float64)
             if method == "synthetic" else None)
    if cpu.allow_nonfinite and bool(cpu.nonfinite_requests().any()):
        decided = _with_nonfinite_requests(decide, cpu, noise, method, rates, compute_dtype)
    else:
        decided = decide(cpu, noise, method, rates, compute_dtype)
    # (token_ids, num_accepted), and accepted_nodes for trees
    return SpecOutput(*(t.to(batch.device) for t in decided))


def _with_nonfinite_requests(decide, cpu: SpecBatch, noise: Noise, method: str, rates, compute_dtype):
    """SPEC 3.6: the finite requests decided as a batch of their own (with their own noise); each
    non-finite request accepts nothing and emits the first argmax of its first row, NaN read as -inf."""
    bad = cpu.nonfinite_requests()
    B, K = cpu.num_requests, cpu.max_draft
    out = [torch.full((B, K + 1), -1, dtype=torch.int64), torch.zeros(B, dtype=torch.int64)]
    if method == "tree":
        out.append(torch.full((B, K), -1, dtype=torch.int64))
    first_rows = cpu.target_logits[cpu.logit_offsets()[:-1][bad]].double()
    out[0][bad, 0] = greedy.first_argmax(first_rows.nan_to_num(nan=float("-inf")))
    good = torch.nonzero(~bad).flatten()
    if good.numel():
        finite = select_requests(cpu, good)
        for whole, part in zip(out, decide(finite, noise.select(cpu, good), method, rates, compute_dtype)):
            if part.dim() == 2:
                whole[good, : part.shape[1]] = part
            else:
                whole[good] = part
    return tuple(out)


def decide_per_request(cpu: SpecBatch, noise: Noise, method: str, rates: torch.Tensor | None,
                       compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_ids [B, K + 1], num_accepted [B]) of a CPU batch, request by request, position by position."""
    B, V, K = cpu.num_requests, cpu.vocab_size, cpu.max_draft
    token_ids = torch.full((B, K + 1), -1, dtype=torch.int64)
    num_accepted = torch.zeros(B, dtype=torch.int64)
    d_off, l_off = cpu.draft_offsets().tolist(), cpu.logit_offsets().tolist()
    for b in range(B):
        temperature = float(cpu.temperature[b])
        is_greedy = temperature == 0.0
        request = torch.tensor([b])
        E = noise.exponential[b].to(compute_dtype)
        emitted = []
        if method == "block" and not is_greedy and d_off[b + 1] > d_off[b]:
            emitted, extra = _block_request(cpu, b, d_off[b], l_off[b], noise, compute_dtype)
            num_accepted[b] = len(emitted)
            token_ids[b, : len(emitted) + 1] = torch.tensor(emitted + [extra], dtype=torch.int64)
            continue
        for j in range(d_off[b + 1] - d_off[b]):
            t, row = d_off[b] + j, l_off[b] + j
            x = int(cpu.draft_token_ids[t])
            logits = cpu.target_logits[row].to(torch.float64)
            u = float(noise.uniform[t])
            if x == PLACEHOLDER:   # never accepted; the extra token comes from p' (the residual with q = 0)
                accepted, p, q = False, filtered_target(cpu, request, logits[None], temperature, compute_dtype)[0], \
                    torch.zeros(V, dtype=compute_dtype)
            elif method == "synthetic":
                accepted = synthetic.accepts(u, float(rates[j]))
            elif is_greedy:
                accepted = greedy.accepts(x, logits)
            else:
                p = filtered_target(cpu, request, logits[None], temperature, compute_dtype)[0]
                q = (leviathan.one_hot(x, V, compute_dtype) if cpu.draft_probs is None
                     else cpu.draft_probs[t].to(compute_dtype))
                accepted = leviathan.accepts(u, p, q, x)
            if not accepted:
                if is_greedy:
                    extra = greedy.argmax(logits)
                elif method == "synthetic":
                    extra = race.sample(filtered_target(cpu, request, logits[None], temperature, compute_dtype)[0], E)
                else:
                    extra = race.sample(leviathan.residual(p, q), E)
                break
            emitted.append(x)
        else:
            bonus = cpu.target_logits[l_off[b + 1] - 1].to(torch.float64)
            extra = greedy.argmax(bonus) if is_greedy else \
                race.sample(filtered_target(cpu, request, bonus[None], temperature, compute_dtype)[0], E)
        num_accepted[b] = len(emitted)
        token_ids[b, : len(emitted) + 1] = torch.tensor(emitted + [extra], dtype=torch.int64)
    return token_ids, num_accepted


def _block_request(cpu: SpecBatch, b: int, d0: int, l0: int, noise: Noise, compute_dtype) -> tuple[list, int]:
    """(accepted drafts, extra token) of random request b under block verification (SPEC 3.7). A
    placeholder ends the block before it: the request is decided on the drafts before it, its row then
    being the bonus row (the token there comes from p', as in SPEC 3.5)."""
    x = cpu.draft_token_ids[d0: d0 + int(cpu.num_draft_tokens[b])]
    k = block.block_length(x)
    x = x[:k]
    request = torch.tensor([b]).repeat(k + 1)
    p = filtered_target(cpu, request, cpu.target_logits[l0: l0 + k + 1].double(), float(cpu.temperature[b]),
                        compute_dtype)
    q = (leviathan.one_hot(x, cpu.vocab_size, compute_dtype) if cpu.draft_probs is None
         else cpu.draft_probs[d0: d0 + k].to(compute_dtype))
    E = noise.exponential[b].to(compute_dtype)
    if k == 0:
        return [], race.sample(p[0], E)
    tau, w = block.decide(p, q, x, noise.uniform[d0: d0 + k].to(compute_dtype))
    return x[:tau].tolist(), race.sample(w, E)


def decide_trees(cpu: SpecBatch, noise: Noise, method: str, rates: torch.Tensor | None,
                 compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(token_ids [B, K + 1], num_accepted [B], accepted_nodes [B, K]) of a CPU batch of token trees
    (SPEC 3.8), request by request; ``tree_parents`` None: every request is a chain."""
    B, V, K = cpu.num_requests, cpu.vocab_size, cpu.max_draft
    token_ids = torch.full((B, K + 1), -1, dtype=torch.int64)
    num_accepted = torch.zeros(B, dtype=torch.int64)
    accepted_nodes = torch.full((B, K), -1, dtype=torch.int64)
    d_off, l_off = cpu.draft_offsets().tolist(), cpu.logit_offsets().tolist()
    parents = tree.parents_of(cpu).tolist()
    for b in range(B):
        d0, d1 = d_off[b], d_off[b + 1]
        x, logits = cpu.draft_token_ids[d0:d1], cpu.target_logits[l_off[b]: l_off[b + 1]].to(torch.float64)
        temperature = float(cpu.temperature[b])
        if temperature == 0.0:
            path, extra = tree.decide_greedy(logits, x.tolist(), parents[d0:d1])
        else:
            p = filtered_target(cpu, torch.tensor([b]).repeat(d1 - d0 + 1), logits, temperature, compute_dtype)
            q = (leviathan.one_hot(x.clamp(min=0), V, compute_dtype) if cpu.draft_probs is None
                 else cpu.draft_probs[d0:d1].to(compute_dtype))
            path, r = tree.decide(p, q, x.tolist(), parents[d0:d1], noise.uniform[d0:d1].tolist())
            extra = race.sample(r, noise.exponential[b].to(compute_dtype))
        num_accepted[b] = len(path)
        accepted_nodes[b, : len(path)] = torch.tensor(path, dtype=torch.int64)
        token_ids[b, : len(path) + 1] = torch.tensor(x[path].tolist() + [extra], dtype=torch.int64)
    return token_ids, num_accepted, accepted_nodes


def decide_by_position(cpu: SpecBatch, noise: Noise, method: str, rates: torch.Tensor | None,
                       compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``decide_per_request`` for all requests at once. At step j every request still running takes
    part: one with k_b == j has accepted all its drafts and emits its bonus token; every other one
    tests draft j by its rule and, if it rejects, emits its extra token and stops. Each rule is
    applied to the gathered rows of the requests at step j, in the arithmetic of the definition."""
    B, V, K = cpu.num_requests, cpu.vocab_size, cpu.max_draft
    token_ids = torch.full((B, K + 1), -1, dtype=torch.int64)
    num_accepted = torch.zeros(B, dtype=torch.int64)
    k, d_off, l_off = cpu.num_draft_tokens, cpu.draft_offsets()[:-1], cpu.logit_offsets()[:-1]
    temperature = cpu.temperature.to(compute_dtype)
    is_greedy = cpu.temperature == 0
    running = torch.ones(B, dtype=torch.bool)
    for j in range(K + 1):
        bonus = torch.nonzero(running & (k == j)).flatten()
        running[bonus] = False
        token_ids[bonus, j] = _extra_token(cpu, bonus, cpu.target_logits[l_off[bonus] + j], None,
                                           temperature[bonus], noise.exponential[bonus], compute_dtype)
        b = torch.nonzero(running).flatten()
        if b.numel() == 0:
            break
        t, logits = d_off[b] + j, cpu.target_logits[l_off[b] + j].to(torch.float64)
        x, u, g = cpu.draft_token_ids[t], noise.uniform[t], is_greedy[b]
        hole = x == PLACEHOLDER       # never accepted; q = 0 there, so the residual is p' itself
        x = x.clamp(min=0)            # a valid index for the gathers below; ``hole`` decides
        p = q = None
        if method == "synthetic":
            accepted = synthetic.accepts(u.to(torch.float64), rates[j]) & ~hole
        else:
            accepted = torch.zeros(b.shape[0], dtype=torch.bool)
            accepted[g] = (x[g] == greedy.first_argmax(logits[g])) & ~hole[g]
            r = ~g
            p = filtered_target(cpu, b[r], logits[r], temperature[b[r], None], compute_dtype)
            q = (leviathan.one_hot(x[r], V, compute_dtype) if cpu.draft_probs is None
                 else cpu.draft_probs[t[r]].to(compute_dtype))
            q = torch.where(hole[r, None], torch.zeros_like(q), q)
            x_r = x[r, None]
            accepted[r] = leviathan.accepted(u[r].to(compute_dtype), p.gather(1, x_r)[:, 0], q.gather(1, x_r)[:, 0])
        token_ids[b[accepted], j] = x[accepted]
        num_accepted[b[accepted]] += 1
        rejected = ~accepted
        stop = b[rejected]
        running[stop] = False
        if p is not None:  # standard: a random request's extra token is drawn from the residual
            p, q = p[rejected[~g]], q[rejected[~g]]
        token_ids[stop, j] = _extra_token(cpu, stop, logits[rejected], None if p is None else (p, q),
                                          temperature[stop], noise.exponential[stop], compute_dtype)
    return token_ids, num_accepted


def _extra_token(cpu: SpecBatch, requests: torch.Tensor, logits: torch.Tensor, residual_of: tuple | None,
                 temperature: torch.Tensor, exponential: torch.Tensor, compute_dtype: torch.dtype) -> torch.Tensor:
    """[N] the one non-draft token of ``requests`` [N] stopping at the rows ``logits`` [N, V]: argmax for
    a greedy request; for a random one the race over the residual of ``residual_of`` = (p', q) (its rows
    are the random requests'), or over the filtered target p' when it is None."""
    logits = logits.to(torch.float64)
    is_greedy = cpu.temperature[requests] == 0
    extra = torch.empty(logits.shape[0], dtype=torch.int64)
    extra[is_greedy] = greedy.first_argmax(logits[is_greedy])
    r = ~is_greedy
    if residual_of is None:
        w = filtered_target(cpu, requests[r], logits[r], temperature[r, None], compute_dtype)
    else:
        w = leviathan.residual(*residual_of)
    extra[r] = race.winners(w, exponential[r].to(compute_dtype))
    return extra
