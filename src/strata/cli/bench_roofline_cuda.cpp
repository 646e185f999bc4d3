// strata bench --roofline: decode and prefill throughput of a model on the GPU, each set against
// the two ceilings measured in the same run (a device-to-device copy and a large cuBLASLt bf16
// GEMM), with the bytes and FLOPs each step must move and do, and a per-op GPU time breakdown.
//   strata bench --roofline --model tools/device/qwen3_5_35b_a3b --load-format dummy
#if defined(STRATA_WITH_CUDA)

#include <CLI/CLI.hpp>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "strata/cli/bench_roofline.h"
#include "strata/cli/common.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/io/config.h"
#include "strata/io/quant_config.h"
#include "strata/models/model.h"
#include "strata/ops/cuda/cuda_ops.h"
#include "strata/ops/cuda/gemm.h"
#include "strata/ops/cuda/graphs.h"
#include "strata/ops/cuda/profile.h"
#include "strata/ops/cuda/runtime.h"
#include "strata/ops/ops.h"

namespace strata::cli {
namespace {

namespace cu = ops::cuda;

// The shapes of a Qwen3.5-family config that the cost model needs.
struct Dims {
  int64_t vocab, hidden, heads, kv_heads, head_dim, hk, hv, dk, dv, conv_kernel;
  int64_t experts, top_k, moe_inter, shared_inter, inter;
  int64_t n_linear = 0, n_full = 0, n_moe = 0, n_dense = 0;
  // Bytes an attention or GDN projection's weight takes on the GPU: 2 (bf16), or an FP8
  // block-scale checkpoint's code and its share of a per-row F32 scale per 128 columns (they stay
  // FP8; GDN's in_proj_b/a rows, the routers and the shared experts stay bf16).
  double fp8_bytes = 2;
  // Bytes a routed expert's weight takes: as the projections, or of an NVFP4 checkpoint half a
  // byte, an e4m3 scale per 16 and an F32 global a row (3 I H weights in 2I rows of H and H rows of
  // I), of an MXFP4 one half a byte and a ue8m0 scale per 32 (its dense projections stay bf16).
  double expert_bytes = 2;
};

Dims read_dims(const std::string& dir) {
  const std::string path = dir + "/config.json";
  const nlohmann::json root = read_json_file(path);
  ConfigView c = ConfigView::text_config(root, path);
  Dims d;
  d.vocab = c.get_int("vocab_size");
  d.hidden = c.get_int("hidden_size");
  d.heads = c.get_int("num_attention_heads");
  d.kv_heads = c.get_int("num_key_value_heads");
  d.head_dim = c.get_int("head_dim", d.hidden / d.heads);
  d.hk = c.get_int("linear_num_key_heads");
  d.hv = c.get_int("linear_num_value_heads");
  d.dk = c.get_int("linear_key_head_dim");
  d.dv = c.get_int("linear_value_head_dim");
  d.conv_kernel = c.get_int("linear_conv_kernel_dim");
  d.experts = c.get_int("num_experts", 0);
  d.top_k = c.get_int("num_experts_per_tok", 0);
  d.moe_inter = c.get_int("moe_intermediate_size", 0);
  d.shared_inter = c.get_int("shared_expert_intermediate_size", 0);
  d.inter = c.get_int("intermediate_size", 0);
  const int64_t layers = c.get_int("num_hidden_layers");
  std::vector<std::string> types;
  if (c.has("layer_types")) {
    types = c.get_string_list("layer_types");
  } else {
    const int64_t every = c.get_int("full_attention_interval", 4);
    for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % every == 0 ? "full_attention" : "linear_attention");
  }
  for (const std::string& t : types) (t == "full_attention" ? d.n_full : d.n_linear) += 1;
  (d.experts > 0 ? d.n_moe : d.n_dense) = layers;
  const WeightQuant::Method method = parse_weight_quant(root, path).method;
  if (method == WeightQuant::Method::kFp8Block) d.fp8_bytes = d.expert_bytes = 1 + 4.0 / 128;
  const double i = double(d.moe_inter), h = double(d.hidden);
  if (method == WeightQuant::Method::kNvfp4 && i > 0) d.expert_bytes = 0.5 + 1.0 / 16 + 4 * (2 * i + h) / (3 * i * h);
  if (method == WeightQuant::Method::kMxfp4) d.expert_bytes = 0.5 + 1.0 / 32;
  return d;
}

struct Cost {
  double weight_bytes = 0, cache_bytes = 0, flops = 0;
  double bytes() const { return weight_bytes + cache_bytes; }
};

// Expected distinct experts hit by `tokens` tokens of top_k picks each under uniform routing
// (what the dummy weights give).
double active_experts(const Dims& d, double tokens) {
  if (d.experts == 0) return 0;
  return double(d.experts) * (1.0 - std::pow(1.0 - double(d.top_k) / double(d.experts), tokens));
}

// One forward of `tokens` new tokens in `seqs` sequences, each with `ctx` cached tokens before
// the step; `logit_rows` rows through the LM head. Fewest bytes: every weight read once (only
// the experts hit), caches read and written once; activations are not counted.
// state_bytes: bytes per recurrent-state element (4 for F32, 2 for BF16); kv_bytes: per KV
// element (2 for BF16, (D + 1) / D for FP8 pages with their scale bytes).
Cost forward_cost(const Dims& d, int64_t seqs, int64_t tokens, int64_t ctx, int64_t logit_rows,
                  double state_bytes = 4, double kv_bytes = 2) {
  const double h = double(d.hidden), bf = 2, f32 = 4;
  const double conv_dim = double(2 * d.hk * d.dk + d.hv * d.dv);
  const double gdn_params = (conv_dim + d.hv * d.dv + 2 * d.hv) * h + h * d.hv * d.dv;
  const double attn_params = double(2 * d.heads * d.head_dim + 2 * d.kv_heads * d.head_dim) * h +
                             h * d.heads * d.head_dim;
  const double expert_params = 3.0 * d.moe_inter * h;
  const double moe_dense = (d.experts + 1 + 2.0 * d.shared_inter) * h + h * d.shared_inter;
  const double mlp_params = 3.0 * d.inter * h;
  const double t = double(tokens);
  Cost c;
  const double gdn_ba = 2.0 * d.hv * h;  // in_proj_b and in_proj_a: bf16 in FP8 checkpoints too
  c.weight_bytes += d.n_linear * (d.fp8_bytes * (gdn_params - gdn_ba) + bf * (gdn_ba + conv_dim * d.conv_kernel));
  c.weight_bytes += d.fp8_bytes * d.n_full * attn_params;
  c.weight_bytes += bf * (d.n_moe * moe_dense + d.n_dense * mlp_params);
  c.weight_bytes += d.expert_bytes * d.n_moe * active_experts(d, t) * expert_params;
  c.weight_bytes += bf * (double(d.vocab) * h + t * h);  // LM head, embedding rows
  c.flops += 2 * t * (d.n_linear * gdn_params + d.n_full * attn_params);
  c.flops += 2 * t * (d.n_moe * (moe_dense + double(d.top_k) * expert_params) + d.n_dense * mlp_params);
  c.flops += 2 * double(logit_rows) * double(d.vocab) * h;
  // Attention: KV read once and written once; QK^T and PV over the visible keys.
  const double kv_token = 2.0 * d.kv_heads * d.head_dim * kv_bytes;
  const double per_seq = t / double(seqs);
  c.cache_bytes += d.n_full * double(seqs) * (double(ctx) + per_seq) * kv_token;  // read
  c.cache_bytes += d.n_full * t * kv_token;                                         // write
  const double visible = double(seqs) * (per_seq * double(ctx) + per_seq * (per_seq + 1) / 2);
  c.flops += d.n_full * 4.0 * d.heads * d.head_dim * visible;
  // Gated DeltaNet: the state read and written once per sequence, ~7 flops per state element
  // per token (decay, k^T S, the rank-1 update, S^T q); the conv state likewise.
  const double state = double(d.hv * d.dk * d.dv);
  c.cache_bytes += d.n_linear * double(seqs) * (2 * state * state_bytes + 2.0 * (d.conv_kernel - 1) * conv_dim * bf);
  c.flops += d.n_linear * t * 7 * state;
  return c;
}

double event_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

Ceilings measure_ceilings() {
  Ceilings c;
  cudaEvent_t e0, e1;
  STRATA_CUDA_CHECK(cudaEventCreate(&e0));
  STRATA_CUDA_CHECK(cudaEventCreate(&e1));
  {
    const int64_t n = int64_t(1) << 30;  // 2 GiB of bf16 each way
    Tensor a = Tensor::empty({n}, DType::kBF16, Device::kCuda), b = Tensor::empty({n}, DType::kBF16, Device::kCuda);
    ops::fill_random_uniform(a, 1, 1.f);
    for (int i = 0; i < 2; ++i) STRATA_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), a.nbytes(), cudaMemcpyDeviceToDevice, cu::stream()));
    const int reps = 10;
    STRATA_CUDA_CHECK(cudaEventRecord(e0, cu::stream()));
    for (int i = 0; i < reps; ++i) STRATA_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), a.nbytes(), cudaMemcpyDeviceToDevice, cu::stream()));
    STRATA_CUDA_CHECK(cudaEventRecord(e1, cu::stream()));
    STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
    c.copy_gbs = 2.0 * double(a.nbytes()) * reps / (event_ms(e0, e1) * 1e-3) / 1e9;
  }
  {
    const int64_t m = 8192;
    Tensor x = Tensor::empty({m, m}, DType::kBF16, Device::kCuda), w = Tensor::empty({m, m}, DType::kBF16, Device::kCuda);
    Tensor y = Tensor::empty({m, m}, DType::kBF16, Device::kCuda);
    ops::fill_random_uniform(x, 2, 1.f);
    ops::fill_random_uniform(w, 3, 1.f);
    for (int i = 0; i < 3; ++i) cu::gemm_bf16(x.raw(), w.raw(), y.raw(), false, m, m, m);
    const int reps = 10;
    STRATA_CUDA_CHECK(cudaEventRecord(e0, cu::stream()));
    for (int i = 0; i < reps; ++i) cu::gemm_bf16(x.raw(), w.raw(), y.raw(), false, m, m, m);
    STRATA_CUDA_CHECK(cudaEventRecord(e1, cu::stream()));
    STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
    c.gemm_tflops = 2.0 * double(m) * m * m * reps / (event_ms(e0, e1) * 1e-3) / 1e12;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return c;
}

