#!/usr/bin/env python3
"""The dependency rule of docs/design.md, checked: every #include of a project header must point down
the layer diagram, never up or sideways into a folder the includer may not see. Also checks that
file names mentioned in comments still exist. Exit 1 with one line per violation.

Usage: scripts/check_layers.py [SOURCE_ROOT]"""
import os
import re
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

# folder -> folders its files may include (besides its own). Order is the layer diagram of
# docs/design.md, bottom up.
AMP_DATA = "src/amp:data"  # the plain-data headers of amp/ (scaler state machine, flag layout, FP8 scaling)
ALLOWED = {
    "src/core": set(),
    AMP_DATA: {"src/core"},
    "src/optim": {"src/core"},
    "src/config": {"src/core", AMP_DATA, "src/optim"},
    "src/data": {"src/core", "src/config"},
    "comm": {"src/core"},                                   # moves bytes: no backend, no cuda/, no models
    "src/cudart": {"src/core"},                             # CUDA runtime helpers (CUDA builds only)
    "comm/nccl": {"src/core", "comm", "src/cudart"},
    "src/backend": {"src/core", "src/optim", AMP_DATA},
    "src/backend/cpu": {"src/core", "src/optim", AMP_DATA, "src/backend"},
    # comm: DeviceStream only; comm/nccl: the module's table (cuda/cuda_module.h) hands out NCCL's communicator
    "cuda": {"src/core", "src/optim", AMP_DATA, "src/backend", "src/cudart", "comm", "comm/nccl"},
    "src/model": {"src/core", AMP_DATA, "src/optim", "src/backend", "src/config", "src/data"},
    "src/amp": {"src/core", AMP_DATA, "src/backend", "comm"},  # the owner, MixedPrecision
    "src/train": {"src/core", "src/config", "src/backend", "src/amp", AMP_DATA, "src/optim", "src/model",
                  "src/data", "comm"},
    "src": {"src/core", "src/config", "src/train", "comm", "src/backend"},   # main.cpp
}
DATA_HEADERS = {"src/amp/loss_scaler.h": AMP_DATA, "src/amp/overflow_flags.h": AMP_DATA,
                "src/amp/fp8_scaling.h": AMP_DATA}


def layer_of(rel_path):
    return DATA_HEADERS.get(rel_path, os.path.dirname(rel_path))


# Include paths are relative to src/ or to the repository root (both are on the include path).
# Headers of the libraries, and placeholder paths, that comments may name.
SYSTEM_HEADERS = {"mpi.h", "nccl.h", "cuda_runtime.h", "cublasLt.h", "cublas_v2.h", "dnnl.hpp", "omp.h", "zlib.h", "immintrin.h"}
PLACEHOLDERS = ("out_dir/", "run_dir/", "file.", "runs/", "<")
# Build-flavour seams: a factory file may include the implementation it makes (docs/design.md).
FACTORY = re.compile(r"_(cuda|nccl|stub)_factory\.cpp$")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def folder_of_header(inc, includer_dir):
    """The layer (as in ALLOWED) a quoted include resolves to, or None if it is not a project file."""
    for base in (os.path.join(root, includer_dir), os.path.join(root, "src"), root):
        path = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(path):
            return layer_of(os.path.relpath(path, root)), path
    return None, None


violations = []
for top in ("src", "comm", "cuda"):
    for dirpath, _, files in os.walk(os.path.join(root, top)):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir not in ALLOWED:
            violations.append(f"{rel_dir}: a folder the layer rule does not know (add it to scripts/check_layers.py "
                              "and docs/design.md)")
            continue
        for name in sorted(files):
            if not name.endswith(SOURCES):
                continue
            path = os.path.join(dirpath, name)
            layer = layer_of(os.path.relpath(path, root))
            text = open(path, encoding="utf-8", errors="replace").read()
            for m in INCLUDE.finditer(text):
                target_dir, _ = folder_of_header(m.group(1), rel_dir)
                if target_dir is None:
                    violations.append(f"{os.path.relpath(path, root)}: includes \"{m.group(1)}\", which does not exist")
                elif target_dir != layer and target_dir not in ALLOWED[layer] and not FACTORY.search(name):
                    line = text.count("\n", 0, m.start()) + 1
                    violations.append(f"{os.path.relpath(path, root)}:{line}: includes \"{m.group(1)}\" from {target_dir}/, "
                                      f"which {layer}/ may not depend on")
            # File names in comments must exist (renames leave stale references behind).
            for c in re.finditer(r"(//[^\n]*|/\*.*?\*/)", text, re.S):
                for ref in re.findall(r"\b((?:[\w.-]+/)*[\w-]+\.(?:h|cpp|cu|cuh|py|sh|md|yaml))\b", c.group(1)):
                    stem = os.path.basename(ref).split(".")[0]
                    if stem.isupper() or ref in SYSTEM_HEADERS or ref.startswith(PLACEHOLDERS):
                        continue  # a placeholder (CONFIG.yaml, out_dir/...) or a library's header
                    candidates = [os.path.join(root, ref), os.path.join(root, "src", ref), os.path.join(dirpath, ref),
                                  os.path.join(root, "configs", ref), os.path.join(root, "scripts", ref),
                                  os.path.join(root, "docs", ref), os.path.join(root, "tests", ref)]
                    if "/" not in ref:  # a bare file name: anywhere in the tree
                        candidates += [os.path.join(dp, ref) for dp, _, fs in os.walk(root) if ref in fs and ".git" not in dp]
                    if not any(os.path.exists(p) for p in candidates):
                        line = text.count("\n", 0, c.start()) + 1
                        violations.append(f"{os.path.relpath(path, root)}:{line}: a comment names {ref}, which does not exist")

# Catch2 test names in the discovered suites must not hold ';': ctest's discovery splits them there
# and registers fragments that match no test (they fail, the real case never runs).
for dirpath, _, files in os.walk(os.path.join(root, "tests", "unit")):
    for name in sorted(files):
        if name.endswith(".cpp"):
            text = open(os.path.join(dirpath, name), encoding="utf-8", errors="replace").read()
            for m in re.finditer(r'TEST_CASE\(\s*"((?:[^"\\]|\\.)*)"', text):
                if ";" in m.group(1):
                    line = text.count("\n", 0, m.start()) + 1
                    violations.append(f"tests/unit/{name}:{line}: test name holds ';' (ctest discovery splits it there)")

for v in violations:
    print(v)
print(f"check_layers: {len(violations)} violation(s)" if violations else "check_layers: every include points down the layers")
sys.exit(1 if violations else 0)
