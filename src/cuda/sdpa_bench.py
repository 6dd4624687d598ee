#!/usr/bin/env python3
"""PyTorch SDPA decode baseline for kvtier_cuda_bench (issue 35): one query token, 32 q / 8 KV
heads, head_dim 128, contiguous bf16 K/V, enable_gqa; median of --iters calls timed with CUDA
events, L2 flushed (256 MiB memset) before each, as the C++ benchmark does. Prints
"context,batch,ms" lines (the benchmark's --sdpa input) and a note on stderr.
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="32768,131072")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--clean-flush", action="store_true",
                    help="read the flush buffer back after filling it (L2 left with clean lines)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", file=sys.stderr)
    for ctx in map(int, a.contexts.split(",")):
        for b in map(int, a.batches.split(",")):
            q = torch.randn(b, a.heads, 1, a.head_dim, dtype=torch.bfloat16, device=dev)
            k = torch.randn(b, a.kv_heads, ctx, a.head_dim, dtype=torch.bfloat16, device=dev)
            v = torch.randn(b, a.kv_heads, ctx, a.head_dim, dtype=torch.bfloat16, device=dev)
            fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            for _ in range(3):
                fn()
            times = []
            for i in range(a.iters):
                flush.fill_(i & 0xFF)
                if a.clean_flush:
                    flush.view(torch.int64).max()  # reads it back (no write)
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1))
            times.sort()
            ms = times[len(times) // 2]
            gbs = 2 * b * a.kv_heads * ctx * a.head_dim * 2 / (ms * 1e-3) / 1e9
            print(f"{ctx},{b},{ms:.4f}", flush=True)
            print(f"# sdpa bf16 ctx {ctx} batch {b}: {ms:.3f} ms, {gbs:.0f} GB/s", file=sys.stderr)
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