// Batch-1 GEMV at the model's decode shapes: strata's kernel (ops::linear) against cuBLASLt
// (m = 1) in the same run, each cycling over enough weight copies (>= 256 MB) that L2 never
// holds the next one.
std::string gemv_table(const Dims& d, const Ceilings& ceil) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> shapes[] = {
      {"GDN in_proj", {2 * d.hk * d.dk + 2 * d.hv * d.dv + 2 * d.hv, d.hidden}},
      {"attention qkv", {2 * d.heads * d.head_dim + 2 * d.kv_heads * d.head_dim, d.hidden}},
      {"out_proj / o_proj", {d.hidden, d.hv * d.dv}},
      {"router + shared gate/up", {d.experts + 1 + 2 * d.shared_inter, d.hidden}},
      {"shared down", {d.hidden, d.shared_inter}},
      {"lm_head", {d.vocab, d.hidden}},
  };
  cudaEvent_t e0, e1;
  STRATA_CUDA_CHECK(cudaEventCreate(&e0));
  STRATA_CUDA_CHECK(cudaEventCreate(&e1));
  std::ostringstream md;
  md << "| GEMV (batch 1) | N x K | MB | strata us | % of copy BW | cuBLASLt us | % of copy BW | strata / cuBLASLt |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|\n";
  char buf[256];
  for (const auto& [name, nk] : shapes) {
    const auto [n, k] = nk;
    if (n <= 0 || k <= 0) continue;
    const int64_t bytes = n * k * 2;
    const int copies = int(std::max<int64_t>(2, ((int64_t(256) << 20) + bytes - 1) / bytes));
    std::vector<Tensor> ws;
    for (int c = 0; c < copies; ++c) {
      ws.push_back(Tensor::empty({n, k}, DType::kBF16, Device::kCuda));
      ops::fill_random_uniform(ws.back(), 10 + c, 0.05f);
    }
    Tensor x = Tensor::empty({1, k}, DType::kBF16, Device::kCuda), y = Tensor::empty({1, n}, DType::kBF16, Device::kCuda);
    ops::fill_random_uniform(x, 9, 1.f);
    auto time = [&](auto&& call) {
      for (int c = 0; c < copies; ++c) call(ws[c]);
      const int reps = std::max(20, 2 * copies);
      STRATA_CUDA_CHECK(cudaEventRecord(e0, cu::stream()));
      for (int r = 0; r < reps; ++r) call(ws[r % copies]);
      STRATA_CUDA_CHECK(cudaEventRecord(e1, cu::stream()));
      STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
      return event_ms(e0, e1) * 1e3 / reps;
    };
    const double ours = time([&](const Tensor& w) { ops::linear(x, w, y); });
    const double lt = time([&](const Tensor& w) { cu::gemm_bf16(x.raw(), w.raw(), y.raw(), false, 1, n, k); });
    auto pct = [&](double us) { return 100.0 * double(bytes) / (us * 1e-6) / 1e9 / ceil.copy_gbs; };
    std::snprintf(buf, sizeof buf, "| %s | %lld x %lld | %.1f | %.2f | %.1f%% | %.2f | %.1f%% | %.2f |\n", name,
                  (long long)n, (long long)k, double(bytes) / 1e6, ours, pct(ours), lt, pct(lt), ours / lt);
    md << buf;
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return md.str();
}

