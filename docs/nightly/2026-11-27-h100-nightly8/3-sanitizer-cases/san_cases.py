"""Run chosen FILTERED cases of a checkout's ci/sanitizer_driver.py: python san_cases.py ROOT I [I ...]"""
import os, sys, importlib
import torch
root = os.path.abspath(sys.argv[1])
sys.path[:0] = [root, os.path.join(root, "tests"), os.path.join(root, "ci")]
drv = importlib.import_module("sanitizer_driver")
import specverify
print("specverify from", specverify.__file__)
picked = [drv.FILTERED[int(i)] for i in sys.argv[2:]]
drv.FILTERED[:] = picked
errors = drv.filtered_calls(torch.Generator().manual_seed(2026), "cuda")
print("errors", errors)
