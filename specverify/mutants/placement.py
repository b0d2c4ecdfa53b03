"""GPU-only mutants of placement (SPEC 7, the ``device_placement`` check; vllm-project/vllm #7183).

Each is the correct TritonBackend with one placement step changed. Where the caller's current device
is the batch's and its current stream the default one, each gives exactly the correct backend's outputs:
only a call made from another device or stream shows the bug.

    outputs_on_current_device    outputs allocated on "cuda" (the caller's current device): cuda:0
                                 while the batch is on cuda:1 (two GPUs)
    launch_without_device_guard  the Triton launches made with the caller's device current (two GPUs)
    work_on_default_stream       the whole call queued on the batch device's default stream while the
                                 caller's stream is current (one GPU)
"""

from __future__ import annotations

from contextlib import nullcontext

import torch

from reference import SpecBatch
from specverify.kernels.triton_sampler import TritonBackend


class OutputsOnCurrentDevice(TritonBackend):
    """token_ids, num_accepted (and accepted_nodes) allocated with device="cuda" before the device guard
    is entered: on whichever device the caller has current, not the batch's. The kernels, launched on the
    batch's device, write into the other GPU's memory."""

    name = "outputs_on_current_device"

    def _outputs(self, batch: SpecBatch, method: str) -> tuple:
        B, K = batch.num_requests, batch.max_draft
        nodes = torch.empty((B, K), dtype=torch.int64, device="cuda") if method == "tree" else None
        return torch.empty((B, K + 1), dtype=torch.int64, device="cuda"), \
            torch.empty(B, dtype=torch.int64, device="cuda"), nodes


class LaunchWithoutDeviceGuard(TritonBackend):
    """The launches made without the device guard. TritonBackend makes the batch's device current
    around its launches (``_device_guard``: ``torch.cuda.device(batch.device)``); this leaves exactly
    that out, as a wrapper written and tested on a one-GPU machine does. Triton then launches on the
    caller's current device and its current stream, with pointers into the batch's GPU. Forcing
    ``torch.cuda.device(0)`` around the call instead would show the bug only for a caller whose batch is
    not on GPU 0; leaving the guard out shows it for any caller whose current device is not the batch's,
    which is the case in a server."""

    name = "launch_without_device_guard"

    @staticmethod
    def _device_guard(device: torch.device):
        return nullcontext()


class WorkOnDefaultStream(TritonBackend):
    """Every step of the call (allocations, copies, launches) queued on the default stream of the batch's
    device, whatever stream the caller has current: the caller's stream neither orders the inputs before
    the launches nor the outputs after them."""

    name = "work_on_default_stream"

    def _sample(self, batch: SpecBatch, **kwargs):
        with torch.cuda.stream(torch.cuda.default_stream(batch.device)):
            return super()._sample(batch, **kwargs)


PLACEMENT_MUTANTS = {cls.name: cls for cls in (OutputsOnCurrentDevice, LaunchWithoutDeviceGuard,
                                               WorkOnDefaultStream)}

__all__ = ["LaunchWithoutDeviceGuard", "OutputsOnCurrentDevice", "PLACEMENT_MUTANTS", "WorkOnDefaultStream"]
