"""A plain PyTorch training loop for checking the step phases tierscope names from outside.

A DataLoader over a synthetic dataset (its items built on the CPU: the data-loading phase), a
stack of Linear+GELU blocks (forward), `loss.backward()` (backward) and `torch.optim.AdamW`
(optimizer), the usual `model(x)` / `loss.backward()` / `opt.step()` / `opt.zero_grad()` shape
with nothing tierscope-specific in it. Prints one line per step: `step N rank R at T took S`,
then the time each phase took in the loop's own clock: `phases data D forward F backward B
optimizer O` (seconds, with torch.cuda.synchronize() after each phase on a GPU so the time is
the phase's and not the next one's).
"""
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n, dim, work):
        self.n, self.dim, self.work = n, dim, work

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.dim, generator=g)
        for _ in range(self.work):  # a transform's CPU time
            x = torch.tanh(x * 1.01)
        return x, x.sum().unsqueeze(0)


class Net(torch.nn.Module):
    def __init__(self, dim, depth):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.GELU()) for _ in range(depth))
        self.head = torch.nn.Linear(dim, 1)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=24)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--item-work", type=int, default=40)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = Net(a.dim, a.depth).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = DataLoader(Synthetic(a.steps * a.batch, a.dim, a.item_work), batch_size=a.batch, num_workers=0)
    it = iter(data)
    for step in range(1, a.steps + 1):
        t0 = time.time()
        x, y = next(it)
        x, y = x.to(dev), y.to(dev)
        sync()
        t1 = time.time()
        loss = torch.nn.functional.mse_loss(model(x), y)
        sync()
        t2 = time.time()
        loss.backward()
        sync()
        t3 = time.time()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        t4 = time.time()
        print(f"step {step} rank {rank} at {t4:.3f} took {t4 - t0:.3f} "
              f"phases data {t1 - t0:.4f} forward {t2 - t1:.4f} backward {t3 - t2:.4f} optimizer {t4 - t3:.4f}", flush=True)


if __name__ == "__main__":
    main()
