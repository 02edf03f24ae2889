"""`transformer-explorer export` at scale: a 1024-token trace of the GPT-2-small-shaped model.

Prints the forward pass, the export (trace.npz streamed into a directory swapped in whole), the
bytes written and the time this disk takes to write that many bytes (a plain file of the same
size), and the peak resident memory of the export over the memory before it, against the Trace's
size. Targets: export <= 3 x forward + the time to write the bytes; peak memory < 2 x the Trace.

    python benchmarks/export.py [--tokens 1024] [--threads 2] [--per-head]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from _models import gpt2_small_loaded  # noqa: E402


def status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--per-head", action="store_true", help="also the per-head .npy and .csv files")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from explorer.core.export import export_directory, write_attention_files, write_trace_npz

    loaded = gpt2_small_loaded()
    ids = torch.randint(0, 50257, (args.tokens,), generator=torch.Generator().manual_seed(0)).tolist()
    loaded.trace_ids(ids[:64])  # warm-up
    t0 = time.perf_counter()
    trace = loaded.trace_ids(ids)
    forward = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(dir=os.environ.get("EXPORT_DIR")) as tmp:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current size
        base = status_mb("VmRSS")
        t0 = time.perf_counter()
        with export_directory(Path(tmp) / "export") as out:
            write_trace_npz(trace, out / "trace.npz")
            if args.per_head:
                write_attention_files(trace, out / "attention")
        export = time.perf_counter() - t0
        peak = status_mb("VmHWM") - base
        written = sum(p.stat().st_size for p in (Path(tmp) / "export").rglob("*") if p.is_file())
        block = os.urandom(16 * 2**20)
        t0 = time.perf_counter()
        with open(Path(tmp) / "raw", "wb") as f:
            for _ in range(max(1, written // len(block))):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        raw = time.perf_counter() - t0
    trace_mb = trace.nbytes / 2**20
    print(f"GPT-2 small shape, {args.tokens} tokens, CPU, {torch.get_num_threads()} threads"
          f"{', with per-head files' if args.per_head else ''}")
    print(f"  forward pass (full capture): {forward:7.2f} s")
    print(f"  export:                      {export:7.2f} s, {written / 2**20:.0f} MB written "
          f"(this disk writes that many bytes in {raw:.2f} s)")
    target = 3 * forward + raw
    print(f"  target export <= 3 x forward + write time = {target:.2f} s: {'ok' if export <= target else 'MISSED'}")
    print(f"  peak memory during the export: +{peak:.0f} MB over before it; the Trace stores {trace_mb:.0f} MB: "
          f"{peak / trace_mb:.2f} x (target < 2 x: {'ok' if peak < 2 * trace_mb else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
