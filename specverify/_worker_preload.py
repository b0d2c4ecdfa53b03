"""Imported once by the check pool's fork server, before it forks any worker.

The server imports the harness so that workers start in milliseconds. It must never start torch's
intra-op thread pool: threads do not survive fork, and a child inheriting a started pool deadlocks
on its first parallel operation. One thread here; each worker sets its own count after the fork.

``torch._dynamo`` (about 2 CPU-seconds) is left to the one worker that runs ``uninitialized_memory``,
whose first call imports it: a run that does not select that check never pays for it.
"""

import torch

torch.set_num_threads(1)

import specverify.checks  # noqa: E402,F401
from specverify.checks import stats  # noqa: E402

# scipy.stats, which the harness imports on first use (the CLI's parent never needs it): here once for
# every worker, which would otherwise each import it on its first statistical check
stats._scipy()
