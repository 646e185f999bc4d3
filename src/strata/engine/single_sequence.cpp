#include "strata/engine/single_sequence.h"

#include <cstring>
#include <string>

#include "strata/core/error.h"

namespace strata {

SingleSequence::SingleSequence(Model& model, int64_t max_tokens, int block_size) : model_(model) {
  STRATA_CHECK(max_tokens > 0, "SingleSequence: max_tokens must be positive");
  const int blocks = int((max_tokens + block_size - 1) / block_size);
  caches_ = model.allocate_caches(blocks, block_size, 1);
  for (int b = 0; b < blocks; ++b) block_table_.push_back(b);
}

Tensor SingleSequence::append(const std::vector<int32_t>& ids, bool all_rows) {
  STRATA_CHECK(!ids.empty(), "append: no tokens");
  STRATA_CHECK(length_ + int64_t(ids.size()) <= int64_t(block_table_.size()) * caches_.block_size,
               "append: ", length_ + ids.size(), " tokens exceed the sequence's room of ",
               block_table_.size() * caches_.block_size);
  ForwardBatch batch;
  batch.token_ids = ids;
  for (size_t i = 0; i < ids.size(); ++i) batch.positions.push_back(int32_t(length_ + i));
  SeqInBatch s;
  s.q_start = 0;
  s.q_len = int32_t(ids.size());
  s.ctx_len = int32_t(length_);
  s.block_table = block_table_;
  s.state_slot = 0;
  batch.seqs.push_back(s);
  if (all_rows) {
    for (size_t i = 0; i < ids.size(); ++i) batch.logit_rows.push_back(int32_t(i));
  } else {
    batch.logit_rows.push_back(int32_t(ids.size() - 1));
  }
  Tensor logits;
  model_.forward(batch, caches_, logits);
  length_ += int64_t(ids.size());
  return logits;
}

Tensor sequence_logits(Model& model, const std::vector<int32_t>& ids, const std::string& mode) {
  STRATA_CHECK(!ids.empty(), "logits: --ids is empty");
  size_t chunk = ids.size();
  if (mode == "stepwise") {
    chunk = 1;
  } else if (mode.rfind("chunked:", 0) == 0) {
    const std::string n = mode.substr(8);
    STRATA_CHECK(!n.empty() && n.find_first_not_of("0123456789") == std::string::npos && std::stoll(n) > 0 &&
                     n.size() < 10,
                 "--mode: chunk size in '", mode, "' must be a positive integer");
    chunk = size_t(std::stoll(n));
  } else {
    STRATA_CHECK(mode == "full", "--mode: expected full, stepwise or chunked:N, got '", mode, "'");
  }
  SingleSequence seq(model, int64_t(ids.size()));
  const int64_t vocab = model.info().vocab_size;
  Tensor out = Tensor::empty({int64_t(ids.size()), vocab}, DType::kF32);
  for (size_t start = 0; start < ids.size(); start += chunk) {
    std::vector<int32_t> part(ids.begin() + start, ids.begin() + std::min(ids.size(), start + chunk));
    Tensor l = seq.append(part, true);
    if (l.device() != Device::kCpu) l = l.to(Device::kCpu);  // a GPU model's logits
    std::memcpy(out.data<float>() + start * vocab, l.raw(), l.nbytes());
  }
  return out;
}

}  // namespace strata
