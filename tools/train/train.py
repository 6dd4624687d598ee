#!/usr/bin/env python3
"""Trains kvtier's bundled Llama-architecture model (and the small models of the other
families, --preset / --arch: see models.py) and exports it as GGUF.

Bundled model's architecture (GGUF arch "llama"): token embedding (tied with the output head), N blocks of
  x += attn(RMSNorm(x)); x += ffn(RMSNorm(x)), final RMSNorm, logits = norm(x) @ embd^T.
  Attention: 4 query heads, 2 KV heads (GQA: query head h reads KV head h // 2), head_dim
  128, RoPE theta 10000 applied to adjacent pairs (2i, 2i+1) -- llama.cpp's NORMAL rope mode
  for arch "llama", so the q/k weights are exported as trained, with no permutation.
  FFN: SwiGLU, down(silu(gate(x)) * up(x)). RMSNorm eps 1e-5. No biases.

Training: random windows of --seq tokens from the Austen and Brown token streams
(data/train/*.bin from prepare.py; a row is Austen with probability --p-austen), AdamW, bf16
autocast, linear warm-up then cosine decay over max(time fraction, token fraction), residual
dropout. The run stops at the wall-clock deadline (--minutes) or after --epochs passes over
the training tokens, whichever comes first. The checkpoint kept is the one with the lowest
loss on the in-domain validation split (val.bin); the held-out novel (eval.bin) is only
reported.

Outputs under --out: the GGUF (f16 weights, f32 norms), optionally split into parts of at
most --split-mb MiB (the device returns files of at most 16 MiB), and <name>.train_log.json.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from export import export_gguf  # noqa: E402
from models import PRESETS, Model  # noqa: E402


def load_ids(path):
    return torch.from_numpy(np.fromfile(path, dtype="<u2").astype(np.int64))


def amp(dev):
    """bf16 autocast on the GPU; plain f32 on the CPU (a local check of the export)."""
    if dev == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def window_loss(model, ids, seq, second_half_only=False, batch=None):
    """Mean NLL over non-overlapping windows of seq tokens (the tail shorter than a window is
    dropped). second_half_only scores only the last seq//2 targets of each window, as
    llama-perplexity does."""
    dev = next(model.parameters()).device.type
    batch = batch or max(16, 32768 // seq)
    model.eval()
    n = (len(ids) - 1) // seq
    tot, cnt = 0.0, 0
    for i in range(0, n, batch):
        rows = [ids[j * seq:(j + 1) * seq + 1] for j in range(i, min(n, i + batch))]
        x = torch.stack([r[:-1] for r in rows]).to(dev)
        y = torch.stack([r[1:] for r in rows]).to(dev)
        with amp(dev):
            logits = model(x)
        nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view(y.shape)
        if second_half_only:
            nll = nll[:, seq // 2:]
        tot += nll.sum().item()
        cnt += nll.numel()
    model.train()
    return tot / max(cnt, 1)


@torch.no_grad()
def sample(model, tok, prompt, n, temperature=0.8, top_k=40, seed=1):
    dev = next(model.parameters()).device.type
    model.eval()
    g = torch.Generator(device=dev).manual_seed(seed)
    ids = torch.tensor([tok.encode(prompt)], device=dev)
    for _ in range(n):
        with amp(dev):
            logits = model(ids[:, -model.cfg["ctx"]:])[:, -1].float()
        logits = logits / temperature
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[:, -1:]] = -float("inf")
        nxt = torch.multinomial(F.softmax(logits, -1), 1, generator=g)
        ids = torch.cat([ids, nxt], 1)
    model.train()
    return tok.decode(ids[0].tolist())


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="kvtier-austen-30m", choices=sorted(PRESETS),
                    help="shape and training defaults (models.PRESETS); flags override them")
    ap.add_argument("--data", default="data/train")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--name", default=None, help="file name (default: the preset's)")
    ap.add_argument("--gguf-name", default=None, help="general.name (default: --name, phi3 spelled p3)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock training budget")
    ap.add_argument("--epochs", type=float, default=10.0, help="cap on passes over the training tokens")
    ap.add_argument("--steps", type=int, default=0, help="cap on optimizer steps (0: none)")
    ap.add_argument("--seq", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--min-lr-frac", type=float, default=0.05)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--p-austen", type=float, default=0.35)
    ap.add_argument("--eval-every", type=float, default=30.0, help="seconds between evaluations")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--arch", choices=["llama", "gemma3", "phi3", "qwen35"])
    for f in ("hidden", "layers", "heads", "kv-heads", "head-dim", "ffn", "window", "swa-period",
              "ssm-k-heads", "ssm-v-heads", "conv-k", "full-every", "tied", "sample-tokens"):
        ap.add_argument("--" + f, type=int)
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--rope-theta-swa", type=float)
    ap.add_argument("--add-bos", type=int, default=0)
    ap.add_argument("--split-mb", type=int, default=15)
    ap.add_argument("--tag", default="", help="prefix for output files")
    ap.add_argument("--no-export", action="store_true")
    ap.add_argument("--eval-tokens", type=int, default=0,
                    help="score only the first N tokens of the held-out novel (0: all)")
    ap.add_argument("--skip-final-eval", action="store_true", help="only the llama.cpp-style ppl")
    a = ap.parse_args()
    defaults = dict(arch="llama", window=0, swa_period=6, rope_theta=10000.0,
                    rope_theta_swa=10000.0, ssm_k_heads=0, ssm_v_heads=0, conv_k=4,
                    full_every=4, tied=1, sample_tokens=200, warmup=400, lr=1e-3)
    for k, v in {**defaults, **PRESETS[a.preset]}.items():
        if getattr(a, k, None) is None:  # a flag given on the command line wins
            setattr(a, k, v)
    if a.name is None:
        a.name = a.preset
    if a.gguf_name is None:  # llama.cpp's vocab loader wants "</s>" when the name says phi3
        a.gguf_name = a.name.replace("phi3", "p3").replace("phi-3", "p-3")
    return a


def main():
    a = parse_args()
    t_start = time.time()
    dev = a.device
    torch.manual_seed(a.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    os.makedirs(a.out, exist_ok=True)
    tok = bpe.Tokenizer.load(os.path.join(a.data, "tokenizer.json"))
    cfg = dict(arch=a.arch, vocab=len(tok.tokens), hidden=a.hidden, layers=a.layers,
               heads=a.heads, kv_heads=a.kv_heads, head_dim=a.head_dim, ffn=a.ffn, eps=1e-5,
               rope_theta=a.rope_theta, rope_theta_swa=a.rope_theta_swa,
               rope_dims=a.head_dim // 4 if a.arch == "qwen35" else a.head_dim,
               window=a.window, swa_period=a.swa_period, ssm_state=a.head_dim,
               ssm_k_heads=a.ssm_k_heads, ssm_v_heads=a.ssm_v_heads, conv_k=a.conv_k,
               full_every=a.full_every, tied=bool(a.tied), ctx=a.seq, dropout=a.dropout,
               init_std=a.init_std)
    if a.arch == "qwen35":
        cfg["eps"] = 1e-6
    austen = load_ids(os.path.join(a.data, "austen.bin")).to(dev)
    brown = load_ids(os.path.join(a.data, "brown.bin")).to(dev)
    val = load_ids(os.path.join(a.data, "val.bin"))
    evl = load_ids(os.path.join(a.data, "eval.bin"))
    if a.eval_tokens:
        evl = evl[:a.eval_tokens + 1]
    n_train = len(austen) + len(brown)
    print("torch %s, %s; train tokens %d (austen %d, brown %d), val %d, eval %d"
          % (torch.__version__, torch.cuda.get_device_name() if dev == "cuda" else "cpu",
             n_train, len(austen), len(brown), len(val), len(evl)), flush=True)

    model = Model(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    print("%s: params %d (%.2f M), cfg %s" % (a.name, n_params, n_params / 1e6, json.dumps(cfg)), flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if dev == "cuda" else {}))

    B, T = a.batch, a.seq
    budget_s = a.minutes * 60
    max_tokens = a.epochs * n_train
    offs = torch.arange(T + 1, device=dev)

    def get_batch():
        pick = torch.rand(B, device=dev) < a.p_austen
        sa = torch.randint(0, len(austen) - T - 1, (B,), device=dev)
        sb = torch.randint(0, len(brown) - T - 1, (B,), device=dev)
        xa = austen[sa[:, None] + offs]
        xb = brown[sb[:, None] + offs]
        x = torch.where(pick[:, None], xa, xb)
        return x[:, :-1], x[:, 1:]

    log = {"cfg": cfg, "args": vars(a), "params": n_params, "evals": []}
    best = (float("inf"), None, 0)
    step, tokens = 0, 0
    t0 = time.time()
    next_eval = t0 + a.eval_every
    loss_ema = None
    while a.steps == 0 or step < a.steps:
        elapsed = time.time() - t0
        progress = max(elapsed / budget_s, tokens / max_tokens, step / a.steps if a.steps else 0)
        if progress >= 1.0:
            break
        if step < a.warmup:
            lr = a.lr * (step + 1) / a.warmup
        else:
            lr = a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch()
        with amp(dev):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens += B * T
        if step % 20 == 0 or dev == "cpu":
            lv = loss.item()
            loss_ema = lv if loss_ema is None else 0.9 * loss_ema + 0.1 * lv
        if time.time() >= next_eval or (step == 5 and not a.steps):
            vl = window_loss(model, val, T)
            el = window_loss(model, evl, T)
            now = time.time() - t0
            e = dict(step=step, tokens=tokens, epochs=tokens / n_train, s=round(now, 1),
                     lr=lr, train=loss_ema, val=vl, eval=el)
            log["evals"].append(e)
            print("%s step %6d  tok %6.1fM  ep %5.2f  %5.0fs  lr %.2e  train %.4f  val %.4f  eval(%s) %.4f  %.0f tok/s"
                  % (a.name, step, tokens / 1e6, tokens / n_train, now, lr, loss_ema or float("nan"), vl,
                     "persuasion", el, tokens / max(now, 1e-9)), flush=True)
            if vl < best[0]:
                best = (vl, {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
            next_eval = time.time() + a.eval_every

    train_s = time.time() - t0
    vl = window_loss(model, val, T)
    if vl < best[0]:
        best = (vl, None, step)
    elif best[1] is not None:
        model.load_state_dict(best[1])
        print("restored checkpoint of step %d (val %.4f < final %.4f)" % (best[2], best[0], vl))
    res = dict(steps=step, tokens=tokens, epochs=tokens / n_train, train_seconds=round(train_s, 1),
               chosen_step=best[2], train_loss_ema=loss_ema,
               eval_ppl_llamacpp_style_512=math.exp(window_loss(model, evl, 512, True)))
    if not a.skip_final_eval:
        res.update(val_loss=window_loss(model, val, T),
                   eval_loss_seq=window_loss(model, evl, T),
                   eval_loss_512=window_loss(model, evl, 512),
                   eval_ppl_llamacpp_style_2048=math.exp(window_loss(model, evl, 2048, True)))
        # train loss without dropout on a fixed sample of the training streams
        tr_sample = torch.cat([austen[:400000].cpu(), brown[:400000].cpu()])
        res["train_loss_full"] = window_loss(model, tr_sample, T)
        res["eval_ppl_seq"] = math.exp(res["eval_loss_seq"])
    log["result"] = res
    print(a.name + " " + json.dumps(res, indent=1), flush=True)
    prompts = ["It is a truth universally acknowledged, that", "Chapter 1\n\n\n",
               "\"My dear Elizabeth,\" said her father,"]
    if a.sample_tokens:
        log["samples"] = [sample(model, tok, p, a.sample_tokens, seed=i + 1)
                          for i, p in enumerate(prompts)]
        for s in log["samples"]:
            print("---\n" + s, flush=True)

    path = os.path.join(a.out, a.tag + a.name + ".gguf")
    size = 0 if a.no_export else export_gguf(model, tok, cfg, path, a.gguf_name,
                                             bool(a.add_bos))
    if size:
        print("wrote %s (%d bytes)" % (path, size), flush=True)
    if a.split_mb and size > a.split_mb << 20:
        with open(path, "rb") as f:
            k = 0
            while True:
                chunk = f.read(a.split_mb << 20)
                if not chunk:
                    break
                with open("%s.part%d" % (path, k), "wb") as g2:
                    g2.write(chunk)
                k += 1
        os.remove(path)
        print("split into %d parts" % k, flush=True)
    log["total_seconds"] = round(time.time() - t_start, 1)
    with open(os.path.join(a.out, a.tag + a.name + ".train_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
