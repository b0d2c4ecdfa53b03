"""Test-suite setup. Without a GPU, Triton kernels run in the Triton interpreter on CPU tensors;
the variable must be set before triton is first imported, which is why it lives here."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
