"""Trim FlashInfer's registry wheel to what `import flashinfer.sampling` and its sampling JIT need.

The registry wheel (flashinfer-python 0.7.2.post1, 62 MB) is over what travels to the device machine
beside the repository (64 MiB in all). This script reads it and writes a wheel of the same name and
version (with a fresh RECORD) into the output folder. The wheel keeps every Python file and every
non-source file outside `flashinfer/data`. From `flashinfer/data` it keeps only the three sources of
`flashinfer.jit.sampling.gen_sampling_module` and the headers they #include, followed through the
include directories that `flashinfer/jit/cpp_ext.py` passes to nvcc. It also downloads the wheels
that the import needs and the device image lacks (EXTRA), then prints the bundle's files and total.
It exits non-zero if the total is over --max-mib. `--check-includes` walks the include chains
again, this time in the written wheel plus tvm-ffi's headers, and fails if any header that the full
wheel provides is missing.

    python ci/flashinfer_bundle.py --check-includes    # writes .whl/trimmed/

On the device: `carry: [".whl/trimmed"]`, then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/trimmed/*.whl && export PYTHONPATH=/tmp/site
The sampling module is compiled by nvcc on its first call and cached under ~/.cache/flashinfer.
For a local CPU import test, use `--python-version 3.11 --out /tmp/fi-bundle` to get the cp311 builds.
"""

from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import posixpath
import re
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = Path(".whl/flashinfer_python-0.7.2.post1-py3-none-any.whl")
OUT = Path(".whl/trimmed")
MAX_MIB = 58.0
# METADATA requires apache-tvm-ffi<0.2,>=0.1.11; flashinfer/jit/core.py imports it unconditionally.
# cuda-python, cuda-tile, nvidia-cudnn-frontend, nvidia-cutlass-dsl, nccl4py are imported only in
# try blocks or lazily, and requests, einops, tabulate, ninja, nvidia-ml-py are in the device image.
EXTRA = ["apache-tvm-ffi==0.1.15.post2"]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
DATA = "flashinfer/data/"
SOURCES = [DATA + "csrc/" + s for s in ("sampling.cu", "renorm.cu", "flashinfer_sampling_binding.cu")]
# jit/cpp_ext.py build_common_cflags, in search order: -I CCCL, then -isystem Python, the CUDA
# toolkit (neither in a wheel), tvm-ffi's include and dlpack dirs, include, csrc, CUTLASS, spdlog.
SEARCH = [DATA + "cccl/" + d for d in ("cub", "libcudacxx/include", "thrust")]
SEARCH += ["tvm_ffi/include", "tvm_ffi/3rdparty/dlpack/include"]
SEARCH += [DATA + d for d in ("include", "csrc", "cutlass/include", "cutlass/tools/util/include",
                              "spdlog/include")]
NATIVE = (".cu", ".cuh", ".h", ".hpp", ".hxx", ".cc", ".cpp", ".cxx", ".c", ".inl", ".ptx")
INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"]+)[>"]', re.M)


def closure(index: dict[str, zipfile.ZipFile], roots: list[str]) -> tuple[set[str], dict[str, str]]:
    """Files reached from roots by literal #include lines (every branch of every #if: a superset),
    and the headers no archive holds (toolkit, C++ library, system), each with one includer."""
    found: set[str] = set()
    outside: dict[str, str] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        found.add(name)
        for quote, header in INCLUDE.findall(index[name].read(name)):
            header = header.decode()
            here = [posixpath.normpath(posixpath.join(posixpath.dirname(name), header))]
            for cand in (here if quote == b'"' else []) + [d + "/" + header for d in SEARCH]:
                if cand in index:
                    todo.append(cand)
                    break
            else:
                outside.setdefault(header, name)
    return found, outside


def keep(name: str, needed: set[str]) -> bool:
    if name in needed or name.endswith((".py", ".pyi", "/py.typed")):
        return True
    return not name.startswith(DATA) and not name.endswith(NATIVE)


def group(name: str) -> str:
    folder = name.split("/")[:-1]
    return "/".join(folder[: 4 if name.startswith(DATA) else 2])


