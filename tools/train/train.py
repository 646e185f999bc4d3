#!/usr/bin/env python3
"""Trains strata's default model (Qwen3_5MoeForCausalLM + one MTP layer) on the tokenised
corpus, evaluates it on the held-out text and exports models/default (see export.py).

Runs on the GPU machine (torch, transformers 5.17, safetensors, numpy). Loss = next-token CE
+ mtp_lambda * MTP CE (token after next) + aux_coef * router load balance; bf16 autocast with
fp32 master weights, AdamW, linear warm-up then cosine decay over the wall-clock budget,
packed sequences with <|endoftext|> between documents.

usage: python3 tools/train/train.py --work WORK --out DIR --stop-at EPOCH_SECONDS
           [--ckpt PATH] [--resume PATH] [--batch 32] [--seq 1024] [--lr 1.5e-3]
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import default_model as dm  # noqa: E402
import export  # noqa: E402
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as hfm  # noqa: E402

T_START = time.time()


def log(*a):
    print(f"[train {time.time() - T_START:6.1f}s]", *a, flush=True)


class RouterBalance:
    """Collects every router's (logits, top-k ids) during a training forward and returns the
    Switch-style load-balancing loss E * sum_i f_i P_i (f normalised to sum 1; 1 = balanced)."""

    def __init__(self, modules):
        self.active = False
        self.items = []
        for m in modules:
            if isinstance(m, hfm.Qwen3_5MoeTopKRouter):
                m.register_forward_hook(self.hook)

    def hook(self, module, inputs, output):
        if self.active:
            self.items.append((output[0], output[2], module.num_experts))

    def loss(self):
        total = 0.0
        for logits, idx, e in self.items:
            probs = torch.softmax(logits.float(), dim=-1).mean(0)
            counts = torch.bincount(idx.reshape(-1), minlength=e).float()
            total = total + e * (counts / counts.sum() * probs).sum()
        n = len(self.items)
        self.items = []
        return total / max(1, n)


class Windows:
    """Non-overlapping windows of seq+1 tokens in a shuffled order per epoch (on the GPU)."""

    def __init__(self, ids, seq, device, seed):
        self.ids = torch.from_numpy(ids.astype(np.int64)).to(device)
        self.seq = seq
        self.starts = torch.arange(0, ids.size - seq - 1, seq, device=device)
        self.offsets = torch.arange(seq + 1, device=device)
        self.seed = seed
        self.epoch, self.cursor = 0, 0
        self._perm()

    def _perm(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        self.perm = torch.randperm(self.starts.numel(), generator=g).to(self.starts.device)

    def next(self, batch):
        if self.cursor + batch > self.perm.numel():
            self.epoch += 1
            self.cursor = 0
            self._perm()
        idx = self.starts[self.perm[self.cursor:self.cursor + batch]]
        self.cursor += batch
        return self.ids[idx[:, None] + self.offsets]


def all_windows(ids, seq):
    starts = list(range(0, ids.size - seq - 1, seq))
    return [ids[s:s + seq + 1].astype(np.int64) for s in starts]


@torch.no_grad()
def evaluate(model, mtp, windows, batch, device, max_windows=None):
    was_training = model.training
    model.eval()
    mtp.eval()
    ws = windows[:max_windows] if max_windows else windows
    s = dict(nll=0.0, n=0, top1=0, mtp_nll=0.0, mtp_n=0, mtp_top1=0, agree=0)
    for k in range(0, len(ws), batch):
        w = torch.from_numpy(np.stack(ws[k:k + batch])).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, mtpl, _ = dm.forward_all(model, mtp, w)
        main, mtpl = main.float(), mtpl.float()
        s["nll"] += F.cross_entropy(main.flatten(0, 1), w[:, 1:].flatten(), reduction="sum").item()
        s["n"] += w[:, 1:].numel()
        main_arg = main.argmax(-1)
        s["top1"] += (main_arg == w[:, 1:]).sum().item()
        s["mtp_nll"] += F.cross_entropy(mtpl.flatten(0, 1), w[:, 2:].flatten(),
                                        reduction="sum").item()
        s["mtp_n"] += w[:, 2:].numel()
        mtp_arg = mtpl.argmax(-1)
        s["mtp_top1"] += (mtp_arg == w[:, 2:]).sum().item()
        # speculative-decoding proxy: does the draft for t+2 equal the main model's own argmax
        # at position t+1?
        s["agree"] += (mtp_arg == main_arg[:, 1:]).sum().item()
    if was_training:
        model.train()
        mtp.train()
    return {
        "tokens": s["n"],
        "ppl": math.exp(s["nll"] / s["n"]),
        "loss": s["nll"] / s["n"],
        "top1": s["top1"] / s["n"],
        "mtp_ppl": math.exp(s["mtp_nll"] / s["mtp_n"]),
        "mtp_top1": s["mtp_top1"] / s["mtp_n"],
        "mtp_accept_proxy": s["agree"] / s["mtp_n"],
    }


def unigram_ppl(train_ids, windows, vocab):
    counts = np.bincount(train_ids.astype(np.int64), minlength=vocab).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    labels = np.concatenate([w[1:] for w in windows])
    return float(np.exp(-logp[labels].mean()))


def lr_at(args, step, progress):
    warm = min(1.0, (step + 1) / args.warmup)
    cos = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return args.lr * warm * (args.min_lr_frac + (1.0 - args.min_lr_frac) * cos)


def save_checkpoint(path, model, mtp, opt, state):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(),
                "opt": opt.state_dict(), **state}, tmp)
    os.replace(tmp, path)


def probe_step(model, mtp, routers, vocab, device):
    """One small forward+backward with the current implementations (raises on failure)."""
    w = torch.randint(0, vocab, (2, 65), device=device)
    routers.active = True
    with torch.autocast("cuda", dtype=torch.bfloat16):
        main, mtpl, _ = dm.forward_all(model, mtp, w)
        loss = main.float().mean() + mtpl.float().mean()
    loss = loss + routers.loss()
    routers.active = False
    loss.backward()
    model.zero_grad(set_to_none=True)
    mtp.zero_grad(set_to_none=True)
    torch.cuda.synchronize()


@torch.no_grad()
def causality_check(model, mtp, vocab, device):
    """Training passes attention_mask=None to the MTP layer (sdpa's is_causal). Checks, in
    fp32: the attention function is causal with mask None, and neither the main model nor the
    MTP head lets later tokens change earlier outputs (relative to the effect of an earlier
    token)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    model.eval()
    mtp.eval()
    try:
        cfg = model.config
        attn = mtp.layers[0].self_attn
        fn = hfm.ALL_ATTENTION_FUNCTIONS.get_interface(cfg._attn_implementation,
                                                       hfm.eager_attention_forward)
        hq, hk, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = torch.randn(1, hq, 32, d, device=device) * 2
        k = torch.randn(1, hk, 32, d, device=device) * 2
        v = torch.randn(1, hk, 32, d, device=device)
        full = fn(attn, q, k, v, None, scaling=attn.scaling, dropout=0.0)[0]
        part = fn(attn, q[:, :, :16], k[:, :, :16], v[:, :, :16], None, scaling=attn.scaling,
                  dropout=0.0)[0]
        d_attn = (full[:, :16] - part).abs().max().item()
        w = torch.randint(0, vocab, (1, 33), device=device)
        later, early = w.clone(), w.clone()
        later[0, 20:] = torch.randint(0, vocab, (13,), device=device)
        early[0, 3] = (w[0, 3] + 1) % vocab
        a_main, a_mtp, _ = dm.forward_all(model, mtp, w)
        b_main, b_mtp, _ = dm.forward_all(model, mtp, later)
        c_main, c_mtp, _ = dm.forward_all(model, mtp, early)
        # main position p sees w[0..p]; MTP position t sees w[0..t+1]
        leak_main = (a_main[:, :20] - b_main[:, :20]).abs().max().item()
        leak_mtp = (a_mtp[:, :19] - b_mtp[:, :19]).abs().max().item()
        eff_main = (a_main[:, 3:20] - c_main[:, 3:20]).abs().max().item()
        eff_mtp = (a_mtp[:, 2:19] - c_mtp[:, 2:19]).abs().max().item()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        model.train()
        mtp.train()
    log(f"causality check (fp32): attention(mask None) max|d| {d_attn:.1e}; later-token leak "
        f"main {leak_main:.1e} (earlier-token effect {eff_main:.1e}), mtp {leak_mtp:.1e} "
        f"(effect {eff_mtp:.1e})")
    if d_attn > 1e-4 or leak_main > 1e-2 * eff_main or leak_mtp > 1e-2 * eff_mtp:
        raise SystemExit("causality check failed: outputs depend on later tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True, help="train_tokenizer.py's work folder")
    ap.add_argument("--out", required=True, help="export folder (becomes models/default)")
    ap.add_argument("--stop-at", type=float, required=True,
                    help="wall-clock time (epoch seconds) at which training stops")
    ap.add_argument("--train-seconds", type=float, default=1e9,
                    help="also stop after this many seconds of training in this run (0 with "
                         "--resume: only evaluate and export the checkpoint)")
    ap.add_argument("--schedule-seconds", type=float, default=0,
                    help="length of the cosine schedule over all runs (0: this run's budget "
                         "plus what a resumed checkpoint had done)")
    ap.add_argument("--ckpt", default="", help="checkpoint to write periodically")
    ap.add_argument("--ckpt-every", type=float, default=120.0)
    ap.add_argument("--resume", default="", help="checkpoint to resume from")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--mtp-lambda", type=float, default=0.3)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--init-std", type=float, default=0.02)
    ap.add_argument("--eval-every", type=float, default=60.0)
    ap.add_argument("--val-tokens", type=int, default=131072,
                    help="tokens at the end of the training stream kept out of training, to "
                         "pick the best weights (the held-out split is only reported)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    import transformers
    log(f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"cuda {torch.cuda.is_available()} {torch.cuda.get_device_name(0)}")
    device = torch.device("cuda")
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    stats = json.load(open(os.path.join(args.work, "tokenizer_stats.json")))
    train_ids = np.load(os.path.join(args.work, "train_ids.npy"))
    held_ids = np.load(os.path.join(args.work, "heldout_ids.npy"))
    vocab = int(math.ceil(stats["vocab_size"] / 64) * 64)
    eos = stats["eos_token_id"]
    im_end = stats["added_tokens"]["<|im_end|>"]
    log(f"tokens: train {train_ids.size}, held-out {held_ids.size}; vocab {stats['vocab_size']}"
        f" (model {vocab}), eos {eos}")

    cfg = dm.make_config(vocab, eos)
    cfg._attn_implementation = "sdpa"
    model = hfm.Qwen3_5MoeForCausalLM(cfg)
    cfg = model.config  # the MTP layer shares the model's config (implementations included)
    mtp = dm.MtpHead(cfg)
    if cfg.tie_word_embeddings and model.lm_head.weight is not model.model.embed_tokens.weight:
        model.lm_head.weight = model.model.embed_tokens.weight
    dm.init_weights(model.named_parameters(), args.init_std, cfg.num_hidden_layers)
    dm.init_weights(mtp.named_parameters(), args.init_std, cfg.num_hidden_layers)
    model.to(device).train()
    mtp.to(device).train()
    params = dm.param_report(model, mtp)
    log("parameters:", json.dumps(params))
    routers = RouterBalance(list(model.modules()) + list(mtp.modules()))

    impl = dm.set_implementations(model, experts="grouped_mm")
    try:
        probe_step(model, mtp, routers, vocab, device)
    except Exception as e:  # noqa: BLE001
        log(f"experts implementation grouped_mm failed ({e!r}); using eager")
        impl = dm.set_implementations(model, experts="eager")
        probe_step(model, mtp, routers, vocab, device)
    log(f"implementations (attention, experts): {impl}")
    causality_check(model, mtp, vocab, device)

    decay, no_decay = [], []
    seen = set()
    for mod in (model, mtp):
        for n, p in mod.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            (decay if p.ndim >= 2 and "embed_tokens" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    all_params = list(seen_params(model, mtp))
    val_windows = all_windows(train_ids[-args.val_tokens:], args.seq)
    fit_ids = train_ids[:-args.val_tokens]
    data = Windows(fit_ids, args.seq, device, args.seed)
    step, tokens_seen, prev_seconds = 0, 0, 0.0
    if args.resume:
        ck = torch.load(args.resume, map_location=device, weights_only=False)
        if ck["vocab"] != vocab:
            raise SystemExit(f"--resume: checkpoint vocab {ck['vocab']} != {vocab}")
        model.load_state_dict(ck["model"])
        mtp.load_state_dict(ck["mtp"])
        opt.load_state_dict(ck["opt"])
        step, tokens_seen, prev_seconds = ck["step"], ck["tokens"], ck["train_seconds"]
        data.epoch, data.cursor = ck["epoch"], ck["cursor"]
        data._perm()
        log(f"resumed {args.resume}: step {step}, {tokens_seen} tokens, {prev_seconds:.0f}s")

    held_windows = all_windows(held_ids, args.seq)
    t_train = time.time()
    budget = max(0.0, min(args.stop_at - t_train, args.train_seconds))
    schedule = args.schedule_seconds or max(1.0, prev_seconds + budget)
    log(f"training for {budget:.0f}s (schedule {schedule:.0f}s), batch {args.batch} x "
        f"{args.seq} = {args.batch * args.seq} tokens/step, {len(val_windows)} validation and "
        f"{len(held_windows)} held-out windows")

    def state():
        return {"step": step, "tokens": tokens_seen, "vocab": vocab, "eos": eos,
                "train_seconds": prev_seconds + time.time() - t_train, "epoch": data.epoch,
                "cursor": data.cursor, "config": cfg.to_dict(), "args": vars(args)}

    last_log, last_ckpt, last_eval = time.time(), time.time(), time.time()
    log_tokens, history = 0, []
    best = {"val_loss": math.inf}
    while True:
        now = time.time()
        if now - t_train >= budget:
            break
        progress = (prev_seconds + now - t_train) / schedule
        lr = lr_at(args, step, progress)
        for g in opt.param_groups:
            g["lr"] = lr
        w = data.next(args.batch)
        routers.active = True
        with torch.autocast("cuda", dtype=torch.bfloat16):
            main, mtpl, _ = dm.forward_all(model, mtp, w)
        routers.active = False
        loss_main = F.cross_entropy(main.float().flatten(0, 1), w[:, 1:].flatten())
        loss_mtp = F.cross_entropy(mtpl.float().flatten(0, 1), w[:, 2:].flatten())
        aux = routers.loss()
        loss = loss_main + args.mtp_lambda * loss_mtp + args.aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(all_params, 1.0)
        opt.step()
        step += 1
        tokens_seen += w[:, 1:].numel()
        log_tokens += w[:, 1:].numel()
        if step % 20 == 0 or step <= 3:
            lm, lt, la, gn = loss_main.item(), loss_mtp.item(), float(aux), gnorm.item()
            if not all(math.isfinite(v) for v in (lm, lt, la)):
                raise SystemExit(f"step {step}: loss is not finite ({lm}, {lt}, {la})")
            dt = time.time() - last_log
            log(f"step {step:5d} loss {lm:.3f} mtp {lt:.3f} aux {la:.3f} gnorm {gn:.2f} "
                f"lr {lr:.2e} | {log_tokens / dt:,.0f} tok/s | epoch {data.epoch} "
                f"{data.cursor}/{data.perm.numel()} | mem {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            last_log, log_tokens = time.time(), 0
        if time.time() - last_eval >= args.eval_every:
            ev = evaluate(model, mtp, held_windows, args.batch, device, max_windows=64)
            val = evaluate(model, mtp, val_windows, args.batch, device)
            ev.update(step=step, tokens=tokens_seen, val_loss=val["loss"],
                      train_loss=loss_main.item())
            history.append(ev)
            if val["loss"] < best["val_loss"]:
                best = {"val_loss": val["loss"], "step": step,
                        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
                        "mtp": {k: v.detach().clone() for k, v in mtp.state_dict().items()}}
            log(f"eval @ step {step}: train loss {ev['train_loss']:.3f}, validation loss "
                f"{val['loss']:.3f} (best {best['val_loss']:.3f} @ {best['step']}) | held-out ppl "
                f"{ev['ppl']:.2f} top1 {ev['top1']:.3f} | mtp top1 {ev['mtp_top1']:.3f} "
                f"accept-proxy {ev['mtp_accept_proxy']:.3f}")
            last_eval = time.time()
            last_log = time.time()
        if args.ckpt and time.time() - last_ckpt >= args.ckpt_every:
            save_checkpoint(args.ckpt, model, mtp, opt, state())
            log(f"checkpoint {args.ckpt} at step {step}")
            last_ckpt = time.time()
            last_log = time.time()
    train_time = time.time() - t_train
    log(f"trained {step} steps in this run ({train_time:.0f}s), {tokens_seen} tokens in all")
    if args.ckpt:
        save_checkpoint(args.ckpt, model, mtp, opt, state())
        log(f"checkpoint {args.ckpt} at step {step}")

    val = evaluate(model, mtp, val_windows, args.batch, device)
    chosen = f"final weights (validation loss {val['loss']:.3f})"
    if "model" in best and best["val_loss"] < val["loss"]:
        model.load_state_dict(best["model"])
        mtp.load_state_dict(best["mtp"])
        chosen = (f"the weights of step {best['step']} (validation loss {best['val_loss']:.3f} < "
                  f"final {val['loss']:.3f})")
    log("shipping", chosen)
    # Everything below measures and ships the bf16 weights.
    export.round_to_bf16(model, mtp)
    final = evaluate(model, mtp, held_windows, args.batch, device)
    final["unigram_ppl"] = unigram_ppl(train_ids, held_windows, vocab)
    log("held-out (bf16 weights):", json.dumps(final))
    info = {
        "params": params, "vocab": vocab, "tokenizer": stats, "steps": step,
        "tokens_seen": tokens_seen, "train_seconds": prev_seconds + train_time,
        "epochs": tokens_seen / max(1, fit_ids.size), "batch": args.batch, "seq": args.seq,
        "lr": args.lr, "mtp_lambda": args.mtp_lambda, "aux_coef": args.aux_coef,
        "heldout": final, "history": history, "implementations": impl, "shipped": chosen,
        "gpu": torch.cuda.get_device_name(0), "eos_ids": [eos, im_end],
    }
    export.export_all(model, mtp, cfg, os.path.join(args.work, "tokenizer"), args.out, info)
    log("done")


def seen_params(model, mtp):
    seen = set()
    for mod in (model, mtp):
        for p in mod.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                yield p


if __name__ == "__main__":
    main()
