// The grammar as a pushdown automaton over a set of stacks (Earley-like): a state is the set
// of stacks whose top is a byte-set element (what may come next), plus whether the root rule
// can be complete here. Stacks are chains of positions (grammar.h), shared and hash-consed in
// an arena, so a state is a small sorted vector of node ids and going back is free.
//
//   GrammarMatcher m(std::make_shared<Grammar>(from_gbnf(text)));
//   m.accept_token("{\"a\"");   // false (and no change) when the grammar refuses the bytes
//   m.rollback(1);              // the state before the last accepted token
//   m.can_end();                // the root rule is complete here
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "strata/grammar/grammar.h"

namespace strata::grammar {

constexpr int32_t kBottom = -1;  // the parent of a root (or context-free) frame

struct StackState {
  std::vector<int32_t> tops;  // sorted node ids whose position is before a byte-set element
  bool can_end = false;       // a stack popped to the bottom: the start rule can end here
  bool dead() const { return tops.empty() && !can_end; }
};

// The arena of stack nodes and the operations on states.
class StackEngine {
 public:
  explicit StackEngine(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {}
  const Grammar& grammar() const { return *g_; }

  // The state of a frame at position p (expanded) over parent (kBottom for the root).
  StackState start(int32_t position, int32_t parent = kBottom);
  // The state after byte c; dead() when no stack takes it.
  void advance(const StackState& in, uint8_t c, StackState* out);
  // Whether every byte is accepted, leaving the final state in *out.
  bool advance_all(const StackState& in, std::string_view bytes, StackState* out);

  // The node of a frame at `position` over `parent`, not expanded (a stack built by hand).
  int32_t frame(int32_t position, int32_t parent) { return node(position, parent); }
  int32_t position(int32_t node) const { return nodes_[size_t(node)].position; }
  int32_t parent(int32_t node) const { return nodes_[size_t(node)].parent; }
  size_t num_nodes() const { return nodes_.size(); }
  void clear();

 private:
  struct Node {
    int32_t position;
    int32_t parent;
  };
  int32_t node(int32_t position, int32_t parent);
  void expand(int32_t node, StackState* out);
  std::shared_ptr<const Grammar> g_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
  std::unordered_map<uint64_t, StackState> steps_;  // (top node, byte) -> the state it becomes
  std::vector<int32_t> work_;
  std::vector<uint32_t> seen_;  // per node: the expansion epoch that last visited it
  uint32_t epoch_ = 0;
};

class GrammarMatcher {
 public:
  // Keeps the states of the last max_rollback tokens.
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g, int max_rollback = 64);

  // Accepts all bytes of the token or none (false, state unchanged). An empty token is
  // refused.
  bool accept_token(std::string_view bytes);
  // Whether accept_token would succeed, without changing anything.
  bool can_accept(std::string_view bytes);
  // The root rule is complete here (an end of sequence is allowed).
  bool can_end() const { return state_.can_end; }
  // Complete and nothing more can follow.
  bool is_terminated() const { return state_.can_end && state_.tops.empty(); }
  // Undoes the last n accepted tokens (n <= rollback_depth()).
  void rollback(int n);
  int rollback_depth() const { return int(history_.size()); }
  void reset();

  const StackState& state() const { return state_; }
  StackEngine& engine() { return engine_; }
  const Grammar& grammar() const { return engine_.grammar(); }

 private:
  StackEngine engine_;
  StackState state_, scratch_;
  std::deque<StackState> history_;
  int max_rollback_;
};

}  // namespace strata::grammar
