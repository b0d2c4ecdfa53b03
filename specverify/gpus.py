"""Which GPUs a run uses: one worker process pinned to each through CUDA_VISIBLE_DEVICES, set in the
worker before CUDA starts (as pytest-xdist users pin theirs), so that no two checks fight over one GPU by
accident and a host's every GPU works.

    visible_gpus() -> ["0", "1", ...]   $CUDA_VISIBLE_DEVICES if set, else one per line of `nvidia-smi -L`
    choose_gpus(spec) -> ids             "auto": every visible GPU; "N": the first N of them; "a,b,...":
                                         those ids ("2," for GPU 2 alone). A ValueError names the problem.
    pinned_order(gpu, gpus) -> "2,0,1"   a pinned worker's CUDA_VISIBLE_DEVICES: its GPU first, then the rest
"""

from __future__ import annotations

import os
import subprocess


def visible_gpus() -> list[str]:
    """Device ids the process may use: $CUDA_VISIBLE_DEVICES if set, else one per line of `nvidia-smi -L`."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip()]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True).stdout
        return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]
    except (OSError, subprocess.SubprocessError):
        return []


def choose_gpus(spec: str) -> list[str]:
    """The GPU ids of ``spec`` (see the module docstring), never empty."""
    spec = spec.strip()
    if "," in spec:
        gpus = [d.strip() for d in spec.split(",") if d.strip()]
        if not gpus or len(set(gpus)) != len(gpus):
            raise ValueError(f"--gpus {spec!r}: give distinct GPU ids separated by commas")
        return gpus
    visible = visible_gpus()
    if spec == "auto":
        if not visible:
            raise ValueError("--gpus auto: no GPU found ($CUDA_VISIBLE_DEVICES is unset and nvidia-smi -L lists none)")
        return visible
    if not spec.isdigit() or int(spec) < 1:
        raise ValueError(f"--gpus takes auto, a count >= 1 or a comma-separated list of ids, got {spec!r}")
    if int(spec) > len(visible):
        raise ValueError(f"--gpus {spec}: only {len(visible)} GPU(s) visible ({', '.join(visible) or 'none'})")
    return visible[: int(spec)]


def pinned_order(gpu: str, gpus: list[str]) -> str:
    """CUDA_VISIBLE_DEVICES of a worker pinned to ``gpu``: that GPU first (the worker's cuda:0, where
    every default allocation and launch goes), the run's other GPUs after it, so that a check that needs
    a second device (``device_placement[other_device]``) finds one. CUDA starts a context on a device
    only when it is used, so the others cost nothing until then."""
    return ",".join([gpu] + [g for g in gpus if g != gpu])


__all__ = ["choose_gpus", "pinned_order", "visible_gpus"]
