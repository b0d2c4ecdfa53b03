"""Token trees (SPEC 3.8) for the CPU backend: every request at once, one sibling try per step, in float64
(the reference's arithmetic, so injected noise gives its tokens bit for bit).

A request's nodes are reached through linked lists built once per call (keys: node t for the flat draft
slot t in [0, T), T + b for request b's root):

    first_child [T + B]   flat slot of each key's first child, -1 when it has none
    next_sibling [T]      flat slot of each node's next sibling, -1 after the last
    row [T + B]           the target row of each key: the root's row, then node i's at offset 1 + i

Per request (B of them, R random, V vocabulary) the walk keeps the slot of the child to try next
(``cand`` [B], -1: none left), and a random request its residual r [R, V] with mass m [R] (r / m is the
residual distribution; m = 1 at a node's own row). Each step tries one child of every running request,
or, where none is left, emits the final token; a request makes at most N_b tries, so K + 1 steps finish
every request (the loop is over steps, never over requests).
"""

from __future__ import annotations

import torch

from reference import Noise, SpecBatch, SpecOutput, filters
from reference.batch import PLACEHOLDER


class TreeSteps:
    """Mixed into CpuBackend: ``_tree_sample`` and its steps."""

    def _tree_sample(self, batch: SpecBatch, noise: Noise) -> SpecOutput:
        B, T, K, device = batch.num_requests, batch.num_drafts, batch.max_draft, batch.device
        first_child, next_sibling, row = self.tree_links(batch)
        d_off = batch.draft_offsets()
        x = batch.draft_token_ids
        u = noise.uniform.to(device=device, dtype=torch.float64)
        exponential = self.exponential_for(noise).to(device=device, dtype=torch.float64)
        is_greedy = batch.temperature == 0
        token_ids = torch.full((B, K + 1), -1, dtype=torch.int64, device=device)
        nodes = torch.full((B, K), -1, dtype=torch.int64, device=device)
        depth = torch.zeros(B, dtype=torch.int64, device=device)
        done = torch.zeros(B, dtype=torch.bool, device=device)
        if batch.allow_nonfinite:   # SPEC 3.6: nothing accepted, the first argmax of the root row
            bad = batch.nonfinite_requests()
            roots = batch.target_logits[row[T:][bad]].double().nan_to_num(nan=float("-inf"))
            token_ids[bad, 0] = roots.argmax(dim=1)
            done |= bad
        cand = first_child[T:].clone()                  # [B] slot of the child to try next
        here = row[T:].clone()                          # [B] target row of the current node
        top = torch.full((B,), -1, dtype=torch.int64, device=device)    # greedy: argmax of that row
        g = torch.nonzero(is_greedy & ~done).flatten()
        top[g] = self.greedy_argmax(batch.target_logits[here[g]].double())
        random = torch.nonzero(~is_greedy & ~done).flatten()
        lane = torch.full((B,), -1, dtype=torch.int64, device=device)   # random request -> its row of r
        lane[random] = torch.arange(random.shape[0], device=device)
        r = self.tree_target(batch, random, here[random])              # [R, V]: p_root
        m = torch.ones(random.shape[0], dtype=torch.float64, device=device)

        for _ in range(K + 1):
            # requests with no child left to try emit their final token
            stop = torch.nonzero(~done & (cand < 0)).flatten()
            if stop.numel():
                sg, sr = stop[is_greedy[stop]], stop[~is_greedy[stop]]
                token_ids[sg, depth[sg]] = top[sg]
                token_ids[sr, depth[sr]] = self.tree_race(r[lane[sr]], exponential[sr])
                done[stop] = True
            b = torch.nonzero(~done).flatten()
            if b.numel() == 0:
                break
            c = cand[b]
            x_c = x[c]
            hole = x_c == PLACEHOLDER                   # never accepted, r unchanged
            accepted = torch.zeros(b.shape[0], dtype=torch.bool, device=device)
            gb = is_greedy[b]
            accepted[gb] = x_c[gb] == top[b[gb]]
            tried = ~gb & ~hole
            if bool(tried.any()):
                bt, ct = b[tried], c[tried]
                s = lane[bt]
                q = self.tree_proposals(batch, ct, x_c[tried])          # [n, V]
                ok = self.tree_accept(u[ct], r[s, x_c[tried]], m[s], q.gather(1, x_c[tried, None]).squeeze(1))
                accepted[tried] = ok
                no = torch.nonzero(~ok).flatten()
                if no.numel():
                    r[s[no]], m[s[no]] = self.tree_residual(r[s[no]], m[s[no]], q[no])
            # descend into the accepted children; the others try their next sibling
            ba, ca = b[accepted], c[accepted]
            token_ids[ba, depth[ba]] = x[ca]
            nodes[ba, depth[ba]] = ca - d_off[ba]
            depth[ba] += 1
            here[ba] = row[ca]
            cand[b] = torch.where(accepted, first_child[c], next_sibling[c])
            ag, ar = ba[is_greedy[ba]], ba[~is_greedy[ba]]
            if ag.numel():
                top[ag] = self.greedy_argmax(batch.target_logits[here[ag]].double())
            if ar.numel():
                r[lane[ar]] = self.tree_target(batch, ar, here[ar])
                m[lane[ar]] = 1.0
        return SpecOutput(token_ids, depth, nodes)

    # ---- overridable pieces ----------------------------------------------------------------------
    @staticmethod
    def tree_links(batch: SpecBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(first_child [T + B], next_sibling [T], row [T + B]) of the batch's trees (chains when it has no
        tree_parents); keys as in the module docstring."""
        B, T, device = batch.num_requests, batch.num_drafts, batch.device
        k, d_off = batch.num_draft_tokens, batch.draft_offsets()
        request = torch.repeat_interleave(torch.arange(B, device=device), k)
        local = torch.arange(T, device=device) - d_off[request]
        parents = local - 1 if batch.tree_parents is None else batch.tree_parents
        key = torch.where(parents >= 0, d_off[request] + parents, T + request)    # each node's parent's key
        first_child = torch.full((T + B,), T, dtype=torch.int64, device=device)
        first_child.scatter_reduce_(0, key, torch.arange(T, device=device), "amin")
        first_child = torch.where(first_child == T, -1, first_child)
        # siblings are consecutive after a stable sort by parent key, in increasing slot order
        order = torch.sort(key, stable=True).indices
        next_sibling = torch.full((T,), -1, dtype=torch.int64, device=device)
        same = key[order[1:]] == key[order[:-1]]
        next_sibling[order[:-1][same]] = order[1:][same]
        row = torch.cat([torch.arange(T, device=device) + request + 1, batch.logit_offsets()[:-1]])
        return first_child, next_sibling, row

    def tree_target(self, batch: SpecBatch, requests: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """[n, V] float64 p' (SPEC 3.4) of logit ``rows`` [n] of random ``requests`` [n]. The temperature is
        taken at the batch's own precision, as the reference takes it."""
        temperature = batch.temperature[requests].double()
        p = torch.softmax(batch.target_logits[rows].double() / temperature[:, None], dim=1)
        return filters.apply(p, *batch.filters_of(requests)) if batch.has_filters else p

    @staticmethod
    def tree_proposals(batch: SpecBatch, slots: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """[n, V] float64 q of the nodes at ``slots`` [n]: draft_probs rows, or one-hot at their tokens x [n]."""
        if batch.draft_probs is not None:
            return batch.draft_probs[slots].double()
        return torch.nn.functional.one_hot(x, batch.vocab_size).double()

    @staticmethod
    def tree_accept(u: torch.Tensor, r_x: torch.Tensor, m: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
        """Accept iff q(x) > 0 and u * q(x) <= r(x) / m: probability min(1, (r / m)(x) / q(x))."""
        return (q_x > 0) & (u * q_x <= r_x / m)

    @staticmethod
    def tree_residual(r: torch.Tensor, m: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(max(r - m q, 0), its mass) for rows r [n, V]; a row that would be zero everywhere is kept. The
        mass is a left-to-right running sum, as the reference takes it."""
        res = torch.clamp(r - m[:, None] * q, min=0)
        res = torch.where(res.any(dim=1, keepdim=True), res, r)
        return res, torch.cumsum(res, dim=1)[:, -1]

    @staticmethod
    def tree_race(w: torch.Tensor, exponential: torch.Tensor) -> torch.Tensor:
        """[n] argmax_v w(v) / E(v) over entries with w > 0, the lowest index among ties."""
        return torch.where(w > 0, w / exponential, -1.0).argmax(dim=1)
