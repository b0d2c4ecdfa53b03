"""The engine check at boundary coins (SPEC 8, "Boundary coins"): ``check_engine_boundary_coins``, declared with
the other engine checks in ``specverify.engines.ENGINE_CHECKS``.

An engine draws its verifier's uniforms itself; an adapter that gives ``generate_at_coin(case, prompt, seed, coin)``
lets the check fix them at float32's boundaries (``specverify.checks.coins.COINS``) through the engine's whole loop.
"""

from __future__ import annotations

import numpy as np

from specverify.checks.coins import COINS, coin_name
from specverify.checks.deviations import matching
from specverify.checks.result import NOT_APPLICABLE, CheckResult
from specverify.engine_cases import LAW_FLOOR, EngineCase, drafter_law, engine_result, exact_law
from specverify.strategies import Profile

# Calls per boundary coin, per profile: one generate call a seed.
ENGINE_COIN_CALLS = {"smoke": 10, "ci": 30, "dev": 60, "nightly": 200}


def check_engine_boundary_coins(engine, case: EngineCase, profile: Profile, **_) -> CheckResult:
    """SPEC 8 with every uniform the engine's verifier draws at 0, 2^-24 and 1 - 2^-24 (``generate_at_coin``): each
    call's first L tokens have positive probability under the exact law, and the coins decide the first draft x
    (drawn from the seed, so the same draft at every coin): per seed, accepted at 1 - 2^-24 only if accepted at
    2^-24, and where 2^-24 accepts it, accepted at 1 - 2^-24 exactly when p(x) >= q(x), with p the target's law at
    the prompt and q the one handed to the verifier (``first_q``). An adapter that ignores its coins draws one
    uniform for both and accepts a draft of p(x) < q(x) at both. Each problem is held against the engine's declared
    deviations on its own."""
    result = engine_result(engine, "engine_boundary_coins", case, "structural")
    at_coin = getattr(engine, "generate_at_coin", None)
    if at_coin is None or drafter_law(engine, case) is None:
        result.status, result.message = NOT_APPLICABLE, (
            "the engine adapter gives no generate_at_coin: its verifier's uniforms cannot be placed" if at_coin is None
            else "greedy, or no drafter law (prompt lookup): the verifier draws no uniform")
        return result
    law = exact_law(engine, case.prompt, case.sampling, case.length)
    p = np.asarray(engine.target_law(tuple(case.prompt), case.sampling), dtype=np.float64)
    calls = ENGINE_COIN_CALLS.get(profile.name, ENGINE_COIN_CALLS["ci"])
    accepted, handed = getattr(engine, "first_accepted", lambda: None), getattr(engine, "first_q", lambda: None)
    problems, seen = [], {}
    for coin in COINS:
        for seed in range(calls):
            seq = tuple(int(t) for t in at_coin(case, case.prompt, seed, coin))
            if law.get(seq, 0.0) <= 0:
                problems.append(f"every uniform at {coin_name(coin)}: seed {seed} emitted {list(seq)}, of probability 0")
            seen[coin, seed] = (seq, (accepted() or 0) >= 1, handed())
    for seed in range(calls):
        (seq, low, q), (_, high, _) = seen[COINS[1], seed], seen[COINS[2], seed]
        ratio = None if not low or q is None or not seq else p[seq[0]] / max(float(q[seq[0]]), LAW_FLOOR)
        if high and not low:
            problems.append(f"the coins do not decide: seed {seed}'s first draft accepted at 1 - 2^-24, not at 2^-24")
        elif ratio is not None and abs(ratio - 1) > 1e-4 and high != (ratio >= 1):
            problems.append(f"the coins do not decide: seed {seed}'s first draft {seq[0]}, p(x) / q(x) = {ratio:.4g}, "
                            f"{'accepted' if high else 'rejected'} at 1 - 2^-24")
    declared = [d for d in getattr(engine, "deviations", ()) if d.covers("engine_boundary_coins", case.name)]
    known = [t for t in problems if matching(t, declared)]
    real = [t for t in problems if t not in known]
    result.samples, result.covered = len(COINS) * calls, ["standard", "seeded"]
    if real:
        spec = getattr(engine, "spec", engine.name)
        repro = (f"from specverify.registry import get_engine\nengine = get_engine({spec!r})\n"
                 f"case = next(c for c in engine.cases if c.name == {case.name!r})  # {case.describe()}\n"
                 f"# {calls} calls a coin: engine.generate_at_coin(case, case.prompt, seed, coin) for seed in "
                 f"range({calls}), coin in {list(COINS)}\n")
        result.fail(f"{len(real)} problem(s) at boundary coins; " + "; ".join(real[:3]), repro)
    elif known:     # run_engine_check reports it as the declared deviation it matches
        result.fail(known[0] + (f"; and {len(known) - 1} more of that symptom" if len(known) > 1 else ""))
    else:
        result.message = f"{len(COINS)} coins x {calls} calls, every sequence of positive probability; {case.describe()}"
    return result
