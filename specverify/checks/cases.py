"""Statistical cases, declared once and applied to every backend (as PyTorch's OpInfo declares ops).

A case fixes one request: target rows p [k+1, V] (float64, bonus row last), the drafter (q [k, V],
or None with fixed drafts), the temperature and the rule. ``batch`` replicates it into one launch
of many independent requests; ``sequences`` is its exact output distribution from reference.exact.
A token-tree case (SPEC 3.8) adds ``parents`` [k]: its k nodes' rows follow the root's, and its
positions are depths (``depth``); see specverify.checks.tree_cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from reference import SpecBatch, SpecOutput, exact, filters, tree
from reference.sample import synthetic_rates_f32
from specverify.checks.tree_cases import averaged_sequences, first_child_chain, replicated_tree_batch
from specverify.generate import replicated_batch

# q = p (1 + FALLBACK_EXCESS) everywhere at a draft: p <= q leaves the residual zero everywhere (SPEC 3's
# fallback to p). The excess is far above float32's rounding and the ambiguity margin, and keeps q's row sum
# within the batch's tolerance (reference.batch.PROB_SUM_TOLERANCE).
FALLBACK_EXCESS = 5e-4

@dataclass(frozen=True)
class StatCase:
    name: str
    p: torch.Tensor                     # [k+1, V] float64 target rows
    q: torch.Tensor | None              # [k, V] float64 drafter rows, or None (one-hot at ``drafts``)
    temperature: float
    why: str
    drafts: tuple | None = None
    method: str = "standard"
    rate: float | None = None           # synthetic acceptance rate
    steps: int | None = None            # synthetic num_speculative_steps
    checks: tuple = ("token_distribution", "acceptance_rate")
    greedy_every: int = 0               # every n-th copy is a greedy request (temperature 0); 0: none
    filters: tuple | None = None        # (top_k, top_p, min_p) of every copy (SPEC 3.4), or None
    # (V, ids): p and q are given on the columns ``ids`` of a V-wide vocabulary, -inf (p) and 0 (q)
    # elsewhere, so the exact law is computed on the small support and checked at large V
    embed: tuple | None = None
    max_copies: int | None = None       # at most this many copies (memory and time at large V)
    launch_copies: int | None = None    # copies per launch, when the copies are split (memory at large V)
    parents: tuple | None = None        # token trees: each node's parent (-1: the root); drafts fixed, or
    without_replacement: bool = False   # drawn per copy from q's base rows, siblings without replacement
    large_vocabs_only: bool = False     # runs only on profiles with large vocabularies (the nightly)
    q_over_one: bool = False            # q's rows sum to 1 + FALLBACK_EXCESS on purpose (n/a: q read up to scale)

    @property
    def k(self) -> int:
        return self.p.shape[0] - 1

    @property
    def depth(self) -> int:
        """The positions past the first: k for a chain, the tree's depth for a tree."""
        if self.parents is None:
            return self.k
        return tree.max_depth(torch.tensor(self.parents, dtype=torch.int64), torch.tensor([self.k]))

    @property
    def vocab_size(self) -> int:
        return self.embed[0] if self.embed else self.p.shape[1]

    def call_kwargs(self) -> dict:
        if self.method == "synthetic":
            return dict(method="synthetic", synthetic_acceptance_rate=self.rate, num_speculative_steps=self.steps)
        return dict(method=self.method)

    def batch(self, copies: int, generator: torch.Generator, device="cpu"):
        if self.parents is not None:
            batch = replicated_tree_batch(generator, self.p, list(self.parents), self.temperature, copies,
                                          tokens=None if self.drafts is None else list(self.drafts), q=self.q,
                                          without_replacement=self.without_replacement).to(device)
        else:
            batch = replicated_batch(generator, self.p, self.q, self.temperature, copies,
                                     drafts=None if self.drafts is None else list(self.drafts), device=device)
        if self.embed:
            batch = self._embedded(batch)
        if not self.greedy_every and self.filters is None:
            return batch
        temperature = batch.temperature.clone()
        if self.greedy_every:
            temperature[self.greedy_every - 1::self.greedy_every] = 0.0
        settings = (None, None, None) if self.filters is None else (
            torch.full((copies,), self.filters[0], dtype=torch.int64, device=device),
            torch.full((copies,), self.filters[1], dtype=torch.float32, device=device),
            torch.full((copies,), self.filters[2], dtype=torch.float32, device=device))
        return SpecBatch(batch.num_draft_tokens, batch.draft_token_ids, batch.target_logits, batch.draft_probs,
                         temperature, *settings, tree_parents=batch.tree_parents)

    def fresh_drafts(self, copies: int, generator: torch.Generator) -> torch.Tensor:
        """[copies * k] int64 drafts of a chain case's ``copies`` copies, copy-major as in ``batch``: x_j ~ q_j
        (the fixed drafts where q is None), as V-wide ids, on the generator's device."""
        on = generator.device
        if self.k == 0:
            return torch.zeros(0, dtype=torch.int64, device=on)
        if self.q is None:
            x = torch.tensor(self.drafts, dtype=torch.int64, device=on).repeat(copies)
        else:
            x = torch.multinomial(self.q.to(on), copies, replacement=True, generator=generator).T.reshape(-1)
        return torch.tensor(self.embed[1], device=on)[x] if self.embed else x

    def _embedded(self, batch: SpecBatch) -> SpecBatch:
        """``batch`` (on the small support) with its columns placed at ``ids`` of the V-wide vocabulary."""
        V, ids = self.embed[0], torch.tensor(self.embed[1], device=batch.device)
        logits = batch.target_logits.new_full((batch.target_logits.shape[0], V), float("-inf"))
        logits[:, ids] = batch.target_logits
        q = None
        if batch.draft_probs is not None:
            q = batch.draft_probs.new_zeros((batch.num_drafts, V))
            q[:, ids] = batch.draft_probs
        return SpecBatch(batch.num_draft_tokens, ids[batch.draft_token_ids], logits, q, batch.temperature)

    @property
    def target(self) -> torch.Tensor:
        """[k+1, V] the filtered target p' of a random copy (p itself without filters)."""
        if self.filters is None:
            return self.p
        rows = self.p.shape[0]
        k, mass, ratio = self.filters
        return filters.apply(self.p, torch.full((rows,), k), torch.full((rows,), mass, dtype=torch.float64),
                             torch.full((rows,), ratio, dtype=torch.float64))

    def _law(self, p: torch.Tensor) -> dict:
        if self.parents is not None and self.drafts is not None:
            return exact.tree_sequences(p, self.q, list(self.parents), list(self.drafts))
        if self.parents is not None:
            return averaged_sequences(p, self.q, list(self.parents), self.without_replacement)
        if self.method == "synthetic":
            rates = synthetic_rates_f32(self.rate, self.steps).double()
            return exact.synthetic_sequences_from_q(p, self.q, rates)
        if self.method == "block":
            return exact.block_sequences(p, self.q)
        if self.q is not None:
            return exact.standard_sequences(p, self.q)
        return exact.standard_given_drafts(p, None, list(self.drafts))

    @cached_property
    def sequences(self) -> dict:
        """Exact P(emitted tokens) for one request, float64 (keys: tuples of token ids). With greedy
        copies it is the mixture of the random requests' law and the greedy requests' law (the
        standard rule with each target row one-hot at its argmax), in their proportions."""
        law = self._law(self.target)
        if self.greedy_every:
            greedy = self._law(torch.nn.functional.one_hot(self.p.argmax(dim=1), self.p.shape[1]).double())
            share = 1.0 / self.greedy_every
            law = {s: (1 - share) * law.get(s, 0.0) + share * greedy.get(s, 0.0) for s in set(law) | set(greedy)}
        if self.embed:
            ids = self.embed[1]
            law = {tuple(ids[t] for t in s): w for s, w in law.items()}
        return law

    @cached_property
    def baseline(self) -> tuple[str, dict]:
        """(name, exact law) of what the rule's mean accepted length must reach: the standard rule on the
        same rows for a block, the first-child chain's standard rule for a tree (SPEC 3.7, 3.8)."""
        if self.parents is None:
            return "standard rule", exact.standard_sequences(self.target, self.q)
        chain = first_child_chain(list(self.parents))
        p = self.target[[0] + [c + 1 for c in chain]]
        if self.drafts is None:     # the first child of a node is drawn from its base row, nothing removed
            return "first-child chain", exact.standard_sequences(p, self.q[chain])
        return "first-child chain", exact.standard_given_drafts(p, None if self.q is None else self.q[chain],
                                                                [self.drafts[c] for c in chain])

    @cached_property
    def position_distributions(self) -> list[torch.Tensor]:
        """[k+1] x [V] float64: the exact distribution of the token emitted at position j, given the
        request reached j (computed once per case: the statistical checks and their calibration reuse it)."""
        return [exact.position_token_distribution(self.sequences, j, self.vocab_size) for j in range(self.depth + 1)]

    @cached_property
    def stop_distributions(self) -> list[torch.Tensor]:
        """[depth] x [V] float64: the exact distribution of the token emitted at position j < depth, given the
        request stopped there (a rejection at j): the residual normalised, or p_j where it is zero everywhere."""
        return [exact.stop_token_distribution(self.sequences, j, self.vocab_size) for j in range(self.depth)]

    @cached_property
    def acceptance_by_position(self) -> torch.Tensor:
        """[k] float64 P(accept at j | reached j)."""
        return exact.acceptance_by_position(self.sequences, self.depth)

    @cached_property
    def _exact_table(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(weights [S], token_ids [S, depth + 1] padded with -1, num_accepted [S]) of the S possible outputs
        (a tree of k nodes emits at most depth + 1 tokens)."""
        items = list(self.sequences.items())
        weights = torch.tensor([w for _, w in items], dtype=torch.float64)
        token_ids = torch.full((len(items), self.depth + 1), -1, dtype=torch.int64)
        for i, (tokens, _) in enumerate(items):
            token_ids[i, :len(tokens)] = torch.tensor(tokens, dtype=torch.int64)
        num_accepted = torch.tensor([len(tokens) - 1 for tokens, _ in items], dtype=torch.int64)
        return weights, token_ids, num_accepted

    def draw_exact(self, copies: int, generator: torch.Generator) -> SpecOutput:
        """``copies`` independent outputs drawn from the exact joint distribution: what a perfect sampler
        returns for ``self.batch(copies, ...)``. Used to calibrate the statistical checks under the null."""
        weights, token_ids, num_accepted = self._exact_table
        idx = torch.multinomial(weights, copies, replacement=True, generator=generator)
        # index_select: the same rows as token_ids[idx], without advanced indexing's overhead (milliseconds
        # per call here, and the calibration draws hundreds of outputs per case)
        return SpecOutput(token_ids.index_select(0, idx), num_accepted.index_select(0, idx))


# the chain cases whose rejections carry the residual: their token after a rejection is tested among the rejections
# alone too (SPEC 5), where a wrong residual shows undiluted by the acceptances
WITH_RECOVERED = ("token_distribution", "acceptance_rate", "recovered_distribution")


def _rows(seed: int, rows: int, V: int, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, V, generator=g, dtype=torch.float64) * scale, dim=-1)


def _masked_case() -> StatCase:
    """p has zeros (masked logits) and q puts a third of its mass there."""
    p = _rows(11, 3, 9, 1.0)
    p[:, 6:] = 0.0
    p = p / p.sum(1, keepdim=True)
    q = _rows(12, 2, 9, 0.5)
    q[:, 6:] = q[:, 6:] * 0 + q[:, :6].sum(1, keepdim=True) / 6
    q = q / q.sum(1, keepdim=True)
    return StatCase("masked_support", p, q, 0.6,
                    "tokens outside p's support are drafted and must always be rejected, never emitted; "
                    "temperature 0.6 makes a backend that ignores temperature visible", checks=WITH_RECOVERED)


def _bf16_sensitive_case() -> StatCase:
    """Seven q entries sit just under half a bf16 ulp above 1/8, so bf16 storage rounds each down to 1/8, by
    0.36%; p is 1/8 there. The exact rule rejects those drafts with probability 1 - p/q (0.32% of the drafts in
    all); a sampler that reads q in bf16 sees p/q = 1 and rejects none, and the rejections it lacks are rare
    enough that the binomial test's variance is small: a shift of 0.0032 at an acceptance of 0.9968."""
    a = 0.125 * (1 + 2.0 ** -8 - 2.0 ** -12)
    q = torch.full((1, 8), a, dtype=torch.float64)
    q[0, 7] = 1 - 7 * a
    p = torch.zeros(2, 8, dtype=torch.float64)
    p[0, :7] = 0.125
    p[0, 7] = 1 - p[0, :7].sum()
    p[1] = torch.linspace(1, 2, 8, dtype=torch.float64) / torch.linspace(1, 2, 8, dtype=torch.float64).sum()
    return StatCase("bf16_sensitive", p, q, 1.0,
                    "draft probabilities stored in bf16 raise acceptance from 0.9968 to 1: detectable with tens "
                    "of thousands of samples (the dev profile)", checks=("acceptance_rate",))


def _fallback_case() -> StatCase:
    """q = p (1 + FALLBACK_EXCESS) at every draft, so every rejection meets a residual that is zero
    everywhere. The draft rows are 0 at ids 0 and V - 1, the ids a fallback that keeps the first or the last
    index emits; the bonus row is 0 at id 0 only, so a fallback that returns what another request's bonus
    sample left behind (its last id in the support, V - 1) emits a token of probability 0 too."""
    p = _rows(31, 5, 8, 1.0)
    p[:, 0] = 0.0
    p[:4, 7] = 0.0
    p = p / p.sum(1, keepdim=True)
    return StatCase("residual_fallback", p, p[:4] * (1 + FALLBACK_EXCESS), 1.0,
                    "the drafter is the target up to a factor 1 + 5e-4: each draft is rejected with probability "
                    "5e-4 / (1 + 5e-4), at a residual max(p - q, 0) that is zero everywhere, and SPEC 3 then samples "
                    "p; the only way a backend that draws its own noise meets the fallback (about 16 of 8,000 "
                    "copies reject)", q_over_one=True, checks=WITH_RECOVERED)


TILE_WIDTHS = (1024, 2048, 4096, 8192)   # the vocabulary tiles of common kernels (ours, vLLM's 8,192)


def _tile_boundary_case(name: str, V: int, **kwargs) -> StatCase:
    """All the mass on ids either side of every boundary of 1024-, 2048-, 4096- and 8192-wide tiles below V
    and on the last three ids of V (the last tile, partial for every width that does not divide V)."""
    edges = {e for w in TILE_WIDTHS for e in (w - 1, w) if w < V}
    ids = tuple(sorted(edges | {V - 3, V - 2, V - 1}))
    return StatCase(name, _rows(13, 2, len(ids), 1.0), _rows(14, 1, len(ids), 1.0), 1.0,
                    f"V = {V:,} with the mass across tile boundaries and in the last tile: a padded, skipped or "
                    "double-counted tile shows in the law", embed=(V, ids), checks=("token_distribution",), **kwargs)


def _tied_rows() -> torch.Tensor:
    """[4, 8] target rows whose third and fourth largest probabilities are equal (a top-k 3 tie)."""
    p = _rows(9, 4, 8, 1.0)
    top = torch.sort(p, dim=1, descending=True)
    p.scatter_(1, top.indices[:, 3:4], top.values[:, 2:3])
    return p / p.sum(dim=1, keepdim=True)


STAT_CASES: tuple[StatCase, ...] = (
    StatCase("dense_q", _rows(1, 4, 8, 1.5), _rows(2, 3, 8, 1.5), 1.0,
             "drafts drawn from a real q: emitted token at each position ~ p_j, acceptance alpha_j, the token after "
             "a rejection ~ the residual normalised", checks=WITH_RECOVERED),
    StatCase("onehot_drafter", _rows(3, 3, 6, 1.0), None, 1.0,
             "deterministic drafter (draft_probs None): q is one-hot, the residual is p without the draft",
             drafts=(1, 4), checks=WITH_RECOVERED),
    _masked_case(),
    StatCase("synthetic_rate", _rows(5, 5, 7, 1.0), _rows(6, 4, 7, 1.0), 1.0,
             "forced acceptance with geometric decay: per-position rates a0*g^j and mean joint rate r",
             method="synthetic", rate=0.6, steps=4, checks=("acceptance_rate", "token_distribution", "synthetic_rate")),
    _bf16_sensitive_case(),
    StatCase("mixed_greedy", _rows(7, 4, 8, 1.5), _rows(8, 3, 8, 1.5), 0.8,
             "every other request greedy in one launch: the per-request routing between the greedy and the "
             "random path; a greedy request sampled at some temperature shifts the mixture", greedy_every=2),
    StatCase("filtered_target", _tied_rows(), _rows(10, 3, 8, 1.0), 0.9,
             "top-k 3 with a tie at the third value, top-p 0.85 and min-p 0.08 on every copy: the law of p' "
             "(SPEC 3.4) at acceptance, recovered and bonus tokens", filters=(3, 0.85, 0.08), checks=WITH_RECOVERED),
    _fallback_case(),
)

STAT_CASES += (
    StatCase("block", _rows(18, 4, 4, 1.5), _rows(118, 3, 4, 1.5), 1.0,
             "block verification (SPEC 3.7) with drafts from q: each position's token ~ p_j, acceptances and "
             "the mean accepted length by the block law, which exceeds the standard rule's by 0.17 here",
             method="block", checks=("token_distribution", "acceptance_rate", "accepted_length",
                                     "sequence_distribution")),
    # just past 8,192: a last tile of 3 ids for 1024-, 2048-, 4096- and 8192-wide tiles alike
    _tile_boundary_case("tile_boundary", 8_195, max_copies=1_000),
    # on every profile; off the GPU only where the backend's measured speed fits large_case_budget
    _tile_boundary_case("large_vocab_tiles", 151_936, max_copies=2_000, launch_copies=250),
    # the largest vocabulary served (every tile width divides it: the mass sits in a full last tile); a
    # CPU run has the 151,936 case already, and this one would double its time
    _tile_boundary_case("large_vocab_262k", 262_144, max_copies=2_000, launch_copies=150, large_vocabs_only=True),
)



def _eagle_case() -> StatCase:
    """EAGLE's top-k tree with one-hot q: three children of the root (the root row's three most likely
    tokens), two under the first, one under the first's first; any fixed drafts give p_root first."""
    parents = (-1, -1, -1, 0, 0, 3)
    p = _rows(21, 7, 6, 1.2)
    tokens = [int(t) for t in p[0].topk(3).indices] + [int(t) for t in p[1].topk(2).indices] + [int(p[4].argmax())]
    return StatCase("tree_onehot_topk", p, None, 1.0,
                    "EAGLE-style top-k token tree, one-hot q (SPEC 3.8): first token ~ p_root, the sequence law "
                    "of recursive rejection sampling, the mean depth at or above the first-child chain's",
                    drafts=tuple(tokens), method="tree", parents=parents, checks=TREE_CHECKS)


def _duplicates_case() -> StatCase:
    """The root's top token drafted twice as its first two children (one-hot q), its second copy with a child,
    then the root's second token: a rejected token has no probability left (SPEC 3.8), so the second copy is
    never accepted. A rule that sums the siblings' target probabilities as it tries them counts the top token
    twice: the first token is then that token with probability 2 p_root(a), here 0.80 against 0.40. One check,
    the sequence law, which holds the first token's: a second check would raise the ci profile's copies."""
    parents = (-1, -1, -1, 1)
    p = _rows(25, 5, 6, 1.0)
    a, b = (int(t) for t in p[0].topk(2).indices)
    return StatCase("tree_duplicate_siblings", p, None, 1.0,
                    "token tree whose root has its top token as two siblings, one-hot q (SPEC 3.8): the second "
                    "copy never accepted, so the sequence law's first token ~ p_root",
                    drafts=(a, a, b, int(p[2].argmax())), method="tree", parents=parents,
                    checks=("sequence_distribution",))


TREE_CHECKS = ("token_distribution", "sequence_distribution", "accepted_length")
STAT_CASES += (
    StatCase("tree_dense_q", _rows(22, 5, 4, 1.0), _rows(23, 4, 4, 1.0), 1.0,
             "token tree with dense q (SPEC 3.8), siblings drawn per copy without replacement, so each "
             "sibling's q_i differs: first token ~ p_root, the sequence law averaged over drafts, the mean "
             "depth at or above the first-child chain's", method="tree", parents=(-1, -1, 0, 0),
             without_replacement=True, checks=TREE_CHECKS),
    _eagle_case(),
    _duplicates_case(),
)
STAT_CASE_BY_NAME = {c.name: c for c in STAT_CASES}


def long_draw(case: str) -> int:
    """A sort key for starting the longest pairs first: the vocabulary of a production-vocabulary
    statistical case (its draw runs for minutes on the nightly profile), 0 for any other case."""
    found = STAT_CASE_BY_NAME.get(case)
    return found.vocab_size if found is not None and found.launch_copies else 0


def runs_on(case: StatCase, profile) -> bool:
    """Whether a profile's plan holds ``case``: every case but those kept for large-vocabulary profiles."""
    return not case.large_vocabs_only or bool(profile.large_vocabs)

