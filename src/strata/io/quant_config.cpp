#include "strata/io/quant_config.h"

#include <cctype>
#include <filesystem>
#include <fstream>

#include "strata/core/error.h"
#include "strata/io/checkpoint.h"
#include "strata/io/config.h"

namespace strata {
namespace {

// '*' matches any run of characters; everything else itself. Iterative, with one backtrack point.
bool glob_match(const std::string& pattern, const std::string& text) {
  size_t p = 0, t = 0, star = std::string::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (p < pattern.size() && pattern[p] == text[t]) {
      ++p, ++t;
    } else if (star != std::string::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// compressed-tensors' "re:" patterns, matched as Python's re.match does (from the start; to the
// end only with a trailing '$'), in the subset that ignore lists use: literal characters,
// escaped punctuation ('\.'), '.', '*' after an item, lists of characters [...] (no ranges), a
// leading '^' and a trailing '$'. One item of the pattern: a literal, any character, or a list.
struct ReItem {
  enum Kind { kChar, kAny, kClass } kind = kChar;
  std::string chars;   // kChar: one; kClass: the members
  bool star = false;   // followed by '*'
  bool matches(char c) const { return kind == kAny || chars.find(c) != std::string::npos; }
};

// The pattern's items and whether it is anchored at the end; false when it uses anything else.
bool parse_re(const std::string& re, std::vector<ReItem>* items, bool* anchored_end) {
  size_t i = re.size() > 0 && re[0] == '^' ? 1 : 0;
  size_t end = re.size();
  *anchored_end = end > i && re[end - 1] == '$' && (end < 2 || re[end - 2] != '\\');
  if (*anchored_end) --end;
  while (i < end) {
    ReItem item;
    const char c = re[i++];
    if (c == '.') {
      item.kind = ReItem::kAny;
    } else if (c == '\\') {  // an escaped punctuation character; \d, \w and the like are classes: not read
      if (i >= end || std::isalnum(static_cast<unsigned char>(re[i]))) return false;
      item.chars = std::string(1, re[i++]);
    } else if (c == '[') {
      item.kind = ReItem::kClass;
      while (i < end && re[i] != ']') {
        if (re[i] == '\\' || re[i] == '^' || re[i] == '-' || re[i] == '[') return false;
        item.chars += re[i++];
      }
      if (i >= end || item.chars.empty()) return false;
      ++i;  // ']'
    } else if (std::string("*+?|(){}^$]").find(c) != std::string::npos) {
      return false;
    } else {
      item.chars = std::string(1, c);
    }
    if (i < end && re[i] == '*') {
      item.star = true;
      ++i;
    }
    items->push_back(std::move(item));
  }
  return true;
}

// The items over the text as a set of states (items [0, k) matched so far): linear in the
// pattern times the text, whatever the pattern (no backtracking).
bool re_match_items(const std::vector<ReItem>& items, const std::string& text, bool anchored_end) {
  const size_t n = items.size();
  std::vector<char> cur(n + 1, 0), next(n + 1, 0);
  const auto skip_starred = [&](std::vector<char>& s) {
    for (size_t k = 0; k < n; ++k) {
      if (s[k] && items[k].star) s[k + 1] = 1;
    }
  };
  cur[0] = 1;
  skip_starred(cur);
  for (const char c : text) {
    if (!anchored_end && cur[n]) return true;  // re.match: a matching prefix will do
    std::fill(next.begin(), next.end(), 0);
    for (size_t k = 0; k < n; ++k) {
      if (cur[k] && items[k].matches(c)) next[items[k].star ? k : k + 1] = 1;
    }
    skip_starred(next);
    cur.swap(next);
  }
  return cur[n] != 0;
}

bool re_match(const std::string& re, const std::string& text) {
  std::vector<ReItem> items;
  bool anchored_end = false;
  return parse_re(re, &items, &anchored_end) && re_match_items(items, text, anchored_end);
}

void read_lists(const ConfigView& v, const std::vector<const char*>& keys, WeightQuant* q) {
  for (const char* key : keys) {
    if (!v.has(key)) continue;
    for (std::string& m : v.get_string_list(key)) q->not_converted.push_back(std::move(m));
  }
}

void parse_fp8(const ConfigView& v, WeightQuant* q) {
  const std::string fmt = v.get_string("fmt", "e4m3");
  if (fmt != "e4m3") v.fail_field("fmt", "'" + fmt + "' is not supported (expected \"e4m3\")");
  const std::string act = v.get_string("activation_scheme", "dynamic");
  if (act != "dynamic") {
    v.fail_field("activation_scheme", "'" + act + "' is not supported (expected \"dynamic\": static "
                 "activation scales are not read)");
  }
  if (!v.has("weight_block_size")) {
    v.fail_field("weight_block_size", "missing (per-tensor FP8 is not supported; expected [128, 128])");
  }
  const auto b = v.get_int_list("weight_block_size");
  if (b.size() != 2 || b[0] != kFp8Block || b[1] != kFp8Block) {
    v.fail_field("weight_block_size", "expected [128, 128], the block the FP8 loaders take");
  }
  read_lists(v, {"modules_to_not_convert", "ignored_layers"}, q);
  q->method = WeightQuant::Method::kFp8Block;
}

// ModelOpt's fields, in config.json's quantization_config or hf_quant_config.json's quantization.
void parse_modelopt(const ConfigView& v, WeightQuant* q) {
  const std::string algo = v.get_string("quant_algo");
  if (algo != "NVFP4") {
    v.fail_field("quant_algo", "'" + algo + "' is not supported (this build loads ModelOpt \"NVFP4\" checkpoints)");
  }
  const int64_t group = v.get_int("group_size", 16);
  if (group != 16) v.fail_field("group_size", "NVFP4 scales groups of 16 elements, got " + std::to_string(group));
  if (v.has("kv_cache_quant_algo")) {
    v.fail_field("kv_cache_quant_algo", "a quantised KV cache is not supported yet (the cache stays bf16; "
                 "its k_scale / v_scale tensors would go unread)");
  }
  read_lists(v, {"ignore", "exclude_modules", "modules_to_not_convert"}, q);
  q->method = WeightQuant::Method::kNvfp4;
}

// llm-compressor's compressed-tensors, its MXFP4 format (vLLM's CompressedTensorsW4A16Mxfp4 /
// W4A4MXFp4): every config group quantises weights to 4-bit floats in groups of 32; activations,
// when a group quantises them too (W4A4), are computed unquantised here, as NVFP4's are.
void parse_compressed_tensors(const ConfigView& v, WeightQuant* q) {
  const ConfigView groups = v.child("config_groups");
  if (!groups.json().is_object() || groups.json().empty()) v.fail_field("config_groups", "expected a non-empty object");
  for (const auto& [name, g] : groups.json().items()) {
    const ConfigView group = groups.child(name);
    const std::string format = group.get_string("format", v.get_string("format", ""));
    if (format != "mxfp4-pack-quantized") {
      group.fail_field("format", "'" + format + "' is not supported (this build loads compressed-tensors "
                       "\"mxfp4-pack-quantized\" checkpoints)");
    }
    const ConfigView w = group.child("weights");
    if (w.get_int("num_bits") != 4 || w.get_string("type") != "float" || w.get_string("strategy") != "group" ||
        w.get_int("group_size") != kMxfp4GroupSize) {
      group.fail_field("weights", "expected MXFP4: num_bits 4, type \"float\", strategy \"group\", group_size 32");
    }
  }
  read_lists(v, {"ignore"}, q);
  for (const std::string& m : q->not_converted) {
    std::vector<ReItem> items;
    bool anchored = false;
    if (m.rfind("re:", 0) == 0 && !parse_re(m.substr(3), &items, &anchored)) {
      v.fail_field("ignore", "'" + m + "' uses regular-expression syntax this build does not read (literals, "
                   "escaped punctuation, '.', '*' after an item, [...] lists, '^' and '$' are)");
    }
  }
  q->method = WeightQuant::Method::kMxfp4;
}

}  // namespace

bool WeightQuant::listed_not_converted(const std::string& tensor_name) const {
  const std::string module = tensor_name.substr(0, tensor_name.rfind('.'));  // without ".weight"
  for (const std::string& m : not_converted) {
    if (m.empty()) continue;
    if (m.rfind("re:", 0) == 0) {  // compressed-tensors: a regular expression over the module name
      if (re_match(m.substr(3), module)) return true;
      continue;
    }
    if (m.find('*') != std::string::npos ? glob_match(m, module) : tensor_name.find(m) != std::string::npos) {
      return true;
    }
  }
  return false;
}

WeightQuant parse_weight_quant(const nlohmann::json& root, const std::string& origin, const nlohmann::json& hf_quant,
                               const std::string& hf_origin) {
  WeightQuant q;
  q.origin = origin;
  const ConfigView top(&root, origin);
  ConfigView where = top;
  if (!top.has("quantization_config")) {
    const ConfigView text = ConfigView::text_config(root, origin);
    if (!text.has("quantization_config")) {
      if (hf_quant.is_null()) return q;
      q.origin = hf_origin;
      const ConfigView file(&hf_quant, q.origin);
      parse_modelopt(file.child("quantization"), &q);
      return q;
    }
    where = text;
  }
  const ConfigView v = where.child("quantization_config");
  const std::string method = v.get_string("quant_method");
  if (method == "fp8") {
    parse_fp8(v, &q);
  } else if (method == "modelopt") {
    parse_modelopt(v, &q);
  } else if (method == "compressed-tensors") {
    parse_compressed_tensors(v, &q);
  } else {
    v.fail_field("quant_method", "'" + method + "' is not supported (this build loads \"fp8\" block-scale, "
                 "\"modelopt\" NVFP4 and \"compressed-tensors\" MXFP4 checkpoints)");
  }
  return q;
}

WeightQuant weight_quant_of(const Checkpoint& ckpt) {
  const std::filesystem::path hf = std::filesystem::path(ckpt.dir()) / "hf_quant_config.json";
  nlohmann::json hf_quant;
  if (std::filesystem::exists(hf)) {
    std::ifstream in(hf);
    hf_quant = nlohmann::json::parse(in, nullptr, false);
    STRATA_CHECK(!hf_quant.is_discarded() && hf_quant.is_object(), hf.string(), ": not a JSON object");
  }
  return parse_weight_quant(ckpt.config(), ckpt.config_path(), hf_quant, hf.string());
}

}  // namespace strata
