"""Test-suite setup. Without a GPU, Triton kernels run in the Triton interpreter on CPU tensors;
the variable must be set before triton is first imported, which is why it lives here."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Each xdist worker gets one intra-op thread: with -n auto the workers already fill the cores, and
# small tensor ops slow down by orders of magnitude when several processes' thread pools contend.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