// `seqs` sequences of `q_len` new tokens after `ctx` cached ones, pages laid out one after the
// other, slot i for sequence i.
ForwardBatch make_batch(int seqs, int q_len, int ctx, int block_size, int pages_per_seq, std::mt19937& rng,
                        int64_t vocab) {
  ForwardBatch b;
  for (int s = 0; s < seqs; ++s) {
    SeqInBatch q;
    q.q_start = s * q_len;
    q.q_len = q_len;
    q.ctx_len = ctx;
    q.state_slot = s;
    for (int p = 0; p < pages_per_seq; ++p) q.block_table.push_back(s * pages_per_seq + p);
    for (int i = 0; i < q_len; ++i) {
      b.token_ids.push_back(int32_t(rng() % uint64_t(vocab)));
      b.positions.push_back(ctx + i);
    }
    b.seqs.push_back(std::move(q));
  }
  (void)block_size;
  return b;
}

struct Row {
  std::string what;
  int64_t tokens = 0;
  double ms = 0;  // per step
  Cost cost;
};

std::string breakdown_table(const std::vector<cu::OpTime>& ops_time, int steps) {
  double total = 0;
  for (const auto& t : ops_time) total += t.ms;
  std::ostringstream os;
  os << "| op (weight N x K) | calls/step | us/step | share |\n|---|---:|---:|---:|\n";
  char buf[256];
  for (const auto& t : ops_time) {
    std::snprintf(buf, sizeof buf, "| %s | %.0f | %.1f | %.1f%% |\n", t.name.c_str(), double(t.calls) / steps,
                  t.ms * 1e3 / steps, 100.0 * t.ms / total);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "| **sum of ops** | | **%.1f** | |\n", total * 1e3 / steps);
  os << buf;
  return os.str();
}

