"""Parts of one program run side by side, one pinned to each GPU in turn (ci/sanitizer_driver.py --parts).

    run_parts(n, command, gpus) -> exit status      command(k): part k's argv; gpus: ids, or [] for none

Kept apart from the driver, so that it imports nothing heavy: a part's process is started and relayed here, the
driver's work is done in the parts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading


def run_parts(n: int, command, gpus: list[str]) -> int:
    """Parts 1 to ``n`` side by side: ``command(k)`` is part k's argv, run with CUDA_VISIBLE_DEVICES set to
    ``gpus[(k - 1) % len(gpus)]`` (unset without gpus). Each line of a part is printed as it comes, after
    "[part k/n] ". Returns the first non-zero exit status in part order, else 0. A SIGTERM (the nightly's DEADLINE)
    ends the parts too, so that none keeps a GPU busy after the step."""
    procs = []

    def stop(signum, frame):
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        return _relay_parts(n, command, gpus, procs)
    finally:
        signal.signal(signal.SIGTERM, previous)
        # the parts still running (a SIGTERM, an error here) end with the run, reaped here
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _relay_parts(n: int, command, gpus: list[str], procs: list) -> int:
    """run_parts' work: start the parts into ``procs``, relay their lines, wait for them all."""
    lock, readers = threading.Lock(), []
    for k in range(1, n + 1):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[(k - 1) % len(gpus)]
        proc = subprocess.Popen(command(k), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        def relay(proc=proc, k=k):
            for line in proc.stdout:
                with lock:
                    print(f"[part {k}/{n}] {line}", end="", flush=True)
        readers.append(threading.Thread(target=relay, daemon=True))
        readers[-1].start()
        procs.append(proc)
    codes = [proc.wait() for proc in procs]
    for reader in readers:
        reader.join()
    print(f"sanitizer driver: {n} parts" + (f" on GPUs {', '.join(gpus)}" if gpus else "")
          + f", exit statuses {codes}", flush=True)
    return next((c for c in codes if c != 0), 0)
