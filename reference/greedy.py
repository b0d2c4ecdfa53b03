"""The greedy rule (temperature 0), SPEC section 3.

accept iff x == argmax p (lowest index among ties); at the first mismatch emit argmax p;
if all drafts are accepted emit argmax of the bonus row. No noise is used.
argmax p equals argmax of the logits, which is exact: no softmax rounding can move it.
"""

from __future__ import annotations

import torch


def argmax(logits: torch.Tensor) -> int:
    """Lowest index attaining the maximum of a [V] row."""
    top = logits.max()
    return int(torch.nonzero(logits == top)[0, 0])


def first_argmax(values: torch.Tensor) -> torch.Tensor:
    """``argmax`` of each row of [..., V]: [...] int64 (torch.argmax returns the first maximal index)."""
    return values.argmax(dim=-1)


def accepts(x: int, logits: torch.Tensor) -> bool:
    return x == argmax(logits)
