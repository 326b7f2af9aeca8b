#!/usr/bin/env bash
# Regenerates the seed corpus of the mlir_moe fuzz target, fuzz/corpus/mlir_moe/,
# from the lit tests: every test/**/*.mlir is split on `// -----` (as
# --split-input-file does) and each case, without its full-line comments
# (RUN, CHECK, expected-error), becomes one file <dir>_<file>_<n>.mlir.
# Run it after adding lit cases; check the result in.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/fuzz/corpus/mlir_moe
mkdir -p "$out"
rm -f "$out"/*.mlir
python3 - "$root" "$out" <<'EOF'
import pathlib, re, sys

root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
seen = set()
for test in sorted((root / "test").rglob("*.mlir")):
    stem = "_".join(test.relative_to(root / "test").with_suffix("").parts)
    for n, case in enumerate(re.split(r"^// -----.*$", test.read_text(), flags=re.M)):
        lines = [l for l in case.splitlines() if not l.lstrip().startswith("//")]
        text = "\n".join(lines).strip() + "\n"
        if text.strip() and text not in seen:
            seen.add(text)
            (out / f"{stem}_{n:02d}.mlir").write_text(text)
print(f"fuzz-seed-mlir: {len(seen)} cases in {out}")
EOF
du -sh "$out"
