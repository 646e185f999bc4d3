#include "strata/models/qwen4_exp_weights.h"

#include <algorithm>
#include <map>

#include "strata/core/error.h"
#include "strata/dist/rank_split.h"

namespace strata {
namespace {

HyperConnectionWeights load_hc(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c,
                               bool inject) {
  const int64_t wide = c.hc * c.hidden;
  HyperConnectionWeights h;
  h.norm = w.get(p + "hc_norm.weight", {wide});
  h.down = w.get(p + "input_mix_weight_down.weight", {c.hc_rank, wide});
  h.up = w.get(p + "input_mix_weight_up.weight", {wide, c.hc_rank});
  if (inject) h.inject = w.get(p + "block_inject_weight.weight", {c.hc, wide});
  return h;
}

// This rank's share of n things split par.size ways (divisibility checked by
// qwen4_exp_rank_config).
using dist::Share;
Share share(const dist::Parallel& par, int64_t n) { return dist::rank_share(par, n); }
using Slice = WeightLoader::Slice;

// Key heads with their value heads split over the ranks: in_proj_qkv's q, k and v rows and the
// conv channels of those heads, in_proj_z/b/a, A_log and dt_bias; out_proj row-parallel.
GdnWeights load_gdn(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c, const dist::Parallel& par) {
  const int64_t hk = c.lin_k_heads, hv = c.lin_v_heads, dk = c.lin_k_dim, dv = c.lin_v_dim, hsz = c.hidden;
  const int64_t conv_dim = 2 * hk * dk + hv * dv;
  const Share kh = share(par, hk), vh = share(par, hv);
  // The q, k and v rows of this rank's heads in a [conv_dim, ...] tensor.
  auto qkv_rows = [&](const std::string& name, const Shape& full) {
    return std::vector<Slice>{{name, full, 0, kh.first * dk, kh.count * dk},
                              {name, full, 0, hk * dk + kh.first * dk, kh.count * dk},
                              {name, full, 0, 2 * hk * dk + vh.first * dv, vh.count * dv}};
  };
  GdnWeights g;
  g.in_qkv = w.get_slices(qkv_rows(p + "in_proj_qkv.weight", {conv_dim, hsz}));
  g.in_z = w.get_slices({{p + "in_proj_z.weight", {hv * dv, hsz}, 0, vh.first * dv, vh.count * dv}});
  g.in_b = w.get_slices({{p + "in_proj_b.weight", {hv, hsz}, 0, vh.first, vh.count}});
  g.in_a = w.get_slices({{p + "in_proj_a.weight", {hv, hsz}, 0, vh.first, vh.count}});
  const int64_t local_conv = 2 * kh.count * dk + vh.count * dv;
  g.conv = w.get_slices(qkv_rows(p + "conv1d.weight", {conv_dim, 1, c.conv_kernel})).reshape({local_conv, c.conv_kernel});
  g.a_log = w.get_slices({{p + "A_log", {hv}, 0, vh.first, vh.count}});
  g.dt_bias = w.get_slices({{p + "dt_bias", {hv}, 0, vh.first, vh.count}});
  g.norm = w.get(p + "norm.weight", {dv});
  g.out_proj = w.get_slices({{p + "out_proj.weight", {hsz, hv * dv}, 1, vh.first * dv, vh.count * dv}});
  return g;
}

// Query heads (each [query | gate]) split; key-value heads split, or the one this rank's query
// heads read when there are fewer than ranks; o_proj row-parallel. The indexer's query heads
// split, its single key head replicated (every rank keeps the full block-key cache).
QsaWeights load_qsa(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c, const dist::Parallel& par) {
  const int64_t d = c.head_dim, di = c.index_head_dim, hsz = c.hidden, hq = c.heads, hkv = c.kv_heads,
                hi = c.index_heads;
  const Share qh = share(par, hq), ih = share(par, hi);
  const Share kh = hkv % par.size == 0 ? share(par, hkv) : Share{qh.first / (hq / hkv), 1};
  QsaWeights q;
  q.q_proj = w.get_slices({{p + "q_proj.weight", {hq * d * 2, hsz}, 0, qh.first * 2 * d, qh.count * 2 * d}});
  q.k_proj = w.get_slices({{p + "k_proj.weight", {hkv * d, hsz}, 0, kh.first * d, kh.count * d}});
  q.v_proj = w.get_slices({{p + "v_proj.weight", {hkv * d, hsz}, 0, kh.first * d, kh.count * d}});
  q.o_proj = w.get_slices({{p + "o_proj.weight", {hsz, hq * d}, 1, qh.first * d, qh.count * d}});
  q.q_norm = w.get(p + "q_norm.weight", {d});
  q.k_norm = w.get(p + "k_norm.weight", {d});
  const std::string qk = p + "indexer.index_qk_proj.weight";
  const Shape qk_full{(hi + 1) * di, hsz};
  q.index_qk = w.get_slices({{qk, qk_full, 0, ih.first * di, ih.count * di}, {qk, qk_full, 0, hi * di, di}});
  q.index_q_norm = w.get(p + "indexer.q_layernorm.weight", {di});
  q.index_k_norm = w.get(p + "indexer.k_layernorm.weight", {di});
  return q;
}

// The routed experts: whole experts split over the ranks (expert parallel), or every expert's
// intermediate columns (gate and up rows, down columns). The router and the shared expert's gate
// replicated; the shared expert split as an MLP.
MoeWeights load_moe(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c, const dist::Parallel& par) {
  const int64_t e = c.experts, inter = c.moe_inter, h = c.hidden, si = c.shared_inter;
  const Share es = par.expert_parallel ? share(par, e) : Share{0, e};
  const Share is = par.expert_parallel ? Share{0, inter} : share(par, inter);
  MoeWeights m;
  m.router = w.get(p + "gate.weight", {e, h});
  const WeightLoader::RoutedExperts experts =
      w.get_routed_experts(p, {e, 2 * inter, h}, {es.first, es.count}, {is.first, is.count});
  m.experts_gate_up = experts.gate_up;
  m.experts_down = experts.down;
  const Share ss = share(par, si);
  m.shared_gate_up = w.get_slices({{p + "shared_expert.gate_proj.weight", {si, h}, 0, ss.first, ss.count},
                                   {p + "shared_expert.up_proj.weight", {si, h}, 0, ss.first, ss.count}});
  m.shared_down = w.get_slices({{p + "shared_expert.down_proj.weight", {h, si}, 1, ss.first, ss.count}});
  m.shared_gate = w.get(p + "shared_expert_gate.weight", {1, h});
  return m;
}

// The checkpoint's I64 hash buffers, when present, must equal the constants derived from
// config.json (HF recomputes them at init and overwrites the loaded buffers with them, so a
// disagreement means a config that does not belong to the checkpoint).
void check_hash_buffer(WeightLoader& w, const std::string& name, const std::vector<int64_t>& want) {
  if (!w.has_top(name)) return;
  Tensor t = w.raw(name, {int64_t(want.size())});
  STRATA_CHECK(t.dtype() == DType::kI64, w.checkpoint().file_of(name), ": tensor '", name,
               "': expected I64, got ", dtype_name(t.dtype()));
  for (size_t i = 0; i < want.size(); ++i) {
    STRATA_CHECK(t.data<int64_t>()[i] == want[i], w.checkpoint().file_of(name), ": tensor '", name,
                 "'[", i, "] = ", t.data<int64_t>()[i], " but config.json derives ", want[i],
                 " (vocab_size, seed, ngram_vocab_size_base, ple_layer_ids)");
  }
}

// A decoder layer under `p` (a trunk layer or the head's) but its n-gram embedding: the two
// hyper-connections, the Gated DeltaNet (`linear`) or QSA, the MoE.
Qwen4ExpLayerWeights load_layer(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c,
                                const dist::Parallel& par, bool linear) {
  Qwen4ExpLayerWeights l;
  l.linear = linear;
  l.attn_hc = load_hc(w, p + "attn_hyper_connection.", c, true);
  l.mlp_hc = load_hc(w, p + "mlp_hyper_connection.", c, true);
  if (linear) {
    l.gdn = load_gdn(w, p + "linear_attn.", c, par);
  } else {
    l.qsa = load_qsa(w, p + "self_attn.", c, par);
  }
  l.moe = load_moe(w, p + "mlp.", c, par);
  return l;
}

PleWeights load_ple(WeightLoader& w, const std::string& p, const Qwen4ExpConfig& c, int rank,
                    size_t* table_bytes) {
  const int64_t wide = c.hc * c.hidden, e = c.ple_embed_dim;
  PleWeights ple;
  ple.rank = rank;
  ple.layout = ngram_table_layout(c, rank);
  const std::string emb = w.prefix() + p + "ple_embedding.";
  check_hash_buffer(w, emb + "layer_multipliers", ple.layout.hash.multipliers);
  check_hash_buffer(w, emb + "ngram_heads_vocab_sizes", ple.layout.hash.head_vocab_sizes);
  check_hash_buffer(w, emb + "ngram_heads_offsets", ple.layout.hash.head_offsets);
  ple.table = load_ngram_table(w, emb + "ngram_embedding.", ple.layout.padded_rows, ple.layout.dim);
  for (const Tensor& t : ple.table) *table_bytes += t.nbytes();
  ple.key_proj = w.get(p + "key_proj.weight", {wide, e});
  ple.value_proj = w.get(p + "value_proj.weight", {c.hidden, e});
  ple.norm_key = w.get(p + "norm_key.weight", {wide});
  ple.norm_query = w.get(p + "norm_query.weight", {wide});
  ple.norm_conv = w.get(p + "norm_conv.weight", {wide});
  const int64_t k = c.ple_conv_kernel, dil = c.ngram_size, taps = (k - 1) * dil + 1;
  Tensor conv = w.get_host_f32(w.prefix() + p + "conv1d.weight", {wide, 1, k});
  Tensor dilated = Tensor::zeros({wide, taps}, DType::kF32);
  for (int64_t ch = 0; ch < wide; ++ch) {
    for (int64_t j = 0; j < k; ++j) dilated.data<float>()[ch * taps + j * dil] = conv.data<float>()[ch * k + j];
  }
  ple.conv = w.to_device(dilated);
  return ple;
}

}  // namespace

std::vector<Tensor> load_ngram_table(WeightLoader& w, const std::string& prefix, int64_t rows,
                                     int64_t dim) {
  // Dummy weights: one table, in host memory as a real one stays.
  if (w.dummy()) return {w.random_host(prefix + "weight", {rows, dim}, DType::kBF16)};
  const Checkpoint& ck = w.checkpoint();
  const std::string shard = prefix + "shard_", suffix = ".weight";
  std::map<int64_t, std::string> by_index;
  for (const std::string& name : ck.names()) {
    if (name.rfind(shard, 0) != 0 || name.size() <= shard.size() + suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string num = name.substr(shard.size(), name.size() - shard.size() - suffix.size());
    const bool numeric = !num.empty() && num.size() <= 9 &&
                         num.find_first_not_of("0123456789") == std::string::npos &&
                         (num == "0" || num[0] != '0');
    STRATA_CHECK(numeric, ck.file_of(name), ": tensor '", name,
                 "': the n-gram table shard index must be a decimal number");
    by_index[std::stoll(num)] = name;
  }
  std::vector<std::string> names;
  if (by_index.empty()) {
    STRATA_CHECK(ck.has(prefix + "weight"), ck.dir(), ": missing tensor '", shard, "0.weight' (the ",
                 "n-gram table shards) or '", prefix, "weight'");
    names.push_back(prefix + "weight");
  } else {
    STRATA_CHECK(!ck.has(prefix + "weight"), ck.dir(), ": both '", prefix, "weight' and shards '",
                 shard, "N.weight' are present");
    int64_t expect = 0;
    for (const auto& [index, name] : by_index) {  // numeric order
      STRATA_CHECK(index == expect, ck.dir(), ": n-gram table shard '", shard, expect,
                   ".weight' is missing (shards must be numbered 0..N-1)");
      names.push_back(name);
      ++expect;
    }
  }
  std::vector<Tensor> table;
  int64_t total = 0;
  for (const std::string& name : names) {
    const TensorInfo& info = ck.info(name);
    STRATA_CHECK(info.shape.size() == 2 && info.shape[1] == dim, ck.file_of(name), ": tensor '", name,
                 "': expected shape [rows, ", dim, "], got ", shape_str(info.shape));
    STRATA_CHECK(info.dtype == DType::kBF16 || info.dtype == DType::kF16 || info.dtype == DType::kF32,
                 ck.file_of(name), ": tensor '", name, "': dtype ", dtype_name(info.dtype),
                 " is not supported for the n-gram table (expected BF16, F16 or F32)");
    table.push_back(w.raw(name, info.shape));
    total += info.shape[0];
  }
  STRATA_CHECK(total == rows, ck.dir(), ": the n-gram table '", prefix, "*' has ", total,
               " rows in ", names.size(), " tensors, config.json derives ", rows,
               " (ngram_vocab_size_base, heads_per_ngram, make_ngram_vocab_size_divisible_by)");
  return table;
}

Qwen4ExpWeights load_qwen4_exp_weights(WeightLoader& w, const Qwen4ExpConfig& c, const dist::Parallel& par) {
  Qwen4ExpWeights m;
  const Share vs = share(par, c.vocab);
  m.embed = w.get("embed_tokens.weight", {c.vocab, c.hidden});
  if (w.has_top("lm_head.weight") || (w.dummy() && !c.tie_embeddings)) {
    m.lm_head = w.get_slices({{"lm_head.weight", {c.vocab, c.hidden}, 0, vs.first, vs.count, true}});
  } else if (c.tie_embeddings) {
    m.lm_head = par.size == 1 ? m.embed
                              : w.get_slices({{"embed_tokens.weight", {c.vocab, c.hidden}, 0, vs.first, vs.count}});
  } else {
    fail(w.checkpoint().dir(), ": missing tensor 'lm_head.weight' (tie_word_embeddings is false)");
  }
  m.mixer = load_hc(w, "hyper_connection_mixer.", c, false);
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = cat("layers.", i, ".");
    Qwen4ExpLayerWeights l = load_layer(w, p, c, par, c.linear[i]);
    const int rank = c.ple_rank(i);
    l.has_ple = rank >= 0;
    if (l.has_ple) l.ple = load_ple(w, p + "ple.", c, rank, &m.host_table_bytes);
    m.layers.push_back(std::move(l));
  }
  return m;
}

Qwen4ExpMtpWeights load_qwen4_exp_mtp(WeightLoader& w, const Qwen4ExpConfig& c) {
  Qwen4ExpMtpWeights m;
  const int64_t h = c.hidden;
  m.fc_embedding = w.get("fc_embedding.weight", {h, h});
  m.fc_hidden = w.get("fc_hidden.weight", {h, h});
  m.norm_embedding = w.get("pre_fc_norm_embedding.weight", {h});
  m.norm_hidden = w.get("pre_fc_norm_hidden.weight", {c.hc * h});
  m.mixer = load_hc(w, "hyper_connection_mixer.", c, false);
  for (int64_t j = 0; j < c.mtp_layers; ++j) m.layers.push_back(load_layer(w, cat("layers.", j, "."), c, {}, false));
  return m;
}

}  // namespace strata