// Per-op GPU time of one eager forward, the host queuing it behind a stall.
std::vector<cu::OpTime> profile_forward(Model& model, const ForwardBatch& batch, Caches& caches) {
  Tensor logits;
  cu::stall_stream(200.0);
  cu::profile_begin();
  model.forward(batch, caches, logits);
  return cu::profile_end();
}

// The model's cache layout with its recurrent-state slots ("ssm") in `ssm`: the ops read the
// state's dtype from the pool, so one loaded model runs with either (--mamba-ssm-dtype).
CacheSpec with_ssm_dtype(CacheSpec spec, DType ssm) {
  for (LayerCacheSpec& layer : spec.layers) {
    for (SlotCacheSpec& slot : layer.slots) {
      if (slot.name == "ssm") slot.dtype = ssm;
    }
  }
  return spec;
}

// The row labels' note of what differs from the defaults: the state's dtype, FP8 KV pages.
std::string ssm_label(DType ssm, double kv_bytes) {
  return cat(ssm == DType::kF32 ? "" : cat(", ", dtype_name(ssm), " state"), kv_bytes < 2 ? ", fp8 KV" : "");
}

// One timed prefill of `len` tokens in a fresh cache (after a warm-up forward).
Row prefill_row(Model& model, const Dims& dims, int32_t len, int block_size, std::mt19937& rng, int64_t vocab,
                DType ssm, double kv_bytes, bool with_breakdown,
                std::vector<std::pair<std::string, std::string>>* breakdowns) {
  const int pages = (len + block_size - 1) / block_size;
  Caches caches = Caches::allocate(with_ssm_dtype(model.info().cache, ssm), pages, block_size, 1, Device::kCuda);
  ForwardBatch batch = make_batch(1, len, 0, block_size, pages, rng, vocab);
  batch.logit_rows.push_back(len - 1);
  Tensor logits;
  model.forward(batch, caches, logits);  // warm-up: sizes the workspace, picks GEMM algorithms
  cudaEvent_t e0, e1;
  STRATA_CUDA_CHECK(cudaEventCreate(&e0));
  STRATA_CUDA_CHECK(cudaEventCreate(&e1));
  const int reps = 3;
  STRATA_CUDA_CHECK(cudaEventRecord(e0, cu::stream()));
  for (int i = 0; i < reps; ++i) model.forward(batch, caches, logits);
  STRATA_CUDA_CHECK(cudaEventRecord(e1, cu::stream()));
  STRATA_CUDA_CHECK(cudaEventSynchronize(e1));
  const double ms = event_ms(e0, e1) / reps;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (with_breakdown) {
    breakdowns->push_back({cat("prefill ", len, " tokens", ssm_label(ssm, kv_bytes), " (", std::to_string(ms).substr(0, 7), " ms)"),
                           breakdown_table(profile_forward(model, batch, caches), 1)});
    std::fprintf(stderr, "per-op GPU time, %s:\n%s", breakdowns->back().first.c_str(),
                 breakdowns->back().second.c_str());
  }
  std::fprintf(stderr, "prefill %d: %.2f ms, %.0f tokens/s\n", len, ms, len * 1e3 / ms);
  return {cat("prefill ", len, " tokens", ssm_label(ssm, kv_bytes)), len, ms,
          forward_cost(dims, 1, len, 0, 1, double(dtype_size(ssm)), kv_bytes)};
}

