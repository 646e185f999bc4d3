// strata info: the memory plan of a checkpoint folder without loading its weights: the weights
// as stored and as loaded (float32 on the CPU reference path), and the cache bytes per token of
// every layer type plus the per-sequence state. deepseek_v4 plans come from config.json alone;
// other families need --load (the cache layout is declared by the loaded model).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "strata/cli/command.h"
#include "strata/cli/common.h"
#include "strata/cli/engine_options.h"
#include "strata/core/error.h"
#include "strata/engine/engine.h"
#include "strata/io/checkpoint.h"
#include "strata/models/deepseek_v4_config.h"
#include "strata/models/model.h"

namespace strata::cli {
namespace {

std::string human(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

bool is_scale(const std::string& n) {
  return n.ends_with(".scale") || n.ends_with("_scale_inv") || n.ends_with("_scale");
}

void print_weights(const Checkpoint& ckpt) {
  std::map<std::string, std::pair<size_t, size_t>> by_dtype;  // dtype -> (tensors, bytes)
  double params = 0, loaded = 0, scale_bytes = 0, stored = 0, skipped_bytes = 0;
  size_t tensors = 0, skipped = 0;
  for (const std::string& n : ckpt.names()) {
    const TensorInfo& t = ckpt.info(n);
    stored += double(t.nbytes());
    auto& d = by_dtype[std::string(dtype_name(t.dtype))];
    d.first += 1;
    d.second += t.nbytes();
    if (n.starts_with("mtp.") || n.starts_with("model.mtp.")) {
      ++skipped;
      skipped_bytes += double(t.nbytes());
      continue;
    }
    ++tensors;
    if (is_scale(n)) {
      scale_bytes += double(t.nbytes());
      continue;
    }
    // A U8/I8 weight with a scale beside it is MXFP4: two elements per byte.
    const std::string base = n.ends_with(".weight") ? n.substr(0, n.size() - 7) : n;
    const bool fp4 = (t.dtype == DType::kU8 || t.dtype == DType::kI8) &&
                     (ckpt.has(base + ".scale") || ckpt.has(n + "_scale"));
    const double count = double(shape_numel(t.shape)) * (fp4 ? 2 : 1);
    params += count;
    loaded += count * 4;  // float32 (integer tables as int32)
  }
  std::printf("weights          %zu tensors, %.4g parameters\n", tensors, params);
  std::printf("  on disk        %s", human(stored).c_str());
  for (const auto& [dt, v] : by_dtype) std::printf("; %s %zu x %s", dt.c_str(), v.first, human(double(v.second)).c_str());
  std::printf("\n  quant scales   %s\n", human(scale_bytes).c_str());
  std::printf("  as loaded      %s (float32, CPU reference path)\n", human(loaded).c_str());
  if (skipped) std::printf("  not loaded     %zu mtp.* tensors, %s\n", skipped, human(skipped_bytes).c_str());
}

struct LayerGroup {
  std::string label;
  int count = 0;
  double bytes_per_token = 0;  // paged
  double bytes_per_sequence = 0;  // slots
  std::string detail;
};

// `window` > 0: the one-token-per-entry pools are read only over the last `window` positions, so
// an engine that reclaims pages outside the window holds at most window + one page of them.
void print_cache(const CacheSpec& spec, const std::vector<std::string>& labels, int block_size,
                 int64_t window) {
  std::map<std::string, LayerGroup> groups;
  std::vector<std::string> order;
  double per_token = 0, per_seq = 0, windowed_per_token = 0;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerCacheSpec& l = spec.layers[i];
    LayerGroup g;
    g.label = labels[i];
    for (const PagedCacheSpec& p : l.paged) {
      const double entry = double(shape_numel(p.per_entry) * int64_t(dtype_size(p.dtype)));
      g.bytes_per_token += entry / p.tokens_per_entry;
      if (window > 0 && p.tokens_per_entry == 1) windowed_per_token += entry;
      g.detail += cat(g.detail.empty() ? "" : " + ", p.name, " ", entry, " B/", p.tokens_per_entry,
                      p.tokens_per_entry == 1 ? " token" : " tokens");
    }
    for (const SlotCacheSpec& s : l.slots) g.bytes_per_sequence += double(shape_numel(s.shape) * int64_t(dtype_size(s.dtype)));
    auto it = groups.find(g.label);
    if (it == groups.end()) {
      order.push_back(g.label);
      g.count = 1;
      groups[g.label] = g;
    } else {
      it->second.count += 1;
    }
    per_token += g.bytes_per_token;
    per_seq += g.bytes_per_sequence;
  }
  std::printf("cache per token, by layer type (paged pools; state per sequence in slots):\n");
  for (const std::string& label : order) {
    const LayerGroup& g = groups[label];
    std::printf("  %-30s x%-3d %10.2f B/token  %10s/sequence   (%s)\n", g.label.c_str(), g.count,
                g.bytes_per_token, human(g.bytes_per_sequence).c_str(), g.detail.c_str());
  }
  std::printf("  %-30s      %10.2f B/token  %10s/sequence\n", "all layers", per_token, human(per_seq).c_str());
  std::printf("  page of %d tokens: %s\n", block_size, human(double(spec.bytes_per_block(block_size))).c_str());
  for (double ctx : {4096.0, 131072.0, 1048576.0}) {
    std::printf("  context %7.0f: %s per sequence", ctx, human(ctx * per_token + per_seq).c_str());
    if (window > 0) {
      const double held = std::min(ctx, double(window + block_size));
      std::printf("; %s with pages outside the %lld-token window reclaimed",
                  human(ctx * (per_token - windowed_per_token) + held * windowed_per_token + per_seq).c_str(),
                  (long long)window);
    }
    std::printf("\n");
  }
}

int run(int argc, char** argv) {
  CLI::App app{"Print the memory plan of a checkpoint folder: weights and cache bytes per token", "strata info"};
  std::string model_dir;
  bool load = false;
  std::string ssm_dtype = "float32", kv_dtype = "auto";
  int block_size = EngineConfig{}.block_size;  // the page the engine uses without --block-size
  app.add_option("--model", model_dir, "checkpoint folder (default: the bundled model)");
  app.add_flag("--load", load, "load the model to read its cache layout (families other than deepseek_v4)");
  app.add_option("--block-size", block_size,
                 cat("tokens per cache page for the page-size line (default ", block_size, ", as the engine's)"));
  add_ssm_dtype_option(app, ssm_dtype);
  add_kv_cache_dtype_option(app, kv_dtype);
  CLI11_PARSE(app, argc, argv);
  LoadOptions options;
  options.ssm_state_dtype = parse_ssm_state_dtype(ssm_dtype);
  options.kv_cache_dtype = parse_kv_cache_dtype(kv_dtype);
  model_dir = model_dir_or_default(model_dir);
  STRATA_CHECK(block_size > 0, "--block-size must be positive");
  Checkpoint ckpt = Checkpoint::open(model_dir);
  const nlohmann::json& cfg = ckpt.config();
  const std::string type = cfg.is_object() && cfg.contains("model_type") && cfg["model_type"].is_string()
                               ? cfg["model_type"].get<std::string>() : "?";
  std::printf("model            %s (%s)\n", model_dir.c_str(), type.c_str());
  print_weights(ckpt);
  if (type == "deepseek_v4") {
    check_kv_cache_dtype(model_dir, type, options.kv_cache_dtype);
    const DeepseekV4Config c = parse_deepseek_v4_config(cfg, ckpt.config_path());
    std::vector<std::string> labels;
    std::map<std::string, int> counts;
    for (Dsv4Attention a : c.attention) {
      labels.emplace_back(dsv4_attention_name(a));
      counts[labels.back()] += 1;
    }
    std::printf("layers           %lld:", (long long)c.layers);
    for (const auto& [k, v] : counts) std::printf(" %d %s", v, k.c_str());
    std::printf("; sliding window %lld, compress ratios %lld / %lld, index top-k %lld\n",
                (long long)c.window, (long long)c.csa_ratio, (long long)c.hca_ratio, (long long)c.index_topk);
    print_cache(deepseek_v4_cache_spec(c), labels, block_size, c.window);
    return 0;
  }
  if (!load) {
    std::printf("cache            run with --load to read the cache layout from the loaded model\n");
    return 0;
  }
  auto model = load_model(model_dir, options);
  std::vector<std::string> labels;
  for (const LayerCacheSpec& l : model->info().cache.layers) {
    std::string label;
    for (const PagedCacheSpec& p : l.paged) label += (label.empty() ? "" : "+") + p.name;
    for (const SlotCacheSpec& s : l.slots) label += (label.empty() ? "" : "+") + s.name;
    labels.push_back(label.empty() ? "(no cache)" : label);
  }
  print_cache(model->info().cache, labels, block_size, 0);
  return 0;
}

const bool kRegistered = register_command({"info", "print the memory plan: weights and cache bytes per token", run});

}  // namespace
}  // namespace strata::cli
