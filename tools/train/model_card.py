"""Renders models/default/README.md from the exported config and the training metrics."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS_STATS = os.path.join(HERE, "..", "..", ".dev", "train", "corpus_stats.json")


def _m(n):
    return f"{n / 1e6:.2f} M"


def render(cfg, info):
    p, h, tok = info["params"], info["heldout"], info["tokenizer"]
    v = info.get("verification", {})
    lt = cfg["layer_types"]
    lines = [
        "# strata default model",
        "",
        "A small model trained from scratch so that strata has a real (not random) model to "
        "run without any download: `strata generate --model models/default --prompt \"The "
        "kernel\"` prints English. It is a test and measurement model (speculative-decoding "
        "acceptance, sampling, quantisation error), not an assistant: it was trained for a few "
        "minutes on technical documentation and knows nothing else.",
        "",
        "## Architecture",
        "",
        "`Qwen3_5MoeForCausalLM` (transformers' `qwen3_5_moe_text`), loadable with "
        "`Qwen3_5MoeForCausalLM.from_pretrained` (which ignores the `mtp.*` tensors), plus one "
        "multi-token-prediction layer in the published Qwen3.5 `mtp.*` layout, trained jointly.",
        "",
        "| | |",
        "|---|---|",
        f"| layers | {cfg['num_hidden_layers']}: " + ", ".join(
            "GDN" if t == "linear_attention" else "attention" for t in lt) + " |",
        f"| hidden size | {cfg['hidden_size']} |",
        f"| gated attention | {cfg['num_attention_heads']} query heads, "
        f"{cfg['num_key_value_heads']} KV heads, head dim {cfg['head_dim']}, RoPE on "
        f"{cfg['rope_parameters'].get('partial_rotary_factor')} of it, theta "
        f"{cfg['rope_parameters'].get('rope_theta')} |",
        f"| Gated DeltaNet | {cfg['linear_num_key_heads']} key heads x "
        f"{cfg['linear_key_head_dim']}, {cfg['linear_num_value_heads']} value heads x "
        f"{cfg['linear_value_head_dim']}, conv kernel {cfg['linear_conv_kernel_dim']} |",
        f"| MoE (every layer) | {cfg['num_experts']} experts, top-{cfg['num_experts_per_tok']},"
        f" expert size {cfg['moe_intermediate_size']}, shared expert "
        f"{cfg['shared_expert_intermediate_size']} (sigmoid-gated) |",
        f"| vocabulary | {cfg['vocab_size']} (byte-level BPE), embeddings "
        f"{'tied' if cfg['tie_word_embeddings'] else 'untied'} |",
        f"| MTP | {cfg.get('mtp_num_hidden_layers', 1)} layer: fc [H, 2H] over [norm(embed(t+1)),"
        " norm(h_t)], a full-attention MoE decoder layer, final norm; shares embed_tokens and "
        "lm_head |",
        f"| parameters | main model {_m(p['main_total'])} (embedding {_m(p['embedding'])}, "
        f"routed experts {_m(p['routed_experts'])}), active per token "
        f"{_m(p['main_active_per_token'])}; MTP {_m(p['mtp_total'])}; total "
        f"{_m(p['total_with_mtp'])} |",
        "| weights | bf16 safetensors, one file |",
        "",
        "## Tokenizer",
        "",
        f"Byte-level BPE trained on the training split: {tok['bpe_vocab']} BPE tokens and "
        f"{len(tok['added_tokens'])} added tokens (Qwen's `<|endoftext|>`, `<|im_start|>`, "
        "`<|im_end|>`, vision placeholders, `<tool_call>`, `<tool_response>`, `<think>` and "
        "their closing tags). Qwen2/3 pre-tokenizer (split regex, then ByteLevel), NFC "
        f"normaliser, ByteLevel decoder; {tok['bytes_per_token']:.2f} bytes per token on the "
        "training text. Chat template: Qwen3.5's non-thinking template "
        "(tests/fixtures/chat/templates/qwen3_5_small.jinja). No BOS; documents end with "
        "`<|endoftext|>`; generation stops at `<|endoftext|>` or `<|im_end|>`.",
        "",
        "## Training data",
        "",
        "English prose extracted from Debian documentation packages by "
        "`tools/train/build_corpus.py` (markup, code, tables removed; exact and near-exact "
        "paragraphs deduplicated; 1% of the documents held out). Licences per package: "
        "`tools/train/LICENSES.md`.",
        "",
    ]
    if os.path.exists(CORPUS_STATS):
        cs = json.load(open(CORPUS_STATS))
        lines += ["| source | documents | MB | ~tokens |", "|---|---|---|---|"]
        for name, s in cs["sources"].items():
            lines.append(f"| {name} | {s['documents']} | {s['bytes'] / 1e6:.1f} | "
                         f"{s['bytes'] / tok['bytes_per_token'] / 1e6:.2f} M |")
        lines.append("")
    lines += [
        f"Tokens: {tok['train_tokens'] / 1e6:.2f} M train, {tok['heldout_tokens'] / 1e3:.0f} K "
        "held-out.",
        "",
        "## Training",
        "",
        f"{info['steps']} steps of {info['batch']} x {info['seq']} tokens "
        f"({info['tokens_seen'] / 1e6:.1f} M tokens, {info['epochs']:.1f} epochs) in "
        f"{info['train_seconds']:.0f} s on one {info['gpu']}; AdamW (lr {info['lr']}, "
        "betas 0.9/0.95, weight decay 0.1, warm-up then cosine), bf16 autocast with fp32 "
        f"master weights; loss = next-token CE + {info['mtp_lambda']} x MTP CE (token after "
        f"next) + {info['aux_coef']} x router load balance. Attention / experts "
        f"implementations: {info['implementations']}.",
        "",
        "## Held-out results (the shipped bf16 weights)",
        "",
        "| | |",
        "|---|---|",
        f"| perplexity | **{h['ppl']:.2f}** |",
        f"| unigram baseline perplexity (train-set token frequencies, add-one) | "
        f"{h['unigram_ppl']:.1f} |",
        f"| next-token top-1 accuracy | {h['top1']:.3f} |",
        f"| MTP: top-1 accuracy on the token after next | {h['mtp_top1']:.3f} |",
        f"| MTP: argmax equals the main model's argmax at the next position (acceptance "
        f"proxy) | {h['mtp_accept_proxy']:.3f} |",
        f"| MTP perplexity on the token after next | {h['mtp_ppl']:.2f} |",
        f"| held-out tokens scored | {h['tokens']} |",
        "",
    ]
    if info.get("history"):
        lines += ["During training (train loss of the last batch, validation loss on tokens held "
                  "back from the training stream, the rest on the first 64 held-out windows):", "",
                  "| step | tokens | train loss | validation loss | held-out ppl | top-1 | "
                  "MTP top-1 | acceptance proxy |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in info["history"]:
            lines.append(f"| {e['step']} | {e['tokens'] / 1e6:.1f} M | {e['train_loss']:.3f} | "
                         f"{e['val_loss']:.3f} | {e['ppl']:.2f} | {e['top1']:.3f} | "
                         f"{e['mtp_top1']:.3f} | {e['mtp_accept_proxy']:.3f} |")
        lines += ["", f"Shipped: {info.get('shipped', 'final weights')}.", ""]
    lines += [
        "## Reference for strata's golden test",
        "",
        "`reference/logits.npy` holds transformers' fp32 logits (CPU, eager, token-by-token "
        "cached decode) for the prompt in `reference/reference.json`, with 16 greedy ids; "
        "`tests/golden/default_model_test.cpp` compares strata with them. "
        "`reference/mtp_logits.npy` holds the MTP head's fp32 logits on the same prompt "
        "(semantics in reference.json).",
        "",
        f"- trained model vs `from_pretrained` max|d|: "
        f"{v.get('trained_vs_from_pretrained_max_abs', float('nan')):.2e}",
        f"- HF full vs stepwise max|d|: {v.get('hf_full_vs_stepwise_max_abs', float('nan')):.2e}",
        f"- greedy continuation of the reference prompt: {v.get('reference_greedy_text', '')!r}",
        "",
        "## Greedy samples (transformers, 40 tokens)",
        "",
    ]
    for prompt, text in v.get("greedy_samples", []):
        lines.append(f"- **{prompt}**{text}")
    lines += [
        "",
        "## Reproducing",
        "",
        "See `tools/train/README.md`: `build_corpus.py` here, then "
        "`bash tools/train/run_on_device.sh` on the GPU machine.",
        "",
        "## Licence",
        "",
        "The weights are derived from the documentation listed in `tools/train/LICENSES.md` "
        "(GPL-2, PSF, Artistic/GPL, PostgreSQL, Apache-2.0, public domain and other free "
        "licences). The architecture is Qwen3.5-MoE's as implemented by transformers "
        "(Apache-2.0); no Qwen weights are used.",
        "",
    ]
    return "\n".join(lines)
