"""A ZeRO-Offload-style training loop for watching tierscope on a real GPU node.

bf16 parameters live on the GPU; fp32 master weights and Adam state live in pinned host memory;
gradients are copied to the host and the Adam step runs on the CPU with torch._foreach_* (whose
temporaries are fresh allocations every step: the fault-heavy pattern real offload jobs show).
Run under torchrun; every rank prints one line per step: `step N rank R at T took S cpu C`, C the
process's CPU time in the step (all its threads; a kernel program's run on its behalf included).
"""
import argparse
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--params-m", type=int, default=128, help="parameters per rank, millions")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default, one per core)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device("cuda", 0)
    n = a.params_m * 1_000_000
    chunks = [n // 8] * 8
    gpu_params = [torch.randn(c, device=dev, dtype=torch.bfloat16) for c in chunks]
    master = [p.float().cpu().pin_memory() for p in gpu_params]
    exp_avg = [torch.zeros_like(m).pin_memory() for m in master]
    exp_avg_sq = [torch.zeros_like(m).pin_memory() for m in master]
    host_grads = [torch.empty_like(m).pin_memory() for m in master]
    lr, b1, b2, eps = 1e-4, 0.9, 0.999, 1e-8
    for step in range(1, a.steps + 1):
        t0, c0 = time.time(), time.process_time()
        # "backward": gradients appear on the GPU
        grads = [torch.randn_like(p) for p in gpu_params]
        for hg, g in zip(host_grads, grads):
            hg.copy_(g.float(), non_blocking=True)
        torch.cuda.synchronize()
        # CPU Adam: fresh temporaries every step
        torch._foreach_mul_(exp_avg, b1)
        torch._foreach_add_(exp_avg, host_grads, alpha=1 - b1)
        torch._foreach_mul_(exp_avg_sq, b2)
        torch._foreach_addcmul_(exp_avg_sq, host_grads, host_grads, value=1 - b2)
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(exp_avg, denom)
        torch._foreach_add_(master, update, alpha=-lr)
        for p, m in zip(gpu_params, master):
            p.copy_(m, non_blocking=True)
        torch.cuda.synchronize()
        t1, c1 = time.time(), time.process_time()
        print(f"step {step} rank {rank} at {t1:.3f} took {t1 - t0:.3f} cpu {c1 - c0:.4f}", flush=True)


if __name__ == "__main__":
    main()
