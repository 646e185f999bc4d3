// gdn_decode_step's per-token states (ForwardBatch::state_steps, speculative
// rollback without a replay): the state and conv state it stores after token j
// of a sequence are bitwise those of the sequence's first j + 1 tokens run
// alone from the same pools, and storing them changes neither the outputs nor
// the final states.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "batch_test_util.h"
#include "strata/core/error.h"
#include "strata/ops/ops.h"

namespace strata {
namespace {

using testing::make_batch;
using testing::random_tensor;

Tensor copy_of(const Tensor &t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

bool same_bytes(const Tensor &a, const Tensor &b) {
  return a.nbytes() == b.nbytes() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

TEST(OpsGdnStep, PerTokenStatesAreThoseOfEachPrefix) {
  std::mt19937 rng(21);
  const int64_t hk = 2, hv = 4, dk = 16, dv = 8, kw = 4, seqs = 3, count = 3;
  const int64_t conv_dim = 2 * hk * dk + hv * dv, slots = seqs + seqs * count;
  const std::vector<int32_t> q_lens{4, 1, 3}, ctx_lens{5, 0, 9};
  int blocks = 0;
  ForwardBatch batch = make_batch(q_lens, ctx_lens, 16, &blocks);
  const int64_t t = batch.num_tokens();
  const Tensor qkv = random_tensor({t, conv_dim}, rng),
               z = random_tensor({t, hv, dv}, rng);
  const Tensor a = random_tensor({t, hv}, rng), b = random_tensor({t, hv}, rng);
  const Tensor conv_w = random_tensor({conv_dim, kw}, rng, 0.5f),
               a_log = random_tensor({hv}, rng, 0.5f);
  const Tensor dt = random_tensor({hv}, rng), norm_w = random_tensor({dv}, rng);
  const Tensor conv0 = random_tensor({slots, kw - 1, conv_dim}, rng),
               state0 = random_tensor({slots, hv, dk, dv}, rng, 0.5f);

  // Without per-token states, then with them (slots 3.. hold count a sequence
  // slot).
  Tensor conv_plain = copy_of(conv0), state_plain = copy_of(state0),
         out_plain = Tensor::empty({t, hv, dv}, DType::kF32);
  ops::gdn_decode_step(qkv, z, a, b, conv_w, conv_plain, a_log, dt, state_plain,
                       norm_w, 1e-6f, batch, out_plain);
  Tensor conv = copy_of(conv0), state = copy_of(state0),
         out = Tensor::empty({t, hv, dv}, DType::kF32);
  batch.state_steps = {int32_t(seqs), int32_t(count)};
  ops::gdn_decode_step(qkv, z, a, b, conv_w, conv, a_log, dt, state, norm_w,
                       1e-6f, batch, out);
  EXPECT_TRUE(same_bytes(out, out_plain));
  for (int64_t s = 0; s < seqs; ++s) {
    EXPECT_TRUE(same_bytes(state.rows(s, s + 1), state_plain.rows(s, s + 1)))
        << "sequence " << s;
    EXPECT_TRUE(same_bytes(conv.rows(s, s + 1), conv_plain.rows(s, s + 1)))
        << "sequence " << s;
  }

  int checked = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const SeqInBatch &seq = batch.seqs[size_t(s)];
    for (int32_t j = 0; j + 1 < seq.q_len; ++j) {
      // Sequence s's first j + 1 tokens alone, from the original pools.
      ForwardBatch prefix;
      SeqInBatch q = seq;
      q.q_start = 0;
      q.q_len = j + 1;
      prefix.seqs.push_back(q);
      for (int32_t i = 0; i <= j; ++i) {
        prefix.token_ids.push_back(0);
        prefix.positions.push_back(seq.ctx_len + i);
      }
      Tensor c = copy_of(conv0), st = copy_of(state0),
             o = Tensor::empty({j + 1, hv, dv}, DType::kF32);
      const auto prefix_rows = [&](const Tensor &x) {
        return x.rows(seq.q_start, seq.q_start + j + 1);
      };
      ops::gdn_decode_step(prefix_rows(qkv), prefix_rows(z), prefix_rows(a),
                           prefix_rows(b), conv_w, c, a_log, dt, st, norm_w,
                           1e-6f, prefix, o);
      const int64_t step = seqs + s * count + j, slot = seq.state_slot;
      EXPECT_TRUE(
          same_bytes(state.rows(step, step + 1), st.rows(slot, slot + 1)))
          << "sequence " << s << ", token " << j;
      EXPECT_TRUE(same_bytes(conv.rows(step, step + 1), c.rows(slot, slot + 1)))
          << "sequence " << s << ", token " << j;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 + 2);
  // Step slots of tokens that have none (the last token, the one-token
  // sequence) stay as they were.
  EXPECT_TRUE(same_bytes(state.rows(seqs + count, seqs + 2 * count),
                         state0.rows(seqs + count, seqs + 2 * count)));
  EXPECT_TRUE(same_bytes(state.rows(seqs + 2 * count + 2, seqs + 3 * count),
                         state0.rows(seqs + 2 * count + 2, seqs + 3 * count)));
}

TEST(OpsGdnStep, PerTokenStatesOutsideThePoolAreRefused) {
  int blocks = 0;
  ForwardBatch batch = make_batch({2}, {0}, 16, &blocks);
  batch.state_steps = {1, 4};
  EXPECT_THROW(batch.validate(16, blocks, 4),
               Error); // slot 0's steps end at slot 5 > 4
  batch.validate(16, blocks, 5);
}

} // namespace
} // namespace strata
