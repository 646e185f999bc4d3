"""A synthetic Qwen3.5-MoE checkpoint for load-speed measurements (bench/load_bench.sh).

The shapes of tools/device/qwen3_5_35b_a3b/config.json with fewer layers and experts, BF16 (A_log
and the gated norm's weight F32), values of magnitude 2^-7 .. 2^-4 so that a forward stays finite.
Experts fused (experts.gate_up_proj / down_proj) or per expert (experts.J.*_proj.weight).

    python3 bench/synthetic_checkpoint.py OUT_DIR LAYERS EXPERTS fused|per-expert [SHARDS]
"""
import json, os, struct, sys

out, layers, experts, layout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
shards = int(sys.argv[5]) if len(sys.argv) > 5 else 1
src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "device", "qwen3_5_35b_a3b",
                   "config.json")
cfg = json.load(open(src))
cfg["num_hidden_layers"] = layers
cfg["num_experts"] = experts
cfg["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)]
cfg["eos_token_id"] = 1
os.makedirs(out, exist_ok=True)
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)

V, H = cfg["vocab_size"], cfg["hidden_size"]
hq, hkv, d = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
hk, hv, dk, dv, kw = (cfg["linear_num_key_heads"], cfg["linear_num_value_heads"], cfg["linear_key_head_dim"],
                      cfg["linear_value_head_dim"], cfg["linear_conv_kernel_dim"])
I, si, E = cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"], experts
conv = 2 * hk * dk + hv * dv

tensors = [("model.embed_tokens.weight", "BF16", [V, H]), ("model.norm.weight", "BF16", [H]),
           ("lm_head.weight", "BF16", [V, H])]
for i, t in enumerate(cfg["layer_types"]):
    p = f"model.layers.{i}."
    tensors += [(p + "input_layernorm.weight", "BF16", [H]), (p + "post_attention_layernorm.weight", "BF16", [H])]
    if t == "linear_attention":
        a = p + "linear_attn."
        tensors += [(a + "in_proj_qkv.weight", "BF16", [conv, H]), (a + "in_proj_z.weight", "BF16", [hv * dv, H]),
                    (a + "in_proj_b.weight", "BF16", [hv, H]), (a + "in_proj_a.weight", "BF16", [hv, H]),
                    (a + "conv1d.weight", "BF16", [conv, 1, kw]), (a + "A_log", "F32", [hv]),
                    (a + "dt_bias", "BF16", [hv]), (a + "norm.weight", "F32", [dv]),
                    (a + "out_proj.weight", "BF16", [H, hv * dv])]
    else:
        a = p + "self_attn."
        tensors += [(a + "q_proj.weight", "BF16", [hq * d * 2, H]), (a + "k_proj.weight", "BF16", [hkv * d, H]),
                    (a + "v_proj.weight", "BF16", [hkv * d, H]), (a + "o_proj.weight", "BF16", [H, hq * d]),
                    (a + "q_norm.weight", "BF16", [d]), (a + "k_norm.weight", "BF16", [d])]
    m = p + "mlp."
    tensors += [(m + "gate.weight", "BF16", [E, H]), (m + "shared_expert_gate.weight", "BF16", [1, H]),
                (m + "shared_expert.gate_proj.weight", "BF16", [si, H]),
                (m + "shared_expert.up_proj.weight", "BF16", [si, H]),
                (m + "shared_expert.down_proj.weight", "BF16", [H, si])]
    if layout == "fused":
        tensors += [(m + "experts.gate_up_proj", "BF16", [E, 2 * I, H]), (m + "experts.down_proj", "BF16", [E, H, I])]
    else:
        for j in range(E):
            x = m + f"experts.{j}."
            tensors += [(x + "gate_proj.weight", "BF16", [I, H]), (x + "up_proj.weight", "BF16", [I, H]),
                        (x + "down_proj.weight", "BF16", [H, I])]

def nbytes(dt, shape):
    n = 4 if dt == "F32" else 2
    for s in shape: n *= s
    return n

# Values of magnitude 2^-7 .. 2^-4 (bf16 exponent 120..123; F32 likewise in its top bytes): every
# byte b -> (b & 0x81) | 0x3C keeps the sign and two random bits.
table = bytes(((b & 0x81) | 0x3C) for b in range(256))
pool = os.urandom(1 << 24).translate(table)

groups = [tensors[k::shards] for k in range(shards)]
weight_map = {}
for k, group in enumerate(groups):
    name = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
    header, off = {}, 0
    for n, dt, shape in group:
        b = nbytes(dt, shape)
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + b]}
        off += b
        weight_map[n] = name
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left, r = off, 0
        while left > 0:
            # rotate through the pool so that tensors differ
            chunk = pool[r % len(pool):] + pool[:r % len(pool)]
            w = min(left, len(chunk))
            f.write(chunk[:w])
            left -= w
            r += 7919
if shards > 1:
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(out, "model.safetensors.index.json"), "w"))
total = sum(nbytes(dt, s) for _, dt, s in tensors)
print(f"{out}: {len(tensors)} tensors, {total / 1e9:.2f} GB in {shards} file(s)")
