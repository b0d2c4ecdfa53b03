"""reference.sample: the three acceptance rules over a ragged batch, one request at a time.

Readable before fast: a Python loop over requests and positions, probabilities in float64.
"""

from __future__ import annotations

import torch

from reference import greedy, leviathan, philox, race, synthetic
from reference.batch import Noise, SpecBatch, SpecOutput

METHODS = ("standard", "synthetic")


def target_probs(logits: torch.Tensor, temperature: float, dtype=torch.float64) -> torch.Tensor:
    """p = softmax(logits / temperature) for a random request, computed in ``dtype`` (float32 or wider)."""
    return torch.softmax(logits.to(dtype) / temperature, dim=-1)


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
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method == "synthetic":
        synthetic.validate_rate(synthetic_acceptance_rate, num_speculative_steps)
        if batch.max_draft > num_speculative_steps:
            raise ValueError(f"num_draft_tokens has a request with {batch.max_draft} drafts, more than "
                             f"num_speculative_steps = {num_speculative_steps}")
    elif synthetic_acceptance_rate is not None:
        raise ValueError("synthetic_acceptance_rate is set but method is 'standard'; "
                         "pass method='synthetic' or drop the rate")


def synthetic_rates_f32(rate: float, num_speculative_steps: int) -> torch.Tensor:
    """The float32 c_j every backend compares the uniform against."""
    return synthetic.conditional_rates(rate, num_speculative_steps).to(torch.float32)


def sample(batch: SpecBatch, *, method: str = "standard", noise: Noise | None = None, seed=None,
           synthetic_acceptance_rate: float | None = None, num_speculative_steps: int | None = None,
           compute_dtype: torch.dtype = torch.float64) -> SpecOutput:
    """Verify one batch of drafts. Returns token_ids [B, K + 1] (-1 padded) and num_accepted [B].

    method: "standard" (Leviathan) or "synthetic"; requests with temperature 0 are greedy in either.
    noise:  shared Noise, making the result a deterministic function of it; or
    seed:   int or [B] int64 per-request seeds of the Philox stream (reference.philox).
    """
    validate_call(batch, method, synthetic_acceptance_rate, num_speculative_steps)
    cpu = batch.to("cpu")
    noise = resolve_noise(cpu, None if noise is None else Noise(noise.uniform.cpu(), noise.exponential.cpu()), seed)
    rates = (synthetic_rates_f32(synthetic_acceptance_rate, num_speculative_steps).to(torch.float64)
             if method == "synthetic" else None)

    B, V, K = cpu.num_requests, cpu.vocab_size, cpu.max_draft
    token_ids = torch.full((B, K + 1), -1, dtype=torch.int64)
    num_accepted = torch.zeros(B, dtype=torch.int64)
    d_off, l_off = cpu.draft_offsets().tolist(), cpu.logit_offsets().tolist()
    for b in range(B):
        temperature = float(cpu.temperature[b])
        is_greedy = temperature == 0.0
        E = noise.exponential[b].to(compute_dtype)
        emitted = []
        for j in range(d_off[b + 1] - d_off[b]):
            t, row = d_off[b] + j, l_off[b] + j
            x = int(cpu.draft_token_ids[t])
            logits = cpu.target_logits[row].to(torch.float64)
            u = float(noise.uniform[t])
            if method == "synthetic":
                accepted = synthetic.accepts(u, float(rates[j]))
            elif is_greedy:
                accepted = greedy.accepts(x, logits)
            else:
                p = target_probs(logits, temperature, compute_dtype)
                q = (leviathan.one_hot(x, V, compute_dtype) if cpu.draft_probs is None
                     else cpu.draft_probs[t].to(compute_dtype))
                accepted = leviathan.accepts(u, p, q, x)
            if not accepted:
                if is_greedy:
                    extra = greedy.argmax(logits)
                elif method == "synthetic":
                    extra = race.sample(target_probs(logits, temperature, compute_dtype), E)
                else:
                    extra = race.sample(leviathan.residual(p, q), E)
                break
            emitted.append(x)
        else:
            bonus = cpu.target_logits[l_off[b + 1] - 1].to(torch.float64)
            extra = greedy.argmax(bonus) if is_greedy else race.sample(target_probs(bonus, temperature, compute_dtype), E)
        num_accepted[b] = len(emitted)
        token_ids[b, : len(emitted) + 1] = torch.tensor(emitted + [extra], dtype=torch.int64)
    device = batch.device
    return SpecOutput(token_ids.to(device), num_accepted.to(device))