def trim(wheel: Path, out: Path) -> Path:
    kept: collections.Counter = collections.Counter()
    dropped: collections.Counter = collections.Counter()
    target = out / wheel.name
    with zipfile.ZipFile(wheel) as z, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as w:
        needed, _ = closure({n: z for n in z.namelist()}, SOURCES)
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for info in z.infolist():
            name = info.filename
            if name == record or name.endswith("/"):
                continue
            if not keep(name, needed):
                dropped[group(name)] += info.compress_size
                continue
            data = z.read(name)
            copy = zipfile.ZipInfo(name, info.date_time)
            copy.external_attr, copy.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
            w.writestr(copy, data)
            kept[group(name)] += info.compress_size
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{name},sha256={digest},{len(data)}")
        copy = zipfile.ZipInfo(record, z.getinfo(record).date_time)
        w.writestr(copy, "\n".join(rows + [f"{record},,"]) + "\n", zipfile.ZIP_DEFLATED)
    print(f"{len(needed)} files reached from the sampling sources")
    for title, sizes in (("kept", kept), ("dropped", dropped)):
        print(f"{title}: {sum(sizes.values()) / 2**20:.1f} MiB compressed; largest:")
        for key, size in sizes.most_common(12):
            print(f"  {size / 2**20:7.2f} MiB  {key}")
    return target


def download(out: Path, python_version: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", python_version, "--implementation", "cp", "-d", str(out)]
    cmd += [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(cmd + EXTRA, check=True)


def check_includes(out: Path, wheel: Path) -> bool:
    """Walk the include chains in the written wheels: every file the full wheel's walk reaches
    (with the same tvm-ffi wheels) must be reached, at the same path, in the bundle."""
    extras = [zipfile.ZipFile(p) for p in sorted(out.glob("*.whl")) if p.name != wheel.name]
    with zipfile.ZipFile(out / wheel.name) as trimmed, zipfile.ZipFile(wheel) as full:
        def walk(z: zipfile.ZipFile) -> tuple[set[str], dict[str, str]]:
            index = {n: e for e in extras for n in e.namelist()}
            index.update({n: z for n in z.namelist()})
            return closure(index, SOURCES)
        found, outside = walk(trimmed)
        full_found, full_outside = walk(full)
    lost = sorted(full_found - found)
    where = collections.Counter(n.split("/")[0] for n in found)
    print(f"include check: {len(found)} files resolved in the bundle ({dict(where)}),"
          f" {len(full_found)} in the full wheel")
    print(f"  {len(outside)} names left to the CUDA toolkit, C++ library and system"
          f" ({len(full_outside)} with the full wheel):")
    print("  " + " ".join(sorted(outside)))
    for name in lost:
        print(f"  MISSING {name}")
    if not any(n.startswith("tvm_ffi/") for n in found):
        print("  MISSING tvm-ffi headers: no tvm-ffi wheel in the output folder")
        return False
    print("  no header missing" if not lost else f"  {len(lost)} files missing")
    return not lost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, default=WHEEL)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--python-version", default="3.12", help="for the EXTRA downloads")
    ap.add_argument("--no-download", action="store_true", help="use the EXTRA wheels already in --out")
    ap.add_argument("--check-includes", action="store_true")
    ap.add_argument("--max-mib", type=float, default=MAX_MIB)
    args = ap.parse_args()
    if not args.wheel.is_file():
        sys.exit(f"no wheel at {args.wheel}: fetch it first, e.g. `python3 -m pip download --no-deps "
                 f"flashinfer-python==0.7.2.post1 -d {args.wheel.parent}`")
    if args.out.resolve() == args.wheel.parent.resolve():
        sys.exit("--out must not be the registry wheel's folder (its old wheels are removed)")
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.whl"):
        if not (args.no_download and old.name != args.wheel.name):
            old.unlink()
    trim(args.wheel, args.out)
    if not args.no_download:
        download(args.out, args.python_version)
    ok = not args.check_includes or check_includes(args.out, args.wheel)
    files = sorted(p for p in args.out.rglob("*") if p.is_file())
    total = sum(p.stat().st_size for p in files)
    print(f"bundle {args.out}:")
    for p in files:
        print(f"  {p.stat().st_size / 2**20:7.2f} MiB  {p.relative_to(args.out)}")
    print(f"total {total / 2**20:.2f} MiB (limit {args.max_mib} MiB)")
    if total > args.max_mib * 2**20:
        print("over the limit", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