// Speculative verify steps at batch b: every sequence brings its last token and k drafts (k + 1
// tokens, every row's logits and hidden state: what the engine's verify asks), each step taken as
// all accepted (the context grows by k + 1), timed as verify graphs (DecodeGraphs::run_with_hidden)
// and eagerly, against the roofline of the same k + 1 tokens a sequence. Skipped where the padded
// batch exceeds a verify graph's rows.
void verify_rows(Model& model, const Dims& dims, int b, int k, int context, int block_size, std::mt19937& rng,
                 DType ssm, double kv_bytes, int steps, std::vector<Row>& rows) {
  const int q = k + 1;
  cu::DecodeGraphs graphs(model.info().vocab_size);
  const int pages = (context + q * (steps + 8) + block_size - 1) / block_size;
  Caches caches = Caches::allocate(with_ssm_dtype(model.info().cache, ssm), b * pages, block_size, b, Device::kCuda);
  ForwardBatch batch = make_batch(b, q, context, block_size, pages, rng, model.info().vocab_size);
  for (int r = 0; r < b * q; ++r) batch.logit_rows.push_back(r);
  if (!graphs.eligible_with_hidden(batch)) {
    std::fprintf(stderr, "verify batch %d, K = %d: more rows than a verify graph holds, skipped\n", b, k);
    return;
  }
  Tensor hidden;
  auto step = [&](bool graph) {
    if (graph) {
      graphs.run_with_hidden(
          batch, [&](const ForwardBatch& fb, Tensor& l, Tensor& h) { model.forward_with_hidden(fb, caches, l, h); },
          hidden);
    } else {
      Tensor logits;
      model.forward_with_hidden(batch, caches, logits, hidden);
    }
    cu::synchronize();
    for (int s = 0; s < b; ++s) {
      batch.seqs[s].ctx_len += q;
      for (int i = 0; i < q; ++i) batch.positions[size_t(s * q + i)] += q;
    }
  };
  for (int i = 0; i < 3; ++i) step(true);  // eager, capture, first replay
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step(true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
  const int eager_steps = 4;
  const auto e0 = std::chrono::steady_clock::now();
  for (int i = 0; i < eager_steps; ++i) step(false);
  const double ems = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count() / eager_steps;
  const int mid_ctx = context + q * (3 + steps / 2);
  const double state_bytes = double(dtype_size(ssm));
  const Cost cost = forward_cost(dims, b, b * q, mid_ctx, b * q, state_bytes, kv_bytes);
  rows.push_back({cat("verify batch ", b, ", K = ", k, ssm_label(ssm, kv_bytes), " (graphs)"), b * q, ms, cost});
  rows.push_back({cat("verify batch ", b, ", K = ", k, ssm_label(ssm, kv_bytes), " (eager)"), b * q, ems, cost});
  std::fprintf(stderr, "verify batch %d, K = %d: %.3f ms/step as graphs (%d captured), %.3f ms eager\n", b, k, ms,
               graphs.captured(), ems);
}

int run(int argc, char** argv) {
  CLI::App app{"GPU roofline benchmark: decode and prefill against the measured copy bandwidth and bf16 GEMM rate",
               "strata bench --roofline"};
  std::string model_dir, load_format = "auto", batches_text = "1,8,64,256", prefill_text = "2048,8192", out;
  std::vector<std::string> ssm_names{"float32"};
  std::string kv_name = "auto";
  int context = 1024, steps = 32, verify = 0;
  bool breakdown = true;
  bool roofline = true;
  app.add_flag("--roofline", roofline, "run this benchmark");
  app.add_option("--model", model_dir, "model folder (config.json; weights unless --load-format dummy)")->required();
  app.add_option("--load-format", load_format, "auto | safetensors | dummy (random weights made on the GPU)");
  app.add_option("--batches", batches_text, "decode batch sizes (default 1,8,64,256)");
  app.add_option("--prefill", prefill_text, "prefill prompt lengths (default 2048,8192)");
  app.add_option("--context", context, "tokens already cached per sequence when decode is timed (default 1024)");
  app.add_option("--steps", steps, "timed decode steps per batch size (default 32)");
  app.add_option("--out", out, "also write the results as a markdown file");
  app.add_option("--mamba-ssm-dtype,--mamba-ssm-cache-dtype", ssm_names,
                 "recurrent-state dtypes to time, comma-separated: float32 (default), bfloat16 or both "
                 "(each decode batch and prefill runs once per dtype, one model load)")
      ->delimiter(',');
  add_kv_cache_dtype_option(app, kv_name);
  app.add_option("--verify", verify,
                 "also time speculative verify steps of K drafts (K + 1 tokens a sequence, every row's logits and "
                 "hidden state) at each batch, as CUDA graphs and eagerly (loads the MTP head; default 0: none)");
  app.add_flag("!--no-breakdown", breakdown, "skip the per-op time breakdown");
  CLI11_PARSE(app, argc, argv);
  const std::vector<int32_t> batches = parse_ids(batches_text, "--batches");
  const std::vector<int32_t> prompts = prefill_text.empty() ? std::vector<int32_t>{} : parse_ids(prefill_text, "--prefill");
  STRATA_CHECK(context >= 0 && steps > 0, "--context must be >= 0 and --steps > 0");
  STRATA_CHECK(verify >= 0 && verify < cu::DecodeGraphs::kMaxTokensPerSeq, "--verify must be in [0, ",
               cu::DecodeGraphs::kMaxTokensPerSeq - 1, "], got ", verify);
  std::vector<DType> ssm_dtypes;
  for (const std::string& name : ssm_names) ssm_dtypes.push_back(parse_ssm_state_dtype(name));
  cu::init();

  std::ostringstream md;
  char buf[512];
  const Ceilings ceil = measure_ceilings();
  std::snprintf(buf, sizeof buf, "ceilings: device-to-device copy %.0f GB/s (read + write), cuBLASLt bf16 GEMM "
                "8192^3 %.0f TFLOP/s\n", ceil.copy_gbs, ceil.gemm_tflops);
  std::fputs(buf, stderr);
  md << "Ceilings measured in this run: device-to-device copy **" << int(ceil.copy_gbs)
     << " GB/s** (bytes read + written), cuBLASLt bf16 GEMM 8192^3 **" << int(ceil.gemm_tflops) << " TFLOP/s**.\n\n";

  const Dims dims = read_dims(model_dir);
  const auto t_load = std::chrono::steady_clock::now();
  LoadOptions load{Device::kCuda, parse_load_format(load_format), {}};
  load.kv_cache_dtype = parse_kv_cache_dtype(kv_name);
  load.mtp = verify > 0;  // forward_with_hidden needs the head loaded
  const bool kv_fp8 = load.kv_cache_dtype == KvCacheDtype::kFp8E4M3;
  const double kv_bytes = kv_fp8 ? double(dims.head_dim + 1) / double(dims.head_dim) : 2.0;
  std::unique_ptr<Model> model = load_model(model_dir, load);
  cu::synchronize();
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();
  std::snprintf(buf, sizeof buf, "model: %s, %.1f GB of weights on the GPU, loaded in %.1f s\n",
                model->info().model_type.c_str(), double(model->info().weight_bytes) / 1e9, load_s);
  std::fputs(buf, stderr);
  md << "Model: `" << model->info().model_type << "`, " << double(model->info().weight_bytes) / 1e9
     << " GB of weights on the GPU (" << load_format << ").\n\n";
  const std::string gemvs = gemv_table(dims, ceil);
  std::fputs(gemvs.c_str(), stderr);
  md << gemvs << "\n";
  const int64_t vocab = model->info().vocab_size;
  const int block_size = 16;
  std::mt19937 rng(7);
  std::vector<Row> rows;
  std::vector<std::pair<std::string, std::string>> breakdowns;
  std::vector<std::string> failures;

  for (DType ssm : ssm_dtypes) for (int32_t b : batches) {
    STRATA_CHECK(b > 0 && b <= 256, "--batches: sizes must be in [1, 256], got ", b);
    const int pages = (context + steps + 8 + block_size - 1) / block_size;
    const double state_bytes = double(dtype_size(ssm));
    Caches caches = Caches::allocate(with_ssm_dtype(model->info().cache, ssm), b * pages, block_size, b, Device::kCuda);
    cu::DecodeGraphs graphs(vocab);
    ForwardBatch batch = make_batch(b, 1, context, block_size, pages, rng, vocab);
    for (int s = 0; s < b; ++s) batch.logit_rows.push_back(s);
    Tensor ids = Tensor::empty({b}, DType::kI32, Device::kCuda);
    auto forward = [&](const ForwardBatch& fb, Tensor& logits) { model->forward(fb, caches, logits); };
    auto step = [&](bool graph) {
      Tensor logits;
      if (graph) {
        logits = graphs.run(batch, forward);
      } else {
        model->forward(batch, caches, logits);
      }
      ops::argmax(logits, ids);
      Tensor host = ids.to(Device::kCpu);  // the step's tokens: the next step's input
      for (int s = 0; s < b; ++s) {
        batch.token_ids[s] = host.data<int32_t>()[s];
        batch.positions[s] += 1;
        batch.seqs[s].ctx_len += 1;
      }
    };
    for (int i = 0; i < 3; ++i) step(true);  // eager, capture, first replay
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(true);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
    const int mid_ctx = context + 3 + steps / 2;
    rows.push_back({cat("decode batch ", b, ssm_label(ssm, kv_bytes), " (graphs)"), b, ms,
                    forward_cost(dims, b, b, mid_ctx, b, state_bytes, kv_bytes)});
    if (b == batches.front()) {
      const int eager_steps = 4;
      const auto e0 = std::chrono::steady_clock::now();
      for (int i = 0; i < eager_steps; ++i) step(false);
      const double ems = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - e0).count() / eager_steps;
      rows.push_back({cat("decode batch ", b, ssm_label(ssm, kv_bytes), " (eager, no graphs)"), b, ems,
                      forward_cost(dims, b, b, mid_ctx, b, state_bytes, kv_bytes)});
    }
    if (breakdown && (b == 1 || b == batches.back())) {
      breakdowns.push_back({cat("decode batch ", b, ssm_label(ssm, kv_bytes), ", context ~", batch.seqs[0].ctx_len, " (graph step ",
                                std::to_string(ms * 1e3).substr(0, 7), " us)"),
                            breakdown_table(profile_forward(*model, batch, caches), 1)});
      // Printed as soon as measured: a later run that fails must not lose it.
      std::fprintf(stderr, "per-op GPU time, %s:\n%s", breakdowns.back().first.c_str(),
                   breakdowns.back().second.c_str());
    }
    std::fprintf(stderr, "decode batch %d%s: %.3f ms/step, %.0f tokens/s (%d graphs)\n", b, ssm_label(ssm, kv_bytes).c_str(),
                 ms, b * 1e3 / ms, graphs.captured());
    if (verify > 0) verify_rows(*model, dims, b, verify, context, block_size, rng, ssm, kv_bytes, steps, rows);
  }

  for (DType ssm : ssm_dtypes) for (int32_t len : prompts) {
    STRATA_CHECK(len > 0, "--prefill: lengths must be positive");
    try {
      rows.push_back(prefill_row(*model, dims, len, block_size, rng, vocab, ssm, kv_bytes, breakdown,
                                 &breakdowns));
    } catch (const Error& e) {
      // One size that does not fit must not lose the others' results.
      std::fprintf(stderr, "prefill %d: failed: %s\n", len, e.what());
      failures.push_back(cat("prefill ", len, " tokens: ", e.what()));
    }
  }

  md << "| run | tokens/s | ms/step | GB moved/step (weights + caches) | TFLOP/step | GB/s | % of copy BW | "
        "TFLOP/s | % of GEMM rate |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    const double s = r.ms * 1e-3;
    const double gbs = r.cost.bytes() / s / 1e9, tfs = r.cost.flops / s / 1e12;
    std::snprintf(buf, sizeof buf, "| %s | %.0f | %.3f | %.2f (%.2f + %.2f) | %.3f | %.0f | %.1f%% | %.1f | %.1f%% |\n",
                  r.what.c_str(), double(r.tokens) / s, r.ms, r.cost.bytes() / 1e9, r.cost.weight_bytes / 1e9,
                  r.cost.cache_bytes / 1e9, r.cost.flops / 1e12, gbs, 100 * gbs / ceil.copy_gbs, tfs,
                  100 * tfs / ceil.gemm_tflops);
    md << buf;
  }
  for (const std::string& f : failures) md << "| " << f << " | | | | | | | | |\n";
  for (const auto& [title, table] : breakdowns) md << "\nPer-op GPU time, " << title << ":\n\n" << table;
  std::fputs(md.str().c_str(), stdout);
  if (!out.empty()) {
    std::ofstream f(out);
    STRATA_CHECK(f.good(), "--out: cannot write ", out);
    f << md.str();
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace

int run_roofline_bench(int argc, char** argv) { return run(argc, argv); }

}  // namespace strata::cli

#endif  // STRATA_WITH_CUDA
