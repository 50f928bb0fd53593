#!/usr/bin/env python3
"""Compare two output directories of tools/compare_commands/run.sh (before and after a change) after masking what
legitimately varies. Exit code 0 when everything is equal, 1 otherwise.

Usage: python tools/compare_commands/compare_outputs.py A_DIR B_DIR [--raw] [--max-diff-lines N]

1. Per command NN-name: exit codes equal? masked stdout equal? masked stderr equal?
2. Every text file the commands wrote (A_DIR/files/...: json, csv, md, txt, yaml), masked; JSON files are parsed
   and the values of a short list of timing keys (TIMING_KEYS) replaced by <T> before the line masks.
3. Binary files (.pt/.onnx/.pth) from the scratch directories: byte-identical, or for .pt loaded and compared
   semantically: every tensor with torch.equal, every other value equal after the same masks, only the
   checkpoint's own content digest ("sha256" at top level, which covers the masked fields) ignored.
4. SHA-256 digests: a file that differs in bytes but is equal after masking (a LUT whose wall-clock medians
   differ, a checkpoint whose meta holds an absolute path or a training time) has another digest; the digests of
   such equivalent pairs (file digest and checkpoint content digest) are replaced by the same token <SHA:path> in
   every compared text, to a fixpoint.  Any other digest is compared as it is.

Masks are deliberately narrow: wall-clock durations, timestamps, load averages, the two checkouts' and output
directories' absolute paths; accuracies, counts, losses, tables, fold sets and error messages are compared as
they are.  --raw: no masking at all.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

# line masks: (name, regex, replacement), applied in order to every line of every compared text
MASKS: list[tuple[str, str, str]] = [
    # (the absolute paths of the two checkouts and output directories are masked too: main() adds them)
    # ISO timestamps (2026-12-05T12:34:56+00:00, 2026-12-05 12:34:56.123)
    ("timestamp", r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?", "<TS>"),
    # durations in progress lines and summaries: "0.3 s", "11 s", "[1.9 s]", "(2 s on cpu)", "about 1 s left"
    ("duration s", r"\b\d+(?:\.\d+)? s\b", "<T> s"),
    ("duration min", r"\b\d+(?:\.\d+)? min\b", "<T> min"),
    # training progress: "seconds 0.8714"
    ("epoch seconds", r"\bseconds \d+(?:\.\d+)?(?:e-?\d+)?", "seconds <T>"),
    # profile summary: "load average before/after timing [[3.89, 3.74, 3.25], [...]]"
    ("load average", r"(load average before/after timing )\[\[[-\d., \[\]]*\]\]", r"\1<LOAD>"),
    # compress summary: "time     analysis 0.0s (MILP 0.0s, LP 0.0s), verification 0.2s, total 0.2s"
    ("compress times", r"\b(analysis|MILP|LP|verification|total) \d+(?:\.\d+)?s\b", r"\1 <T>s"),
    # regions summary: "21 linear regions of [2, 4, 4, 1] over the box (66 LPs, 0.03s)"
    ("regions time", r"(\d+ LPs, )\d+(?:\.\d+)?s\)", r"\1<T>s)"),
    # REPORT.md stage table: "| base | ran (new) | 2.1 |" (the last column is seconds)
    ("stage table seconds", r"^(\| \w+ \| [^|]+ \| )\d+(?:\.\d+)?( \|)$", r"\1<T>\2"),
]
_COMPILED = [(n, re.compile(r), s) for n, r, s in MASKS]

# JSON keys whose values (with everything beneath them) are wall-clock times, timestamps or load averages
TIMING_KEYS = {
    "seconds",            # report.json / metrics.json per-stage times, run.json stage times
    "timings",            # compress: per-method analysis times
    "wall_seconds",       # compress report
    "train_seconds",      # train-mlp meta
    "wall_median_ms",     # LUT: the wall-clock median kept beside a count device's count
    "profiling_s",        # LUT / run.json
    "created", "lut_created",  # LUT creation timestamp
    "loadavg", "loadavg_during_timing",
}

SHA_MAP: dict[str, str] = {}
HEX64 = re.compile(r"\b[0-9a-f]{64}\b")


def mask_line(line: str) -> str:
    for _, rx, rep in _COMPILED:
        line = rx.sub(rep, line)
    if SHA_MAP:
        line = HEX64.sub(lambda m: SHA_MAP.get(m.group(0), m.group(0)), line)
    return line


def mask_json(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: ("<T>" if k in TIMING_KEYS else mask_json(v)) for k, v in o.items()}
    if isinstance(o, list):
        return [mask_json(v) for v in o]
    return o


def mask(text: str, name: str, raw: bool) -> list[str]:
    if raw:
        return text.splitlines()
    if name.endswith(".json"):
        try:
            text = json.dumps(mask_json(json.loads(text)), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    return [mask_line(line) for line in text.splitlines()]


def read(p: Path) -> str:
    try:
        return p.read_text(errors="replace")
    except FileNotFoundError:
        return "<missing>"


def udiff(a: list[str], b: list[str], name: str, n: int, la: str, lb: str) -> list[str]:
    d = list(difflib.unified_diff(a, b, f"{la}/{name}", f"{lb}/{name}", lineterm="", n=1))
    return d[:n] + ([f"... ({len(d) - n} more diff lines)"] if len(d) > n else [])


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def pt_equal(pa: Path, pb: Path) -> tuple[bool, str, tuple[str, str] | None]:
    """Semantic equality of two torch.save files: tensors exact, other values equal after masking."""
    import torch

    a = torch.load(pa, weights_only=True)
    b = torch.load(pb, weights_only=True)
    why: list[str] = []

    def cmp(x: Any, y: Any, path: str) -> None:
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
                    and x.shape == y.shape and torch.equal(x, y)):
                why.append(f"tensor {path}")
        elif isinstance(x, dict) and isinstance(y, dict):
            if list(x) != list(y):
                why.append(f"keys of {path}")
            for k in x:
                if k in y and k not in TIMING_KEYS and not (path == "" and k == "sha256"):
                    cmp(x[k], y[k], f"{path}.{k}")
        elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            if len(x) != len(y):
                why.append(f"length of {path}")
            for i, (u, v) in enumerate(zip(x, y, strict=False)):
                cmp(u, v, f"{path}[{i}]")
        elif isinstance(x, str) and isinstance(y, str):
            if mask_line(x) != mask_line(y):
                why.append(f"{path}: {x!r} != {y!r}")
        elif x != y:
            why.append(f"{path}: {x!r} != {y!r}")

    cmp(a, b, "")
    digests = None
    if isinstance(a, dict) and isinstance(a.get("sha256"), str) and isinstance(b.get("sha256"), str):
        digests = (a["sha256"], b["sha256"])
    return not why, "; ".join(why[:5]), digests


def main() -> int:
    args = sys.argv[1:]
    raw = "--raw" in args
    nmax = int(args[args.index("--max-diff-lines") + 1]) if "--max-diff-lines" in args else 40
    pos = [a for i, a in enumerate(args) if not a.startswith("--") and not (i and args[i - 1] == "--max-diff-lines")]
    A, B = Path(pos[0]), Path(pos[1])
    paths = [(str(d.resolve()), "<OUT>") for d in (A, B)]
    paths += [((d / "checkout.txt").read_text().strip(), "<CHECKOUT>") for d in (A, B) if (d / "checkout.txt").is_file()]
    for path, token in sorted(paths, key=lambda pt: len(pt[0])):   # inserted at 0: the longest ends first
        _COMPILED.insert(0, (f"path {path}", re.compile(re.escape(path)), token))
    la, lb = A.name, B.name

    # 0. digest equivalences over the scratch directories, to a fixpoint
    sa, sb = A / "scratch", B / "scratch"
    rels = sorted({str(p.relative_to(sa)) for p in sa.rglob("*") if p.is_file() and "cache" not in p.parts}
                  & {str(p.relative_to(sb)) for p in sb.rglob("*") if p.is_file() and "cache" not in p.parts})
    text_ext = (".json", ".csv", ".md", ".txt", ".yaml")
    pending = [r for r in rels if r.endswith(text_ext + (".pt",)) and sha(sa / r) != sha(sb / r)]
    pt_notes: dict[str, str] = {}
    changed = not raw
    while changed:
        changed = False
        for r in list(pending):
            if r.endswith(".pt"):
                ok, why, digests = pt_equal(sa / r, sb / r)
                pt_notes[r] = why
            else:
                ok = mask(read(sa / r), r, False) == mask(read(sb / r), r, False)
                digests = None
            if ok:
                tok = f"<SHA:{r}>"
                SHA_MAP[sha(sa / r)] = SHA_MAP[sha(sb / r)] = tok
                if digests:
                    SHA_MAP[digests[0]] = SHA_MAP[digests[1]] = f"<DIGEST:{r}>"
                pending.remove(r)
                changed = True

    # 1. commands
    tags = sorted({p.stem for p in A.glob("[0-9][0-9]-*.rc")} | {p.stem for p in B.glob("[0-9][0-9]-*.rc")})
    n_rc = n_out = n_all = 0
    report: list[str] = []
    for tag in tags:
        rc_a, rc_b = read(A / f"{tag}.rc").strip(), read(B / f"{tag}.rc").strip()
        same_rc = rc_a == rc_b
        diffs = []
        for ext in ("out", "err"):
            x, y = mask(read(A / f"{tag}.{ext}"), ext, raw), mask(read(B / f"{tag}.{ext}"), ext, raw)
            if x != y:
                diffs += udiff(x, y, f"{tag}.{ext}", nmax, la, lb)
        n_rc += same_rc
        n_out += not diffs
        n_all += same_rc and not diffs
        status = (f"rc {rc_a}" if same_rc else f"RC DIFFERS {rc_a} -> {rc_b}") + ("" if not diffs else ", OUTPUT DIFFERS")
        print(f"{tag:34s} {status}")
        if not same_rc or diffs:
            report.append(f"### {tag}: {status}")
            report += diffs
    print(f"\ncommands: {len(tags)}; equal exit codes: {n_rc}; equal masked stdout+stderr: {n_out}; both: {n_all}")

    # 2. written text files
    fa, fb = A / "files", B / "files"
    list_a = sorted(str(p.relative_to(fa)) for p in fa.rglob("*") if p.is_file() and not p.name.startswith("_"))
    list_b = sorted(str(p.relative_to(fb)) for p in fb.rglob("*") if p.is_file() and not p.name.startswith("_"))
    only_a, only_b = sorted(set(list_a) - set(list_b)), sorted(set(list_b) - set(list_a))
    common = sorted(set(list_a) & set(list_b))
    n_same = n_raw_same = 0
    file_report: list[str] = []
    for rel in common:
        n_raw_same += read(fa / rel) == read(fb / rel)
        x, y = mask(read(fa / rel), rel, raw), mask(read(fb / rel), rel, raw)
        if x == y:
            n_same += 1
        else:
            file_report.append(f"### file {rel}: DIFFERS")
            file_report += udiff(x, y, rel, nmax, la, lb)
    all_a, all_b = read(fa / "_all-files.lst"), read(fb / "_all-files.lst")
    print(f"text files written: {len(list_a)} / {len(list_b)}; only in {la}: {only_a}; only in {lb}: {only_b}; "
          f"byte-identical: {n_raw_same}; equal after masking: {n_same}/{len(common)}; "
          f"list of all files written identical: {all_a == all_b}")

    # 3. binary files
    bins = [r for r in rels if r.endswith((".pt", ".onnx", ".pth"))]
    ident = [r for r in bins if sha(sa / r) == sha(sb / r)]
    sem = [r for r in bins if r not in ident and r.endswith(".pt") and SHA_MAP.get(sha(sa / r))]
    bad = [r for r in bins if r not in ident and r not in sem]
    print(f"binary files (.pt/.onnx/.pth): {len(bins)}; byte-identical: {len(ident)}; "
          f"differing in bytes but equal (tensors exact, meta equal after masking): {len(sem)} {sem}; "
          f"DIFFERENT: {len(bad)} {[(r, pt_notes.get(r, '')) for r in bad]}")
    if report or file_report:
        print("\n" + "\n".join(report + file_report))
    return 0 if not (report or file_report or only_a or only_b or bad) else 1


if __name__ == "__main__":
    sys.exit(main())
