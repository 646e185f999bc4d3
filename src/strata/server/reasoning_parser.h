// Splits generated text into reasoning and answer at think tags, incrementally: Qwen3.5's
// templates open "<think>\n" in the prompt (thinking on), so the model writes its reasoning and
// then "</think>"; with thinking off the template closes the block itself and the model answers
// directly. A model may also open "<think>" itself at the very start of its output.
//
// push() may be fed text cut anywhere (even inside a tag): text that could still be the start
// of a tag is held back until it is decided, so no delta ever carries part of a tag. The
// concatenated deltas are the same however the text was cut.
#pragma once

#include <string>
#include <string_view>

namespace strata::server {

class ReasoningParser {
 public:
  struct Delta {
    std::string reasoning, content;
    bool empty() const { return reasoning.empty() && content.empty(); }
  };

  // starts_in_reasoning: the prompt ends inside an open think block.
  explicit ReasoningParser(bool starts_in_reasoning, std::string open_tag = "<think>",
                           std::string close_tag = "</think>");

  Delta push(std::string_view text);
  // The end of the output: releases what was held back.
  Delta finish();
  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State { kStart, kReasoning, kContent };
  void run(Delta* d);

  State state_;
  std::string open_, close_;
  std::string held_;
};

// The length of the longest suffix of `text` that is a proper prefix of `tag` (text that may
// still grow into the tag).
size_t partial_tag_suffix(std::string_view text, std::string_view tag);

// Whether a rendered prompt ends inside an open think block (the last open tag comes after the
// last close tag).
bool prompt_opens_reasoning(std::string_view prompt, std::string_view open_tag = "<think>",
                            std::string_view close_tag = "</think>");

}  // namespace strata::server
