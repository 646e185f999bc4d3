#include "strata/server/reasoning_parser.h"

#include <algorithm>

namespace strata::server {

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  const size_t most = std::min(text.size(), tag.size() - 1);
  for (size_t n = most; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag,
                            std::string_view close_tag) {
  const size_t open = prompt.rfind(open_tag);
  if (open == std::string_view::npos) return false;
  const size_t close = prompt.rfind(close_tag);
  return close == std::string_view::npos || close < open;
}

ReasoningParser::ReasoningParser(bool starts_in_reasoning, std::string open_tag,
                                 std::string close_tag)
    : state_(starts_in_reasoning ? State::kReasoning : State::kStart),
      open_(std::move(open_tag)),
      close_(std::move(close_tag)) {}

ReasoningParser::Delta ReasoningParser::push(std::string_view text) {
  Delta d;
  held_.append(text);
  run(&d);
  return d;
}

void ReasoningParser::run(Delta* d) {
  for (;;) {
    if (state_ == State::kContent) {
      d->content += held_;
      held_.clear();
      return;
    }
    if (state_ == State::kStart) {
      // Only an open tag at the very start of the output (after whitespace) opens reasoning.
      const size_t first = held_.find_first_not_of(" \t\r\n");
      if (first == std::string::npos) return;  // only whitespace so far: undecided
      const std::string_view rest = std::string_view(held_).substr(first);
      if (rest.size() >= open_.size() && rest.substr(0, open_.size()) == open_) {
        held_.erase(0, first + open_.size());
        state_ = State::kReasoning;
        continue;
      }
      if (std::string_view(open_).substr(0, rest.size()) == rest) return;  // may become the tag
      state_ = State::kContent;
      continue;
    }
    // kReasoning
    const size_t close = held_.find(close_);
    if (close != std::string::npos) {
      d->reasoning.append(held_, 0, close);
      held_.erase(0, close + close_.size());
      state_ = State::kContent;
      continue;
    }
    const size_t keep = partial_tag_suffix(held_, close_);
    d->reasoning.append(held_, 0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return;
  }
}

ReasoningParser::Delta ReasoningParser::finish() {
  Delta d;
  run(&d);
  if (state_ == State::kReasoning) d.reasoning += held_;
  else d.content += held_;
  held_.clear();
  return d;
}

}  // namespace strata::server
