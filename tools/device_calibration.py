"""Measure one GPU's ceilings and a few small training steps, for the speed and memory models.

    python tools/device_calibration.py --out results.json [--quick]

Runs on any CUDA machine with PyTorch (no downloads: every model is randomly initialised).
Records, with the date, the GPU's name and the software versions:

- dense matmul TFLOP/s for bf16 and fp8 (torch._scaled_mm, e4m3, per-tensor scales) on square
  and training-shaped GEMMs (tokens x hidden x hidden-ish);
- causal attention TFLOP/s through scaled_dot_product_attention (FlashAttention backend),
  forward and forward+backward, head dim 128, at several sequence lengths;
- device-to-device copy bandwidth;
- tokens/s and torch.cuda.max_memory_allocated of small Llama-shaped decoders (RMSNorm, rotary,
  grouped-query attention, SwiGLU), trained for a few steps: full fine-tuning (bf16 autocast over
  fp32 weights, AdamW) and LoRA (frozen bf16 base), with and without activation checkpointing.

`--quick` shrinks every size so the script can be checked on a CPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn, warmup: int = 3, iters: int = 10) -> float:
    """Mean seconds per call after warm-up."""
    for _ in range(warmup):
        fn()
    _sync()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    _sync()
    return (time.perf_counter() - t0) / iters


def matmul_rates(dev: str, quick: bool) -> list[dict]:
    shapes = [(8192, 8192, 8192), (16384, 8192, 8192), (4096, 4096, 4096), (8192, 4096, 14336),
              (8192, 14336, 4096), (16384, 8192, 28672), (4096, 2048, 8192), (2048, 4096, 4096),
              (1024, 4096, 4096), (512, 4096, 4096)]
    if quick:
        shapes = [(128, 128, 128), (256, 128, 256)]
    out = []
    for m, k, n in shapes:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        s = timed(lambda: a @ b)
        out.append({"dtype": "bf16", "m": m, "k": k, "n": n, "seconds": s, "tflops": 2 * m * k * n / s / 1e12})
        if dev == "cuda" and hasattr(torch, "_scaled_mm"):
            try:
                a8 = a.to(torch.float8_e4m3fn)
                b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major second operand
                one = torch.tensor(1.0, device=dev)
                s8 = timed(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
                out.append({"dtype": "fp8-e4m3", "m": m, "k": k, "n": n, "seconds": s8,
                            "tflops": 2 * m * k * n / s8 / 1e12})
            except Exception as exc:  # noqa: BLE001 - record why fp8 did not run
                out.append({"dtype": "fp8-e4m3", "m": m, "k": k, "n": n, "error": repr(exc)[:300]})
    return out


def attention_rates(dev: str, quick: bool) -> list[dict]:
    out = []
    seqs = [1024, 2048, 4096, 8192, 16384, 32768] if not quick else [64]
    heads, d = (32, 128) if not quick else (2, 16)
    tokens = 32768 if not quick else 128
    for s in seqs:
        b = max(1, tokens // s)
        q, k, v = (torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        # causal: QK^T and AV over s/2 keys on average: 2 matmuls x 2 FLOPs x s^2/2 x d per head
        fwd_flops = 2 * 2 * b * heads * s * s * d / 2
        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), iters=5)
        grad = torch.randn(b, heads, s, d, device=dev, dtype=torch.bfloat16)

        def step():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o.backward(grad)

        both = timed(step, iters=5)
        # backward = 2.5 x forward's matmul FLOPs (FlashAttention-2 recomputes the scores)
        out.append({"seq": s, "batch": b, "heads": heads, "head_dim": d, "fwd_seconds": fwd,
                    "fwd_tflops": fwd_flops / fwd / 1e12, "fwd_bwd_seconds": both,
                    "fwd_bwd_tflops": 3.5 * fwd_flops / both / 1e12})
    return out


def copy_bandwidth(dev: str, quick: bool) -> dict:
    n = (2 << 30) if not quick else (1 << 20)
    src = torch.empty(n, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    s = timed(lambda: dst.copy_(src), iters=10)
    return {"bytes": n, "seconds": s, "read_plus_write_gb_s": 2 * n / s / 1e9}


# --- a small Llama-shaped decoder ------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * self.weight


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.a = nn.Parameter(torch.randn(rank, base.in_features, device=base.weight.device) / math.sqrt(base.in_features))
        self.b = nn.Parameter(torch.zeros(base.out_features, rank, device=base.weight.device))
        self.scale = 2.0

    def forward(self, x):
        return self.base(x) + (x @ self.a.t().to(x.dtype)) @ self.b.t().to(x.dtype) * self.scale


def rotary(x, cos, sin):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, h: int, heads: int, kv: int, inter: int):
        super().__init__()
        self.heads, self.kv, self.hd = heads, kv, h // heads
        self.n1, self.n2 = RMSNorm(h), RMSNorm(h)
        self.q = nn.Linear(h, h, bias=False)
        self.k = nn.Linear(h, kv * self.hd, bias=False)
        self.v = nn.Linear(h, kv * self.hd, bias=False)
        self.o = nn.Linear(h, h, bias=False)
        self.gate = nn.Linear(h, inter, bias=False)
        self.up = nn.Linear(h, inter, bias=False)
        self.down = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin):
        b, s, h = x.shape
        y = self.n1(x)
        q = self.q(y).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv, self.hd).transpose(1, 2)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, h))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Decoder(nn.Module):
    def __init__(self, layers, h, heads, kv, inter, vocab, checkpointing: bool):
        super().__init__()
        self.emb = nn.Embedding(vocab, h)
        self.blocks = nn.ModuleList(Block(h, heads, kv, inter) for _ in range(layers))
        self.norm = RMSNorm(h)
        self.head = nn.Linear(h, vocab, bias=False)
        self.checkpointing = checkpointing
        self.hd = h // heads

    def forward(self, ids):
        s = ids.shape[1]
        pos = torch.arange(s, device=ids.device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=ids.device, dtype=torch.float32) / self.hd))
        ang = torch.outer(pos, inv)
        x = self.emb(ids)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        for blk in self.blocks:
            x = checkpoint(blk, x, cos, sin, use_reentrant=False) if self.checkpointing and self.training else blk(x, cos, sin)
        return self.head(self.norm(x))


def params_of(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def train_case(dev: str, name: str, shape: dict, mode: str, seq: int, mb: int, checkpointing: bool,
               steps: int, compiled: bool = False) -> dict:
    torch.manual_seed(0)
    rec = {"case": name, "mode": mode, "seq_len": seq, "micro_batch": mb, "grad_checkpointing": checkpointing,
           "compile": compiled, **shape}
    try:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        model = Decoder(checkpointing=checkpointing, **shape).to(dev)
        rec["params"] = params_of(model)
        if mode == "lora":
            model = model.to(torch.bfloat16)
            for p in model.parameters():
                p.requires_grad_(False)
            for blk in model.blocks:
                for attr in ("q", "k", "v", "o", "gate", "up", "down"):
                    setattr(blk, attr, LoRALinear(getattr(blk, attr), 16))
            trainable = [p for p in model.parameters() if p.requires_grad]
            for p in trainable:
                p.data = p.data.float()
            autocast = False
        else:
            trainable = list(model.parameters())
            autocast = True
        rec["trainable_params"] = sum(p.numel() for p in trainable)
        if compiled:
            for blk in model.blocks:  # per block, as torchtitan compiles (fullgraph per TransformerBlock)
                blk.compile()
        opt = torch.optim.AdamW(trainable, lr=1e-5, fused=dev == "cuda")
        ids = torch.randint(0, shape["vocab"], (mb, seq + 1), device=dev)
        model.train()

        def step():
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=autocast):
                logits = model(ids[:, :-1])
                loss = F.cross_entropy(logits.float().view(-1, shape["vocab"]), ids[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        secs = timed(step, warmup=2, iters=steps)
        rec["seconds_per_step"] = secs
        rec["tokens_per_second"] = mb * seq / secs
        if torch.cuda.is_available():
            rec["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 1e9
            rec["max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / 1e9
    except torch.OutOfMemoryError as exc:
        rec["error"] = "out of memory: " + str(exc)[:200]
    except Exception as exc:  # noqa: BLE001 - keep the other cases
        rec["error"] = repr(exc)[:300]
    return rec


SHAPES = {
    # Llama-3.2-1B's shape (hidden 2048, 16 layers, 32 heads, 8 KV heads, MLP 8192, vocab 128256)
    "llama-1b": dict(layers=16, h=2048, heads=32, kv=8, inter=8192, vocab=128256),
    # Llama-2-7B's block shape at 8 layers (~3.5B with its 32000 vocab)
    "llama2-7b-8l": dict(layers=8, h=4096, heads=32, kv=32, inter=11008, vocab=32000),
    # Llama-3-8B's shape at 8 of its 32 layers (hidden 4096, 8 KV heads, MLP 14336, vocab 128256)
    "llama3-8b-8l": dict(layers=8, h=4096, heads=32, kv=8, inter=14336, vocab=128256),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the torch.compile pairs (each case eager and compiled)")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
              "device": torch.cuda.get_device_name() if dev == "cuda" else platform.processor() or "cpu",
              "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version()}
    if dev == "cuda":
        props = torch.cuda.get_device_properties(0)
        result["multiprocessors"] = props.multi_processor_count
        result["memory_gb"] = props.total_memory / 1e9

    def save():
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    if args.compile_only:
        pairs = []
        shapes = {k: SHAPES[k] for k in ("llama-1b", "llama3-8b-8l")} if not args.quick else \
            {"tiny": dict(layers=2, h=64, heads=4, kv=2, inter=128, vocab=256)}
        for name, shape in shapes.items():
            for mode in ("full", "lora"):
                seq, mb = (2048, 2) if not args.quick else (32, 1)
                for compiled in (False, True):
                    pairs.append(train_case(dev, name, shape, mode, seq, mb, True, steps=6 if not args.quick else 1,
                                            compiled=compiled))
                    result["training"] = pairs
                    save()
                    print(json.dumps(pairs[-1]), flush=True)
        return
    result["copy"] = copy_bandwidth(dev, args.quick)
    save()
    result["matmul"] = matmul_rates(dev, args.quick)
    save()
    result["attention"] = attention_rates(dev, args.quick)
    save()
    shapes = SHAPES if not args.quick else {"tiny": dict(layers=2, h=64, heads=4, kv=2, inter=128, vocab=256)}
    cases = []
    for name, shape in shapes.items():
        for mode in ("full", "lora"):
            for seq, mb in ((2048, 1), (2048, 4), (4096, 2)) if not args.quick else ((32, 1),):
                for gc in (True, False):
                    if name != "llama-1b" and (mb == 4 or (not gc and mode == "full")):
                        continue  # keep the bigger shapes to the cases that fit and matter
                    cases.append(train_case(dev, name, shape, mode, seq, mb, gc, steps=4 if not args.quick else 1))
                    result["training"] = cases
                    save()
                    print(json.dumps(cases[-1]), flush=True)
    save()


if __name__ == "__main__":
    main()
