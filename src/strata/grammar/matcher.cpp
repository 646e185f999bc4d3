#include "strata/grammar/matcher.h"

#include <algorithm>

#include "strata/core/error.h"

namespace strata::grammar {

int32_t StackEngine::node(int32_t position, int32_t parent) {
  uint64_t key = (uint64_t(uint32_t(position)) << 32) | uint32_t(parent);
  auto [it, inserted] = index_.try_emplace(key, int32_t(nodes_.size()));
  if (inserted) {
    nodes_.push_back(Node{position, parent});
    seen_.push_back(0);
  }
  return it->second;
}

void StackEngine::clear() {
  nodes_.clear();
  steps_.clear();
  index_.clear();
  seen_.clear();
  epoch_ = 0;
}

// Expands node into tops: rule references push frames, complete frames pop into their parent
// (advanced past the reference). A reference that ends its alternative is a tail call: the
// child's parent is the frame's own parent, so right recursion does not grow the stack.
void StackEngine::expand(int32_t start_node, StackState* out) {
  const Grammar& g = *g_;
  work_.clear();
  work_.push_back(start_node);
  while (!work_.empty()) {
    int32_t n = work_.back();
    work_.pop_back();
    if (seen_[size_t(n)] == epoch_) continue;
    seen_[size_t(n)] = epoch_;
    Node nd = nodes_[size_t(n)];
    if (g.at_end(nd.position)) {
      if (nd.parent == kBottom) {
        out->can_end = true;
      } else {
        Node p = nodes_[size_t(nd.parent)];
        work_.push_back(node(p.position + 1, p.parent));
      }
      continue;
    }
    const Element& e = g.element(nd.position);
    if (!e.is_rule()) {
      out->tops.push_back(n);
      continue;
    }
    int32_t child_parent = g.at_end(nd.position + 1) ? nd.parent : n;
    for (int32_t alt : g.alternative_starts(e.rule)) work_.push_back(node(alt, child_parent));
  }
}

static void normalize(StackState* s) {
  std::sort(s->tops.begin(), s->tops.end());
  s->tops.erase(std::unique(s->tops.begin(), s->tops.end()), s->tops.end());
}

StackState StackEngine::start(int32_t position, int32_t parent) {
  StackState s;
  ++epoch_;
  expand(node(position, parent), &s);
  normalize(&s);
  return s;
}

void StackEngine::advance(const StackState& in, uint8_t c, StackState* out) {
  out->tops.clear();
  out->can_end = false;
  const Grammar& g = *g_;
  for (int32_t t : in.tops) {
    Node nd = nodes_[size_t(t)];
    if (!g.element(nd.position).bytes.test(c)) continue;
    // What one top becomes after c depends only on the top (stacks are persistent): memoized.
    uint64_t key = (uint64_t(uint32_t(t)) << 8) | c;
    auto it = steps_.find(key);
    if (it == steps_.end()) {
      StackState step;
      ++epoch_;
      expand(node(nd.position + 1, nd.parent), &step);
      normalize(&step);
      it = steps_.emplace(key, std::move(step)).first;
    }
    out->tops.insert(out->tops.end(), it->second.tops.begin(), it->second.tops.end());
    out->can_end |= it->second.can_end;
  }
  if (in.tops.size() > 1) normalize(out);
}

bool StackEngine::advance_all(const StackState& in, std::string_view bytes, StackState* out) {
  *out = in;
  StackState next;
  for (unsigned char c : bytes) {
    advance(*out, c, &next);
    std::swap(*out, next);
    if (out->dead()) return false;
  }
  return !out->dead();
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g, int max_rollback)
    : engine_(std::move(g)), max_rollback_(max_rollback) {
  reset();
}

void GrammarMatcher::reset() {
  engine_.clear();
  history_.clear();
  const Grammar& g = engine_.grammar();
  state_ = StackState{};
  for (int32_t alt : g.alternative_starts(g.root())) {
    StackState s = engine_.start(alt);
    state_.tops.insert(state_.tops.end(), s.tops.begin(), s.tops.end());
    state_.can_end |= s.can_end;
  }
  std::sort(state_.tops.begin(), state_.tops.end());
  state_.tops.erase(std::unique(state_.tops.begin(), state_.tops.end()), state_.tops.end());
}

bool GrammarMatcher::can_accept(std::string_view bytes) {
  return !bytes.empty() && engine_.advance_all(state_, bytes, &scratch_);
}

bool GrammarMatcher::accept_token(std::string_view bytes) {
  if (!can_accept(bytes)) return false;
  history_.push_back(std::move(state_));
  if (int(history_.size()) > max_rollback_) history_.pop_front();
  state_ = std::move(scratch_);
  return true;
}

void GrammarMatcher::rollback(int n) {
  STRATA_CHECK(n >= 0 && n <= int(history_.size()), "grammar matcher: cannot roll back ", n,
               " tokens (", history_.size(), " kept)");
  for (int i = 0; i < n; ++i) {
    state_ = std::move(history_.back());
    history_.pop_back();
  }
}

}  // namespace strata::grammar
